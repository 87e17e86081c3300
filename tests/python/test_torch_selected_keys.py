"""flashattn.torch with key_indices (attention over selected keys): the tensors' results equal the NumPy
functions' on the same values (bfloat16 too), int64 index tensors are taken, and a call that autograd would
record is refused (there is no backward pass)."""

import numpy as np
import pytest
import torch

import flashattn
import flashattn.torch as fat
from flashattn import Error


def lists(B, Nq, Hkv, k, Nk, seed):
    g = torch.Generator().manual_seed(seed)
    out = torch.full((B, Nq, Hkv, k), -1, dtype=torch.int64)
    for b in range(B):
        for i in range(Nq):
            for h in range(Hkv):
                m = 1 + (b + i + h) % k
                out[b, i, h, :m] = torch.randperm(Nk, generator=g)[:m]
    return out


def test_flash_attn_func_matches_the_numpy_function():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 32), torch.randn(2, 50, 2, 32), torch.randn(2, 50, 2, 32)
    idx = lists(2, 3, 2, 8, 50, 1)
    with torch.no_grad():
        out, lse, _ = fat.flash_attn_func(q, k, v, key_indices=idx, return_attn_probs=True)
    ref, ref_lse, _ = flashattn.flash_attn_func(q.numpy(), k.numpy(), v.numpy(), key_indices=idx.numpy(),
                                                return_attn_probs=True)
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(lse.numpy(), ref_lse)
    out_bf16 = fat.flash_attn_func(q.bfloat16(), k.bfloat16(), v.bfloat16(), key_indices=idx)
    assert out_bf16.dtype == torch.bfloat16
    torch.testing.assert_close(out_bf16.float(), out, atol=3e-2, rtol=3e-2)


def test_a_recorded_call_is_refused():
    q = torch.randn(1, 2, 2, 16, requires_grad=True)
    k = torch.randn(1, 5, 1, 16)
    with pytest.raises(Error, match="no backward pass"):
        fat.flash_attn_func(q, k, k, key_indices=torch.zeros(1, 2, 1, 1, dtype=torch.int32))


def test_flash_attn_with_kvcache_bf16_paged():
    torch.manual_seed(2)
    q = torch.randn(2, 1, 8, 64).bfloat16()
    k_cache = torch.randn(6, 16, 1, 64).bfloat16()
    table = torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=torch.int32)
    seqlens = torch.tensor([40, 33], dtype=torch.int32)
    idx = lists(2, 1, 1, 12, 33, 3)
    out = fat.flash_attn_with_kvcache(q, k_cache, None, cache_seqlens=seqlens, block_table=table, head_dim_v=32,
                                      key_indices=idx)
    for b in range(2):
        K = k_cache[table[b].long()].reshape(-1, 1, 64).float()[:, 0]
        keys = idx[b, 0, 0][idx[b, 0, 0] >= 0]
        S = (q[b, 0].float() @ K[keys].T) * 64**-0.5
        ref = torch.softmax(S, -1) @ K[keys, :32]
        torch.testing.assert_close(out[b, 0].float(), ref, atol=2e-2, rtol=2e-2)
