"""Attention over selected keys (key_indices) in flash_attn_func, flash_attn_with_kvcache (contiguous, paged,
quantized, V inside K, appending) and flash_attn_varlen_func over a paged cache (packed rows), against a
NumPy float64 model over exactly the listed keys; the refused lists and keywords, with nothing written."""

import numpy as np
import pytest

import flashattn
from flashattn import Error


def random_lists(rng, rows, heads_kv, k, visible):
    """(rows, heads_kv, k) int32: for row r some distinct positions of visible(r) = (lo, hi) in random slots,
    the rest −1; every fourth list empty."""
    lists = np.full((rows, heads_kv, k), -1, dtype=np.int32)
    for r in range(rows):
        lo, hi = visible(r)
        for g in range(heads_kv):
            if (r + g) % 4 == 3 or hi <= lo:
                continue
            m = rng.integers(1, min(k, hi - lo) + 1)
            slots = rng.permutation(k)[:m]
            lists[r, g, slots] = rng.permutation(np.arange(lo, hi))[:m]
    return lists


def model_row(q, K, V, positions, scale, softcap=0.0, sink=None, alibi=None):
    """softmax over the listed keys of one query row, float64: (o, lse); alibi = (slope, the row's diagonal)."""
    keys = [j for j in positions if j >= 0]
    s = np.array([scale * float(np.dot(q, K[j])) for j in keys], dtype=np.float64)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    if alibi is not None:
        s = s - alibi[0] * np.abs(alibi[1] - np.array(keys, dtype=np.float64))
    logits = np.concatenate([s, [sink]]) if sink is not None else s
    if logits.size == 0:
        return np.zeros(V.shape[-1]), -np.inf
    m = logits.max()
    l = np.exp(logits - m).sum()
    o = (np.exp(s - m)[:, None] * V[keys].astype(np.float64)).sum(0) / l if keys else np.zeros(V.shape[-1])
    return o, m + np.log(l)


@pytest.mark.parametrize("dtype,d,dv,heads,alibi", [(np.float32, 64, 64, (4, 2), True),
                                                    (np.float16, 128, 96, (3, 1), False)])
def test_flash_attn_func_attends_exactly_the_listed_keys(dtype, d, dv, heads, alibi):
    rng = np.random.default_rng(1)
    B, Nq, Nk, k = 2, 9, 97, 16
    Hq, Hkv = heads
    q = rng.standard_normal((B, Nq, Hq, d)).astype(dtype)
    kk = rng.standard_normal((B, Nk, Hkv, d)).astype(dtype)
    v = rng.standard_normal((B, Nk, Hkv, dv)).astype(dtype)
    sinks = np.linspace(-0.5, 0.5, Hq).astype(np.float32)
    lists = random_lists(rng, B * Nq, Hkv, k, lambda r: (0, r % Nq + Nk - Nq + 1)).reshape(B, Nq, Hkv, k)
    slopes = np.linspace(0.1, 0.4, Hq).astype(np.float32) if alibi else None
    out, lse, _ = flashattn.flash_attn_func(q, kk, v, causal=True, softcap=3.0, sinks=sinks, key_indices=lists,
                                            alibi_slopes=slopes, return_attn_probs=True)
    tol = 2e-5 if dtype == np.float32 else 3e-3
    for b in range(B):
        for i in range(Nq):
            for h in range(Hq):
                g = h // (Hq // Hkv)
                o, l = model_row(q[b, i, h].astype(np.float64), kk[b, :, g].astype(np.float64), v[b, :, g],
                                 lists[b, i, g], d**-0.5, 3.0, float(sinks[h]),
                                 (float(slopes[h]), i + Nk - Nq) if alibi else None)
                np.testing.assert_allclose(out[b, i, h].astype(np.float64), o, atol=tol, rtol=tol)
                assert lse[b, h, i] == pytest.approx(l, rel=1e-5, abs=1e-5)


def test_flash_attn_func_refuses_bad_lists_and_combinations():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 4, 2, 16)).astype(np.float32)
    kv = rng.standard_normal((1, 6, 1, 16)).astype(np.float32)
    lists = np.full((1, 4, 1, 3), -1, dtype=np.int32)
    bad = lists.copy()
    bad[0, 1, 0, :2] = 2
    with pytest.raises(Error, match=r"key_indices\[0\]\[1\] of K/V head 0 holds 2 .*twice"):
        flashattn.flash_attn_func(q, kv, kv, key_indices=bad)
    bad = lists.copy()
    bad[0, 0, 0, 1] = 3  # row 0 sits on diagonal 2
    with pytest.raises(Error, match="causal diagonal 2"):
        flashattn.flash_attn_func(q, kv, kv, causal=True, key_indices=bad)
    with pytest.raises(Error, match="shape"):
        flashattn.flash_attn_func(q, kv, kv, key_indices=lists[:, :3])
    with pytest.raises(Error, match="dropout"):
        flashattn.flash_attn_func(q, kv, kv, dropout_p=0.5, seed=1, key_indices=lists)
    with pytest.raises(Error, match="block_table"):
        flashattn.flash_attn_varlen_func(q[0], kv[0], kv[0], np.array([0, 4]), np.array([0, 6]), 4, 6,
                                         key_indices=lists[0])


def fill_cache(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("paged", [False, True])
def test_flash_attn_with_kvcache_selected_keys_after_the_append(paged):
    rng = np.random.default_rng(3)
    B, Nq, Hq, Hkv, d, k, cached, page = 2, 2, 4, 2, 32, 24, 40, 16
    Nmax = 64
    q = rng.standard_normal((B, Nq, Hq, d)).astype(np.float32)
    k_new = rng.standard_normal((B, Nq, Hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((B, Nq, Hkv, d)).astype(np.float32)
    if paged:
        table = rng.permutation(B * Nmax // page).astype(np.int32).reshape(B, Nmax // page)
        k_cache = fill_cache(rng, (B * Nmax // page, page, Hkv, d), np.float32)
        v_cache = fill_cache(rng, (B * Nmax // page, page, Hkv, d), np.float32)
    else:
        table = None
        k_cache = fill_cache(rng, (B, Nmax, Hkv, d), np.float32)
        v_cache = fill_cache(rng, (B, Nmax, Hkv, d), np.float32)
    Nk = cached + Nq
    lists = random_lists(rng, B * Nq, Hkv, k, lambda r: (0, Nk - Nq + r % Nq + 1)).reshape(B, Nq, Hkv, k)
    lists[0, 1, 0, :] = -1
    lists[0, 1, 0, :3] = [Nk - 1, 0, Nk - 2]  # the appended keys
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cached,
                                                 block_table=table, causal=True, return_softmax_lse=True,
                                                 key_indices=lists)

    def logical(cache, b):
        if not paged:
            return cache[b]
        return cache[table[b]].reshape(-1, Hkv, d)

    for b in range(B):
        K, V = logical(k_cache, b), logical(v_cache, b)
        np.testing.assert_array_equal(K[cached:Nk], k_new[b])
        for i in range(Nq):
            for h in range(Hq):
                g = h // (Hq // Hkv)
                o, l = model_row(q[b, i, h].astype(np.float64), K[:, g].astype(np.float64), V[:, g],
                                 lists[b, i, g], d**-0.5)
                np.testing.assert_allclose(out[b, i, h], o, atol=2e-5, rtol=2e-5)
                assert lse[b, h, i] == pytest.approx(l, rel=1e-5, abs=1e-6)


def test_mla_int8_cache_with_values_inside_the_keys():
    rng = np.random.default_rng(4)
    B, Hq, d, dv, k, Nk = 1, 8, 576, 512, 64, 300
    q = rng.standard_normal((B, 1, Hq, d)).astype(np.float32)
    x = rng.standard_normal((B, 320, 1, d)).astype(np.float32)
    values, scales = flashattn.quantize_kv(x, "int8", group_size=64)
    lists = random_lists(rng, 1, 1, k, lambda r: (0, Nk)).reshape(B, 1, 1, k)
    out = flashattn.flash_attn_with_kvcache(q, values, None, cache_seqlens=Nk, k_scale=scales, head_dim_v=dv,
                                            key_indices=lists)
    dequantized = (values.astype(np.float64).reshape(B, 320, 1, d // 64, 64) *
                   scales[..., None]).reshape(B, 320, 1, d)
    for h in range(Hq):
        o, _ = model_row(q[0, 0, h].astype(np.float64), dequantized[0, :, 0], dequantized[0, :, 0, :dv],
                         lists[0, 0, 0], d**-0.5)
        np.testing.assert_allclose(out[0, 0, h], o, atol=3e-5, rtol=3e-5)


def test_varlen_paged_packed_rows_and_a_refused_list_leave_the_cache_unchanged():
    rng = np.random.default_rng(5)
    Hq, Hkv, d, page, k = 2, 1, 16, 4, 5
    cu_q = np.array([0, 1, 4], dtype=np.int32)
    seqused = np.array([9, 13], dtype=np.int32)
    k_cache = rng.standard_normal((8, page, Hkv, d)).astype(np.float32)
    v_cache = rng.standard_normal((8, page, Hkv, d)).astype(np.float32)
    table = np.array([[3, 1, 0, 2], [7, 6, 5, 4]], dtype=np.int32)
    q = rng.standard_normal((4, Hq, d)).astype(np.float32)
    rows = [(0, 0), (1, 0), (1, 1), (1, 2)]  # (sequence, row)
    lists = random_lists(rng, 4, Hkv, k,
                         lambda r: (0, seqused[rows[r][0]] - (cu_q[rows[r][0] + 1] - cu_q[rows[r][0]]) + rows[r][1] + 1))
    out = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, 3, None, causal=True, block_table=table,
                                           seqused_k=seqused, key_indices=lists)
    for r, (b, _) in enumerate(rows):
        K, V = k_cache[table[b]].reshape(-1, Hkv, d), v_cache[table[b]].reshape(-1, Hkv, d)
        for h in range(Hq):
            o, _ = model_row(q[r, h].astype(np.float64), K[:, 0].astype(np.float64), V[:, 0], lists[r, 0], d**-0.5)
            np.testing.assert_allclose(out[r, h], o, atol=2e-5, rtol=2e-5)
    # An append refused for a list beyond its sequence writes nothing.
    before = k_cache.copy()
    bad = np.full((2, 1, Hkv, k), -1, dtype=np.int32)
    bad[1, 0, 0, 0] = 14  # sequence 1 holds 13 + 1 keys after the append
    with pytest.raises(Error, match=r"key_indices\[1\]\[0\] of K/V head 0 holds 14"):
        flashattn.flash_attn_with_kvcache(q[:2, None], k_cache, v_cache, q[:2, None, :Hkv], q[:2, None, :Hkv],
                                          cache_seqlens=seqused, block_table=table, key_indices=bad)
    np.testing.assert_array_equal(before, k_cache)
