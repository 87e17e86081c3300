"""Quantized KV caches in Python: quantize_kv's values and scales against a NumPy model of the formats,
flash_attn_with_kvcache over int8, FP8 E4M3 and FP8 E5M2 caches (contiguous and paged) against the float64
reference over the dequantized cache, the quantizing append, E5M2's inf and NaN codes, float caches of another
type than q, and the errors."""

import numpy as np
import pytest

import flashattn
from reference import attention


def e4m3_values():
    """The 254 finite values of FP8 E4M3 by code (NaN codes 0x7f and 0xff as nan)."""
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 15, codes & 7
    magnitude = np.where(
        exponent == 0, mantissa * 2.0**-9, (1 + mantissa / 8) * 2.0 ** (exponent.astype(float) - 7)
    )
    values = np.where(codes & 0x80, -magnitude, magnitude)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values


def e5m2_values():
    """The values of FP8 E5M2 by code: the upper byte of a float16 (±inf at 0x7c and 0xfc, NaN above them)."""
    return (np.arange(256, dtype=np.uint16) << 8).view(np.float16).astype(np.float64)


QMAX = {"int8": 127.0, "fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
MANTISSA_BITS = {"fp8_e4m3": 3, "fp8_e5m2": 2}
SMALLEST_SUBNORMAL = {"fp8_e4m3": 2.0**-9, "fp8_e5m2": 2.0**-16}


def dequantize(values, scales, dtype):
    """values (…, d) times scales broadcast per token / group / head / tensor, in float64."""
    tables = {"fp8_e4m3": e4m3_values, "fp8_e5m2": e5m2_values}
    q = tables[dtype]()[values] if dtype in tables else values.astype(np.float64)
    s = np.asarray(scales, dtype=np.float64)
    if s.ndim == 4:  # per group: (…, groups) → each scale repeated over its group
        s = np.repeat(s, q.shape[-1] // s.shape[-1], axis=-1)
    elif s.ndim == 3:  # per token
        s = s[..., None]
    elif s.ndim == 1:  # per K/V head
        s = s[:, None]
    return q * s


def append_bound(x, dtype):
    """How far a row x quantized with per-token scales may land from it: half a step (int8: max|x| / 127; FP8:
    |x|·2^-m, m mantissa bits), plus float32's rounding."""
    if dtype == "int8":
        return np.abs(x).max() / 127 * 0.5 + 1e-6
    return np.abs(x) * 2.0 ** -(MANTISSA_BITS[dtype] + 1) + 1e-6


@pytest.mark.parametrize(
    "dtype,granularity,group_size",
    [("int8", None, None), ("int8", None, 8), ("fp8_e4m3", None, None), ("fp8_e4m3", None, 8),
     ("fp8_e4m3", "per_tensor", None), ("fp8_e5m2", None, None), ("fp8_e5m2", None, 8),
     ("fp8_e5m2", "per_tensor", None)],
)
def test_quantize_kv_matches_a_numpy_model(rng, dtype, granularity, group_size):
    x = rng.standard_normal((2, 5, 3, 16)).astype(np.float32)
    x[0, 1, 2, :8] = 0  # an all-zero group
    values, scales = flashattn.quantize_kv(x, dtype=dtype, group_size=group_size, granularity=granularity)
    qmax = QMAX[dtype]
    assert values.dtype == (np.int8 if dtype == "int8" else np.uint8)
    assert values.shape == x.shape and scales.dtype == np.float32
    if granularity == "per_tensor":
        assert scales.shape == ()
        expected = np.float32(np.abs(x).max()) / np.float32(qmax)
    elif group_size:  # per token whatever the element type: groups exist per token only
        assert scales.shape == (2, 5, 3, 2)
        expected = np.abs(x.reshape(2, 5, 3, 2, 8)).max(axis=-1) / np.float32(qmax)
    elif dtype.startswith("fp8"):
        assert scales.shape == (3,)
        expected = np.abs(x).max(axis=(0, 1, 3)) / np.float32(qmax)
    else:
        assert scales.shape == (2, 5, 3)
        expected = np.abs(x).max(axis=-1) / np.float32(qmax)
    np.testing.assert_array_equal(scales, expected.astype(np.float32))
    back = dequantize(values, scales, dtype)
    # Every value within half a quantization step of x: int8 steps are the scale, FP8 steps ≤ |x|·2^-m with m
    # mantissa bits (E4M3 3, E5M2 2), and the smallest subnormal below.
    s = np.broadcast_to(dequantize(np.ones_like(values, dtype=np.int8), scales, "int8"), x.shape)  # the scales
    if dtype == "int8":
        bound = 0.5 * s
    else:
        step = np.maximum(np.abs(x) * 2.0 ** -MANTISSA_BITS[dtype], s * SMALLEST_SUBNORMAL[dtype])
        bound = 0.5 * step + 1e-12
    assert np.all(np.abs(back - x) <= bound * (1 + 1e-5))
    if group_size:
        assert np.all(values[0, 1, 2, :8] == 0) and scales[0, 1, 2, 0] == 0


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize(
    "dtype,group_size",
    [("int8", None), ("int8", 16), ("fp8_e4m3", None), ("fp8_e4m3", 16), ("fp8_e5m2", None), ("fp8_e5m2", 16)],
)
def test_attends_to_the_dequantized_cache_and_quantizes_the_append(rng, paged, dtype, group_size):
    b, Nq, Nnew, Hq, Hkv, d, capacity, page_size = 2, 2, 3, 4, 2, 48, 30, 4
    seqlens = np.array([9, 27])
    if paged:
        max_pages = -(-capacity // page_size)
        block_table = rng.permutation(b * max_pages + 1)[: b * max_pages].reshape(b, max_pages)
        shape = (b * max_pages + 1, page_size, Hkv, d)
    else:
        block_table, shape = None, (b, capacity, Hkv, d)
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal(shape).astype(np.float32), dtype, group_size)
    v_values, v_scale = flashattn.quantize_kv(rng.standard_normal(shape).astype(np.float32), dtype, group_size)
    q = rng.standard_normal((b, Nq, Hq, d)).astype(np.float32)
    k = rng.standard_normal((b, Nnew, Hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, Nnew, Hkv, d)).astype(np.float32)
    before = [a.copy() for a in (k_values, v_values, k_scale, v_scale)]
    out, lse = flashattn.flash_attn_with_kvcache(
        q, k_values, v_values, k, v, cache_seqlens=seqlens, block_table=block_table, causal=True,
        return_softmax_lse=True, k_scale=k_scale, v_scale=v_scale,
        cache_dtype=dtype if dtype.startswith("fp8") else None,
    )
    k_all, v_all = dequantize(k_values, k_scale, dtype), dequantize(v_values, v_scale, dtype)
    for i in range(b):
        n = seqlens[i] + Nnew
        slots = [(block_table[i, j // page_size], j % page_size) if paged else (i, j) for j in range(n)]
        keys = np.stack([k_all[s] for s in slots])[None]
        vals = np.stack([v_all[s] for s in slots])[None]
        ref = attention(q[i : i + 1], keys, vals, causal=True)
        np.testing.assert_allclose(out[i : i + 1], ref["o"], atol=2e-5, rtol=0)
        np.testing.assert_allclose(lse[i : i + 1], ref["lse"], atol=2e-5, rtol=0)
        # The appended keys: within half a step of k (int8: max|k| / 127; FP8: |k|·2^-m).
        appended = np.stack([k_all[s] for s in slots[seqlens[i] :]])
        bound = append_bound(k[i], dtype)
        assert np.all(np.abs(appended - k[i]) <= bound)
    # Nothing but the appended slots (and their per-token scales) changed.
    changed = np.zeros(shape[:2], dtype=bool)
    for i in range(b):
        for j in range(seqlens[i], seqlens[i] + Nnew):
            changed[(block_table[i, j // page_size], j % page_size) if paged else (i, j)] = True
    for old, new in zip(before, (k_values, v_values, k_scale, v_scale)):
        if new.ndim >= 2:
            np.testing.assert_array_equal(old[~changed], new[~changed])


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("dtype,group_size", [("int8", None), ("int8", 64), ("fp8_e4m3", None), ("fp8_e5m2", None)])
def test_values_inside_the_keys_of_a_quantized_cache(rng, paged, dtype, group_size):
    """Multi-head latent attention over a quantized latent cache (d 576, dv 512, one K/V head): v_cache=None reads
    V as the first head_dim_v features of each dequantized K row, scaled by k_scale; appending k writes each row
    and its scales once."""
    b, Nnew, Hq, d, dv, capacity, page_size = 2, 2, 16, 576, 512, 40, 16
    seqlens = np.array([13, 37])
    if paged:
        max_pages = -(-capacity // page_size)
        block_table = rng.permutation(b * max_pages + 1)[: b * max_pages].reshape(b, max_pages)
        shape = (b * max_pages + 1, page_size, 1, d)
    else:
        block_table, shape = None, (b, capacity, 1, d)
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal(shape).astype(np.float32), dtype, group_size)
    q = rng.standard_normal((b, 1, Hq, d)).astype(np.float32)
    k = rng.standard_normal((b, Nnew, 1, d)).astype(np.float32)
    out, lse = flashattn.flash_attn_with_kvcache(
        q, k_values, None, k, cache_seqlens=seqlens, block_table=block_table, causal=True, head_dim_v=dv,
        return_softmax_lse=True, k_scale=k_scale, cache_dtype=dtype if dtype.startswith("fp8") else None,
    )
    assert out.shape == (b, 1, Hq, dv)
    k_all = dequantize(k_values, k_scale, dtype)
    for i in range(b):
        slots = [(block_table[i, j // page_size], j % page_size) if paged else (i, j)
                 for j in range(seqlens[i] + Nnew)]
        keys = np.stack([k_all[s] for s in slots])[None]
        ref = attention(q[i : i + 1], keys, keys[..., :dv], causal=True)
        np.testing.assert_allclose(out[i : i + 1], ref["o"], atol=2e-5, rtol=0)
        np.testing.assert_allclose(lse[i : i + 1], ref["lse"], atol=2e-5, rtol=0)
        appended = np.stack([k_all[s] for s in slots[seqlens[i] :]])
        assert np.all(np.abs(appended - k[i]) <= append_bound(k[i], dtype))


@pytest.mark.parametrize("code", [0x7C, 0xFE])
def test_an_e5m2_inf_or_nan_code_reaches_only_the_rows_that_see_it(rng, code):
    """An inf (0x7c) or NaN (0xfe) code in an FP8 E5M2 V cache, which quantize_kv never writes, reads as in a float
    cache: the causal query row that sees its key gets a non-finite output at its feature, the row before it
    (which does not see the key) the output of the clean cache bit for bit."""
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal((1, 40, 2, 32)).astype(np.float32), "fp8_e5m2")
    v_values, v_scale = flashattn.quantize_kv(rng.standard_normal((1, 40, 2, 32)).astype(np.float32), "fp8_e5m2")
    q = rng.standard_normal((1, 2, 4, 32)).astype(np.float32)
    call = dict(cache_seqlens=np.array([40]), causal=True, k_scale=k_scale, v_scale=v_scale, cache_dtype="fp8_e5m2")
    clean = flashattn.flash_attn_with_kvcache(q, k_values, v_values, **call)
    v_values[0, 39, 1, 7] = code  # the last key, K/V head 1 (query heads 2 and 3), feature 7
    out = flashattn.flash_attn_with_kvcache(q, k_values, v_values, **call)
    assert not np.isfinite(out[0, 1, 2:, 7]).any()
    assert np.isnan(out[0, 1, 2:, 7]).all() == (code != 0x7C)
    reached = np.zeros(out.shape, dtype=bool)
    reached[0, 1, 2:, 7] = True
    assert np.array_equal(out[~reached].view(np.uint32), clean[~reached].view(np.uint32))


def test_float32_queries_over_a_float16_cache(rng):
    q = rng.standard_normal((2, 1, 4, 40)).astype(np.float32)
    k_cache = rng.standard_normal((2, 17, 2, 40)).astype(np.float16)
    v_cache = rng.standard_normal((2, 17, 2, 40)).astype(np.float16)
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([17, 5]))
    assert out.dtype == np.float32
    ref = attention(q[:1], k_cache[:1], v_cache[:1])
    np.testing.assert_allclose(out[:1], ref["o"], atol=2e-5, rtol=0)


@pytest.mark.parametrize("dtype", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_sinks_over_a_quantized_cache(rng, dtype):
    """The sink joins each row's softmax once: LSE' = log(e^LSE + e^s_h) and O' = O·e^(LSE − LSE')."""
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal((2, 40, 2, 24)).astype(np.float32), dtype)
    v_values, v_scale = flashattn.quantize_kv(rng.standard_normal((2, 40, 2, 24)).astype(np.float32), dtype)
    q = rng.standard_normal((2, 2, 4, 24)).astype(np.float32)
    sinks = np.array([0.5, -np.inf, 2.0, -1.0], dtype=np.float32)
    call = dict(cache_seqlens=np.array([40, 11]), causal=True, return_softmax_lse=True, k_scale=k_scale,
                v_scale=v_scale, cache_dtype=dtype if dtype.startswith("fp8") else None, num_splits=3)
    out, lse = flashattn.flash_attn_with_kvcache(q, k_values, v_values, **call)
    out_sunk, lse_sunk = flashattn.flash_attn_with_kvcache(q, k_values, v_values, sinks=sinks, **call)
    expected_lse = np.logaddexp(lse.astype(np.float64), sinks[None, :, None].astype(np.float64))
    np.testing.assert_allclose(lse_sunk, expected_lse, atol=1e-5, rtol=0)
    rescale = np.exp(lse - expected_lse).transpose(0, 2, 1)[..., None]  # (b, Nq, Hq, 1)
    np.testing.assert_allclose(out_sunk, out * rescale, atol=1e-5, rtol=0)
    assert not np.allclose(out_sunk[:, :, 2], out[:, :, 2])


def test_errors_leave_the_cache_and_scales_unchanged(rng):
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal((1, 8, 1, 16)).astype(np.float32))
    v_values, v_scale = flashattn.quantize_kv(rng.standard_normal((1, 8, 1, 16)).astype(np.float32))
    q = rng.standard_normal((1, 1, 1, 16)).astype(np.float32)
    k = rng.standard_normal((1, 1, 1, 16)).astype(np.float32)
    v = k.copy()
    k[0, 0, 0, 3] = np.nan
    before = [a.copy() for a in (k_values, v_values, k_scale, v_scale)]
    call = dict(cache_seqlens=np.array([4]), k_scale=k_scale, v_scale=v_scale)
    with pytest.raises(ValueError, match="k_new holds nan"):
        flashattn.flash_attn_with_kvcache(q, k_values, v_values, k, v, **call)
    with pytest.raises(ValueError, match="k_scale is required"):
        flashattn.flash_attn_with_kvcache(q, k_values, v_values, cache_seqlens=np.array([4]))
    with pytest.raises(ValueError, match="cache_dtype must be"):
        flashattn.flash_attn_with_kvcache(q, k_values, v_values, cache_dtype="int4", **call)
    with pytest.raises(TypeError, match="uint8"):
        flashattn.flash_attn_with_kvcache(q, k_values, v_values, cache_dtype="fp8_e4m3", **call)
    fp8_values = k_values.view(np.uint8)
    with pytest.raises(TypeError, match=r"^k_cache has dtype uint8, .* cache_dtype='fp8_e4m3' or 'fp8_e5m2'$"):
        flashattn.flash_attn_with_kvcache(q, fp8_values, fp8_values, **call)
    with pytest.raises(TypeError, match=r"^v_cache must have dtype int8 for an int8 cache \(K and V share one"):
        flashattn.flash_attn_with_kvcache(q, k_values, fp8_values, **call)
    with pytest.raises(ValueError, match="v_scale must have the shape"):
        flashattn.flash_attn_with_kvcache(q, k_values, v_values, cache_seqlens=np.array([4]), k_scale=k_scale,
                                          v_scale=k_scale[0, 0])
    with pytest.raises(ValueError, match="apply to a quantized cache"):
        flashattn.flash_attn_with_kvcache(q, q, q, cache_seqlens=np.array([1]), k_scale=k_scale, v_scale=v_scale)
    with pytest.raises(ValueError, match=r"^v_scale must be None when v_cache is None"):
        flashattn.flash_attn_with_kvcache(q, k_values, None, cache_seqlens=np.array([4]), k_scale=k_scale,
                                          v_scale=v_scale, head_dim_v=8)
    grouped, group_scale = flashattn.quantize_kv(rng.standard_normal((1, 8, 1, 16)).astype(np.float32), "int8", 8)
    with pytest.raises(ValueError, match=r"scale_group_size=8 must divide head_dim_v=12"):
        flashattn.flash_attn_with_kvcache(q, grouped, None, cache_seqlens=np.array([4]), k_scale=group_scale,
                                          head_dim_v=12)
    with pytest.raises(ValueError, match="x holds inf"):
        flashattn.quantize_kv(np.full((1, 1, 1, 4), np.inf, dtype=np.float32))
    with pytest.raises(ValueError, match="group_size must divide head_dim"):
        flashattn.quantize_kv(np.ones((1, 1, 1, 12), dtype=np.float32), group_size=5)
    for old, new in zip(before, (k_values, v_values, k_scale, v_scale)):
        np.testing.assert_array_equal(old, new)


@pytest.mark.parametrize("group_size", [None, 8])
def test_integer_scores_round_the_queries(rng, group_size):
    """quantize_query_int8=True: the scores are those of s·q rounded to int8 per scale group (scale max|s·q| /
    127), so the result is the dequantized cache's attention with those rounded queries; an fp8 cache
    refuses it."""
    d, s = 40, 40**-0.5
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal((2, 33, 2, d)).astype(np.float32), "int8", group_size)
    v_values, v_scale = flashattn.quantize_kv(rng.standard_normal((2, 33, 2, d)).astype(np.float32), "int8", group_size)
    q = rng.standard_normal((2, 1, 4, d)).astype(np.float32)
    out = flashattn.flash_attn_with_kvcache(q, k_values, v_values, k_scale=k_scale, v_scale=v_scale,
                                            quantize_query_int8=True)
    sq = (np.float32(s) * q).reshape(2, 1, 4, -1, group_size or d)
    q_scale = np.abs(sq).max(axis=-1, keepdims=True) / np.float32(127)
    rounded = (np.round(sq / q_scale) * q_scale.astype(np.float64) / s).reshape(q.shape)
    ref = attention(rounded, dequantize(k_values, k_scale, "int8"), dequantize(v_values, v_scale, "int8"))
    np.testing.assert_allclose(out, ref["o"], atol=2e-5, rtol=0)
    exact = flashattn.flash_attn_with_kvcache(q, k_values, v_values, k_scale=k_scale, v_scale=v_scale)
    assert not np.array_equal(out, exact)
    for fp8_dtype in ("fp8_e4m3", "fp8_e5m2"):
        fp8, fp8_scale = flashattn.quantize_kv(rng.standard_normal((2, 33, 2, d)).astype(np.float32), fp8_dtype)
        with pytest.raises(ValueError, match="quantize_query_int8"):
            flashattn.flash_attn_with_kvcache(q, fp8, fp8.copy(), k_scale=fp8_scale, v_scale=fp8_scale,
                                              cache_dtype=fp8_dtype, quantize_query_int8=True)


def test_u8_probabilities_over_an_int8_cache(rng):
    """quantize_probs_u8=True over an int8 cache with one scale per row: P̃ · v_scale rounded to 8 bits per
    key block moves O (max|O| about 0.4 here) by 2e-3 to 3e-3, checked within 1e-2 and not zero (the rounding
    happens; decode_quantized_test checks it against a model of the rounding); an fp8 cache, a float cache and
    scale groups refuse it, naming the keyword."""
    d, keys = 64, 200
    k_values, k_scale = flashattn.quantize_kv(rng.standard_normal((2, keys, 2, d)).astype(np.float32), "int8")
    v_values, v_scale = flashattn.quantize_kv(rng.standard_normal((2, keys, 2, d)).astype(np.float32), "int8")
    q = rng.standard_normal((2, 1, 4, d)).astype(np.float32)
    out = flashattn.flash_attn_with_kvcache(q, k_values, v_values, k_scale=k_scale, v_scale=v_scale,
                                            quantize_probs_u8=True)
    k_float = dequantize(k_values, k_scale, "int8").astype(np.float32)
    v_float = dequantize(v_values, v_scale, "int8").astype(np.float32)
    floats = flashattn.flash_attn_with_kvcache(q, k_float, v_float)
    assert out.shape == floats.shape == q.shape
    assert np.allclose(out, floats, atol=1e-2, rtol=0), np.abs(out - floats).max()
    assert np.abs(out - floats).max() > 1e-4

    for fp8_dtype in ("fp8_e4m3", "fp8_e5m2"):
        fp8, fp8_scale = flashattn.quantize_kv(rng.standard_normal((2, keys, 2, d)).astype(np.float32), fp8_dtype)
        with pytest.raises(ValueError, match="quantize_probs_u8 needs an int8 cache"):
            flashattn.flash_attn_with_kvcache(q, fp8, fp8.copy(), k_scale=fp8_scale, v_scale=fp8_scale,
                                              cache_dtype=fp8_dtype, quantize_probs_u8=True)
    with pytest.raises(ValueError, match="quantize_probs_u8 applies to an int8 cache"):
        flashattn.flash_attn_with_kvcache(q, k_float, v_float, quantize_probs_u8=True)
    k_grouped, k_group_scale = flashattn.quantize_kv(k_float, "int8", group_size=16)
    v_grouped, v_group_scale = flashattn.quantize_kv(v_float, "int8", group_size=16)
    before = [a.copy() for a in (k_grouped, v_grouped, k_group_scale, v_group_scale)]
    with pytest.raises(ValueError, match="quantize_probs_u8 needs one V scale per row"):
        flashattn.flash_attn_with_kvcache(q, k_grouped, v_grouped, k_scale=k_group_scale, v_scale=v_group_scale,
                                          cache_seqlens=keys - 1, k=q[:, :, :2], v=q[:, :, :2],
                                          quantize_probs_u8=True)
    for old, new in zip(before, (k_grouped, v_grouped, k_group_scale, v_group_scale)):
        np.testing.assert_array_equal(old, new)
