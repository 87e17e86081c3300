"""flashattn.torch.flash_attn_varlen_func with block_table: packed query tensors over paged cache tensors,
against the NumPy float64 reference sequence by sequence and bit for bit the NumPy function's output; seqused_k
and cu_seqlens_k tensors give the same call, and both at once is an Error."""

import numpy as np
import pytest
import torch

import flashattn
import flashattn.torch as fat
from reference import attention, max_error


def problem(rows, keys, Hq=4, Hkv=2, d=32, page_size=8):
    torch.manual_seed(11)
    max_pages = -(-max(keys) // page_size)
    num_pages = len(rows) * max_pages + 1
    block_table = torch.randperm(num_pages)[: len(rows) * max_pages].reshape(len(rows), max_pages).int()
    k_cache, v_cache = torch.randn(num_pages, page_size, Hkv, d), torch.randn(num_pages, page_size, Hkv, d)
    cu_q = torch.tensor([0, *np.cumsum(rows)], dtype=torch.int32)
    return torch.randn(int(cu_q[-1]), Hq, d), k_cache, v_cache, block_table, cu_q


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_paged_varlen_tensors(dtype):
    rows, keys = [0, 4, 1, 33], [3, 9, 1, 60]
    q, k_cache, v_cache, block_table, cu_q = (x.to(dtype) if x.is_floating_point() else x
                                              for x in problem(rows, keys))
    cu_k = torch.tensor([0, *np.cumsum(keys)], dtype=torch.int32)
    out, lse, masks = fat.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 33, 60, causal=True,
                                                 block_table=block_table, return_attn_probs=True)
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (4, q.shape[0]) and masks is None
    by_used = fat.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, 33, 60, causal=True,
                                         block_table=block_table, seqused_k=torch.tensor(keys, dtype=torch.int32))
    assert torch.equal(out, by_used)
    if dtype == torch.float32:
        expected = flashattn.flash_attn_varlen_func(q.numpy(), k_cache.numpy(), v_cache.numpy(), cu_q.numpy(),
                                                    cu_k.numpy(), 33, 60, causal=True,
                                                    block_table=block_table.numpy())
        assert np.array_equal(out.numpy(), expected)
    k64, v64, q64 = (x.double().numpy() for x in (k_cache, v_cache, q))
    for b, Nk in enumerate(keys):
        pages = block_table[b].numpy()
        keys_b = k64[pages].reshape(-1, 2, 32)[None, :Nk]
        values_b = v64[pages].reshape(-1, 2, 32)[None, :Nk]
        ref = attention(q64[None, cu_q[b] : cu_q[b + 1]], keys_b, values_b, causal=True)
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2
        assert max_error(out[cu_q[b] : cu_q[b + 1]].double().numpy(), ref["o"][0]) < tolerance


def test_both_key_counts_given_is_an_error():
    q, k_cache, v_cache, block_table, cu_q = problem([2, 3], [5, 6])
    with pytest.raises(flashattn.Error, match="not both"):
        fat.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, torch.tensor([0, 5, 11], dtype=torch.int32), 3, 6,
                                   block_table=block_table, seqused_k=torch.tensor([5, 6], dtype=torch.int32))
