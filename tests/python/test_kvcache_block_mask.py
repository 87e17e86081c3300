"""block_mask and document_ids in flash_attn_with_kvcache, contiguous and paged,
with an append in the same call, against a NumPy float64 model over the keys each row sees; refused inputs
leave the cache unchanged."""

import numpy as np
import pytest

import flashattn
from flashattn import Error


def visible(classes, docs, b, i, h, Nq, Nk, Qb, Kb, causal):
    """The keys query row i of head h of sequence b sees: full blocks whole, partial ones on the band and in the
    row's document."""
    diagonal = i + Nk - Nq
    keys = []
    for j in range(Nk):
        kind = classes[b, 0 if classes.shape[1] == 1 else h, i // Qb, j // Kb]
        band = not causal or j <= diagonal
        same = docs is None or docs[b, j] == docs[b, diagonal]
        if kind == 2 or (kind == 1 and band and same):
            keys.append(j)
    return keys


def random_mask(rng, B, H, Tq, Tk):
    """A random BlockMask (classes 0 absent, 1 partial, 2 full) and its classes (B, H, Tq, Tk)."""
    classes = rng.choice(3, size=(B, H, Tq, Tk), p=[0.3, 0.4, 0.3]).astype(np.int32)
    classes[0, 0, 0] = 0  # a query block that sees nothing
    num = (classes == 1).sum(-1).astype(np.int32)
    full_num = (classes == 2).sum(-1).astype(np.int32)
    idx = np.zeros((B, H, Tq, Tk), np.int32)
    full_idx = np.zeros((B, H, Tq, Tk), np.int32)
    for b in range(B):
        for h in range(H):
            for r in range(Tq):
                part = rng.permutation(np.flatnonzero(classes[b, h, r] == 1))
                full = rng.permutation(np.flatnonzero(classes[b, h, r] == 2))
                idx[b, h, r, :part.size] = part
                full_idx[b, h, r, :full.size] = full
    return flashattn.BlockMask(num, idx, full_num, full_idx, block_size=(2, 8)), classes


@pytest.mark.parametrize("paged,heads_mask,documents", [(False, 1, False), (True, 4, True), (False, 4, True)])
def test_flash_attn_with_kvcache_block_mask_after_the_append(paged, heads_mask, documents):
    rng = np.random.default_rng(11)
    B, Nq, Hq, Hkv, d, cached, page, Nmax = 2, 3, 4, 2, 32, 37, 16, 64
    Nk = cached + Nq
    q = rng.standard_normal((B, Nq, Hq, d)).astype(np.float32)
    k_new = rng.standard_normal((B, Nq, Hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((B, Nq, Hkv, d)).astype(np.float32)
    if paged:
        table = rng.permutation(B * Nmax // page).astype(np.int32).reshape(B, Nmax // page)
        shape = (B * Nmax // page, page, Hkv, d)
    else:
        table, shape = None, (B, Nmax, Hkv, d)
    k_cache = rng.standard_normal(shape).astype(np.float32)
    v_cache = rng.standard_normal(shape).astype(np.float32)
    mask, classes = random_mask(rng, B, heads_mask, (Nq + 1) // 2, (Nk + 7) // 8)
    docs = np.repeat(np.arange(Nmax // 6 + 1), 6)[None, :Nmax].repeat(B, 0).astype(np.int64) if documents else None
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cached,
                                                 block_table=table, causal=True, return_softmax_lse=True,
                                                 block_mask=mask, document_ids=docs)

    def logical(cache, b):
        return cache[b] if not paged else cache[table[b]].reshape(-1, Hkv, d)

    for b in range(B):
        K, V = logical(k_cache, b).astype(np.float64), logical(v_cache, b).astype(np.float64)
        for i in range(Nq):
            for h in range(Hq):
                g = h // (Hq // Hkv)
                keys = visible(classes, docs, b, i, h, Nq, Nk, 2, 8, True)
                if not keys:
                    np.testing.assert_array_equal(out[b, i, h], 0)
                    assert lse[b, h, i] == -np.inf
                    continue
                s = (K[keys, g] @ q[b, i, h].astype(np.float64)) * d**-0.5
                m = s.max()
                p = np.exp(s - m)
                np.testing.assert_allclose(out[b, i, h], p @ V[keys, g] / p.sum(), atol=2e-5, rtol=2e-5)
                assert lse[b, h, i] == pytest.approx(m + np.log(p.sum()), rel=1e-5, abs=1e-6)


def test_refused_block_masks_leave_the_cache_unchanged():
    rng = np.random.default_rng(5)
    B, Nq, Hq, Hkv, d, cached, Nmax = 2, 1, 2, 1, 16, 9, 32
    q = rng.standard_normal((B, Nq, Hq, d)).astype(np.float32)
    k_cache = rng.standard_normal((B, Nmax, Hkv, d)).astype(np.float32)
    v_cache = rng.standard_normal((B, Nmax, Hkv, d)).astype(np.float32)
    k_new = rng.standard_normal((B, 1, Hkv, d)).astype(np.float32)
    before = k_cache.copy()
    num = np.ones((B, 1, 1), np.int32)
    last = flashattn.BlockMask(num, np.full((B, 1, 1, 1), 2, np.int32), block_size=(1, 4))  # 10 keys: 3 blocks
    with pytest.raises(Error, match=r"block_mask.kv_indices\[0, 0, 0, 0\].*\[0, 3\).*got 3") as e:
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, k_new, cache_seqlens=cached,
                                          block_mask=flashattn.BlockMask(num, np.full((B, 1, 1, 1), 3, np.int32),
                                                                         block_size=(1, 4)))
    assert "cache_seqlens" in str(e.value)
    np.testing.assert_array_equal(k_cache, before)
    flashattn.flash_attn_with_kvcache(q, k_cache.copy(), v_cache.copy(), k_new, k_new, cache_seqlens=cached,
                                      block_mask=last)  # block 2 is the last one
    with pytest.raises(Error, match="key_indices"):
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, k_new, cache_seqlens=cached, block_mask=last,
                                          key_indices=np.zeros((B, Nq, Hkv, 1), np.int32))
    with pytest.raises(ValueError, match="document_ids"):
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cached,
                                          document_ids=np.zeros((B, 7), np.int32))
    np.testing.assert_array_equal(k_cache, before)
