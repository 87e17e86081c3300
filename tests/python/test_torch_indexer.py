"""flashattn.torch.lightning_indexer: bfloat16 and float16 tensors, paged caches, against the NumPy function
(which test_indexer.py holds to a float64 model)."""

import numpy as np
import torch

import flashattn
import flashattn.torch as ft


def test_bfloat16_tensors_match_the_numpy_function():
    g = torch.Generator().manual_seed(3)
    q = torch.randint(-2, 3, (2, 3, 4, 32), generator=g).to(torch.bfloat16)
    k = torch.randint(-3, 4, (2, 50, 1, 32), generator=g).to(torch.bfloat16)
    w = torch.randint(-3, 4, (2, 3, 4), generator=g).float()
    seqlens = torch.tensor([50, 20], dtype=torch.int32)
    indices, scores = ft.lightning_indexer(q, k, w, 12, cache_seqlens=seqlens, return_scores=True)
    assert indices.dtype == torch.int32 and indices.shape == (2, 3, 1, 12) and scores.dtype == torch.float32
    expected, expected_scores = flashattn.lightning_indexer(q.float().numpy(), k.float().numpy(), w.numpy(), 12,
                                                            cache_seqlens=seqlens.numpy(), return_scores=True)
    np.testing.assert_array_equal(indices.numpy(), expected)
    np.testing.assert_array_equal(scores.numpy(), expected_scores)


def test_paged_int8_cache():
    g = torch.Generator().manual_seed(4)
    q = torch.randint(-2, 3, (1, 1, 8, 64), generator=g).half()
    k = torch.randint(-3, 4, (6, 16, 1, 64), generator=g, dtype=torch.int8)
    scales = torch.full((6, 16), 0.5)
    w = torch.randint(-3, 4, (1, 1, 8), generator=g).float()
    table = torch.tensor([[4, 0, 2]], dtype=torch.int32)
    seqlens = torch.tensor([40], dtype=torch.int32)
    got = ft.lightning_indexer(q, k, w, 16, cache_seqlens=seqlens, block_table=table, k_scale=scales)
    expected = flashattn.lightning_indexer(q.numpy(), k.numpy(), w.numpy(), 16, cache_seqlens=seqlens.numpy(),
                                           block_table=table.numpy(), k_scale=scales.numpy())
    np.testing.assert_array_equal(got.numpy(), expected)
