"""flash_attn_with_kvcache: in-place append into contiguous and paged caches (with and without rotary), the
output against the float64 reference over the updated cache, and keys outside the appended slots untouched."""

import numpy as np
import pytest

import flashattn
from reference import attention, compare, max_error


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x (n, H, d) at `positions` (n,): GPT-J pairs or GPT-NeoX halves."""
    x = x.astype(np.float64).copy()
    half = cos.shape[1]
    c, s = cos[positions][:, None, :], sin[positions][:, None, :]
    if interleaved:
        x0, x1 = x[..., 0 : 2 * half : 2].copy(), x[..., 1 : 2 * half : 2].copy()
        x[..., 0 : 2 * half : 2], x[..., 1 : 2 * half : 2] = x0 * c - x1 * s, x0 * s + x1 * c
    else:
        x0, x1 = x[..., :half].copy(), x[..., half : 2 * half].copy()
        x[..., :half], x[..., half : 2 * half] = x0 * c - x1 * s, x0 * s + x1 * c
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("rotary", [None, "interleaved", "halves"])
def test_append_then_attend(rng, paged, rotary, dtype):
    b, Nq, Nnew, Hq, Hkv, d, capacity = 3, 2, 2, 4, 2, 40, 29
    seqlens = np.array([0, 11, 27])  # the last sequence fills its cache exactly
    page_size = 5
    if paged:
        max_pages = -(-capacity // page_size)
        num_pages = b * max_pages + 2
        block_table = rng.permutation(num_pages)[: b * max_pages].reshape(b, max_pages)
        cache_shape = (num_pages, page_size, Hkv, d)
    else:
        cache_shape = (b, capacity, Hkv, d)
    k_cache = rng.standard_normal(cache_shape).astype(dtype)
    v_cache = rng.standard_normal(cache_shape).astype(dtype)
    k_before, v_before = k_cache.copy(), v_cache.copy()
    q = rng.standard_normal((b, Nq, Hq, d)).astype(dtype)
    k = rng.standard_normal((b, Nnew, Hkv, d)).astype(dtype)
    v = rng.standard_normal((b, Nnew, Hkv, d)).astype(dtype)
    kwargs = {}
    if rotary:
        angles = np.arange(40)[:, None] * (1e-2 ** (np.arange(12) / 12))[None, :]
        kwargs = {
            "rotary_cos": np.cos(angles),
            "rotary_sin": np.sin(angles),
            "rotary_interleaved": rotary == "interleaved",
        }
    out, lse = flashattn.flash_attn_with_kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        cache_seqlens=seqlens,
        block_table=block_table if paged else None,
        causal=True,
        num_splits=3,
        return_softmax_lse=True,
        **kwargs
    )

    def sequence(cache, s):  # the first `capacity` key slots of sequence s, in order
        return np.concatenate([cache[page] for page in block_table[s]])[:capacity] if paged else cache[s]

    touched = np.zeros(cache_shape[:2], dtype=bool)
    for s in range(b):
        positions = seqlens[s] + np.arange(Nnew)
        k_new, q_s = k[s], q[s]
        if rotary:
            k_new = rotate(
                k[s], kwargs["rotary_cos"], kwargs["rotary_sin"], positions, rotary == "interleaved"
            )
            q_s = rotate(
                q[s],
                kwargs["rotary_cos"],
                kwargs["rotary_sin"],
                seqlens[s] + Nnew - Nq + np.arange(Nq),
                rotary == "interleaved",
            )
        keys, values = sequence(k_cache, s), sequence(v_cache, s)
        # The appended keys, rotated and rounded once to the cache's dtype; every other slot unchanged.
        np.testing.assert_allclose(
            keys[positions], k_new.astype(dtype), rtol=2e-3 if dtype == np.float16 else 1e-6, atol=1e-6
        )
        np.testing.assert_array_equal(values[positions], v[s])
        for j in positions:
            page, slot = (block_table[s][j // page_size], j % page_size) if paged else (s, j)
            touched[page, slot] = True
        Nk = seqlens[s] + Nnew
        args = (q_s.astype(dtype)[None], keys[None, :Nk], values[None, :Nk])
        ref = attention(*args, causal=True)
        base = attention(*args, causal=True, compute=np.float32, low=dtype)
        compare({"o": out[s : s + 1]}, ref, base, dtype, ["o"])
    np.testing.assert_array_equal(k_cache[~touched], k_before[~touched])
    np.testing.assert_array_equal(v_cache[~touched], v_before[~touched])


def test_attend_without_append_over_full_cache(rng):
    k_cache = rng.standard_normal((2, 13, 1, 16)).astype(np.float32)
    v_cache = rng.standard_normal((2, 13, 1, 16)).astype(np.float32)
    q = rng.standard_normal((2, 1, 2, 16)).astype(np.float32)
    before = k_cache.copy()
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache)  # cache_seqlens=None: the whole cache
    # The decode kernel sums in another order than the forward kernel: equal up to float32 rounding.
    np.testing.assert_allclose(out, flashattn.flash_attn_func(q, k_cache, v_cache), rtol=1e-5, atol=1e-6)
    out5 = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=5
    )  # an int for every sequence
    np.testing.assert_allclose(
        out5, flashattn.flash_attn_func(q, k_cache[:, :5], v_cache[:, :5]), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(k_cache, before)


@pytest.mark.parametrize("append", [True, False], ids=["append", "no_append"])
@pytest.mark.parametrize(
    "mods",
    [{}, {"causal": True}, {"window_size": (3, -1)}, {"window_size": (-1, 1)}, {"window_size": (40, 40)}],
    ids=["plain", "causal", "window_left", "window_right", "window_beyond_capacity"],
)
def test_rotary_positions_of_the_queries_follow_flash_attn(rng, mods, append):
    """flash-attn's rule: the new keys at cache_seqlens + i; the queries there too when causal or local
    (a window side ≥ 0, also one beyond the cache's capacity, which masks nothing), else every query at
    cache_seqlens. Without an append (which flash-attn refuses with rotary) the queries follow the same
    rule."""
    b, Nq, Hq, Hkv, d, capacity = 2, 3, 2, 1, 16, 14
    seqlens = np.array([2, 9])
    k_cache = rng.standard_normal((b, capacity, Hkv, d)).astype(np.float32)
    v_cache = rng.standard_normal((b, capacity, Hkv, d)).astype(np.float32)
    q = rng.standard_normal((b, Nq, Hq, d)).astype(np.float32)
    k = rng.standard_normal((b, Nq, Hkv, d)).astype(np.float32) if append else None
    v = rng.standard_normal((b, Nq, Hkv, d)).astype(np.float32) if append else None
    angles = np.arange(capacity)[:, None] * (0.3 ** np.arange(d // 2))[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    out = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens, **mods
    )
    consecutive = bool(mods)
    for s in range(b):
        Nk = seqlens[s] + (Nq if append else 0)
        positions = seqlens[s] + np.arange(Nq) if consecutive else np.full(Nq, seqlens[s])
        q_s = rotate(q[s], cos, sin, positions, interleaved=True)[None]
        if append:
            new = seqlens[s] + np.arange(Nq)
            np.testing.assert_allclose(k_cache[s, new], rotate(k[s], cos, sin, new, True), rtol=1e-6, atol=1e-6)
        keys, values = k_cache[None, s, :Nk], v_cache[None, s, :Nk]
        window = mods.get("window_size", (-1, -1))
        ref = attention(q_s, keys, values, causal=mods.get("causal", False), window=window)
        base = attention(q_s.astype(np.float32), keys, values, causal=mods.get("causal", False), window=window,
                         compute=np.float32, low=np.float32)
        compare({"o": out[s : s + 1]}, ref, base, np.float32, ["o"])
        # The other rule's positions give another output: the comparison above tells the rules apart.
        other = seqlens[s] + (np.zeros(Nq, int) if consecutive else np.arange(Nq))
        q_other = rotate(q[s], cos, sin, other, interleaved=True)[None]
        assert max_error(out[s : s + 1], attention(q_other, keys, values, causal=mods.get("causal", False),
                                                   window=window)["o"]) > 1e-2
