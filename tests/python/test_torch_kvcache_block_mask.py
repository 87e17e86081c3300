"""flashattn.torch.flash_attn_with_kvcache with block_mask and document_ids (an int64 tensor): the NumPy
function's output on the same values, bit for bit, and the same append into the cache tensors."""

import numpy as np
import torch

import flashattn
import flashattn.torch as fat
from test_kvcache_block_mask import random_mask


def test_block_mask_and_document_ids_equal_the_numpy_call():
    rng = np.random.default_rng(12)
    B, Nq, Hq, Hkv, d, cached, page, Nmax = 2, 3, 4, 2, 32, 37, 16, 64
    q = rng.standard_normal((B, Nq, Hq, d)).astype(np.float32)
    k_new = rng.standard_normal((B, Nq, Hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((B, Nq, Hkv, d)).astype(np.float32)
    table = rng.permutation(B * Nmax // page).astype(np.int32).reshape(B, Nmax // page)
    k_cache = rng.standard_normal((B * Nmax // page, page, Hkv, d)).astype(np.float32)
    v_cache = rng.standard_normal((B * Nmax // page, page, Hkv, d)).astype(np.float32)
    mask, _ = random_mask(rng, B, Hq, (Nq + 1) // 2, (cached + Nq + 7) // 8)
    docs = np.repeat(np.arange(Nmax // 6 + 1), 6)[None, :Nmax].repeat(B, 0)
    tk, tv = torch.from_numpy(k_cache.copy()), torch.from_numpy(v_cache.copy())
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cached,
                                           block_table=table, causal=True, block_mask=mask, document_ids=docs)
    tout = fat.flash_attn_with_kvcache(torch.from_numpy(q), tk, tv, torch.from_numpy(k_new), torch.from_numpy(v_new),
                                       cache_seqlens=cached, block_table=torch.from_numpy(table), causal=True,
                                       block_mask=mask, document_ids=torch.from_numpy(docs).long())
    np.testing.assert_array_equal(tout.numpy(), out)
    np.testing.assert_array_equal(tk.numpy(), k_cache)
