"""flashattn.lightning_indexer against a float64 NumPy model (ties by the lower position): contiguous and paged
caches, float and quantized keys, causal and not, top_k beyond the visible keys; and its errors."""

import numpy as np
import pytest

import flashattn


def model(q, k_rows, w, top_k, seqlens, causal):
    """(key_indices, scores): k_rows[b] is sequence b's keys (Nk_b, d) as float64."""
    batch, nq = q.shape[:2]
    indices = np.full((batch, nq, 1, top_k), -1, dtype=np.int32)
    scores = np.full((batch, nq, 1, top_k), -np.inf, dtype=np.float32)
    for b in range(batch):
        nk = seqlens[b]
        for t in range(nq):
            seen = min(max(t + nk - nq + 1, 0), nk) if causal else nk
            dots = q[b, t].astype(np.float64) @ k_rows[b][:seen].T  # (heads, seen)
            score = w[b, t].astype(np.float64) @ np.maximum(dots, 0.0)
            order = np.lexsort((np.arange(seen), -score))[:top_k]
            indices[b, t, 0, : len(order)] = order
            scores[b, t, 0, : len(order)] = score[order]
    return indices, scores


def integers(rng, shape, m, dtype=np.float32):
    return rng.integers(-m, m + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("causal", [True, False])
def test_contiguous_cache_matches_the_model(rng, dtype, causal):
    batch, nq, heads, d, nmax = 2, 3, 4, 40, 150
    q = integers(rng, (batch, nq, heads, d), 2, dtype)
    k = integers(rng, (batch, nmax, 1, d), 3, dtype)
    w = integers(rng, (batch, nq, heads), 3)
    seqlens = np.array([150, 97], dtype=np.int32)
    indices, scores = flashattn.lightning_indexer(q, k, w, 20, cache_seqlens=seqlens, causal=causal,
                                                  return_scores=True)
    expected = model(q, [k[b, :, 0].astype(np.float64) for b in range(batch)], w, 20, seqlens, causal)
    assert indices.dtype == np.int32 and indices.shape == (batch, nq, 1, 20)
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_array_equal(scores, expected[1])
    # cache_seqlens=None: every sequence holds seqlen_k keys; the indices alone without return_scores.
    full = flashattn.lightning_indexer(q, k, w, 20, causal=causal)
    expected_full = model(q, [k[b, :, 0].astype(np.float64) for b in range(batch)], w, 20, [nmax] * batch, causal)
    np.testing.assert_array_equal(full, expected_full[0])


@pytest.mark.parametrize("page_size", [1, 16])
def test_paged_cache_matches_the_model(rng, page_size):
    batch, nq, heads, d, max_blocks = 2, 1, 8, 128, 7
    num_blocks = batch * max_blocks + 2
    q = integers(rng, (batch, nq, heads, d), 2)
    k = integers(rng, (num_blocks, page_size, 1, d), 3)
    w = integers(rng, (batch, nq, heads), 3)
    table = rng.permutation(num_blocks)[: batch * max_blocks].reshape(batch, max_blocks)
    seqlens = np.array([max_blocks * page_size, 3 * page_size - 1])
    rows = [k[table[b]].reshape(-1, d).astype(np.float64) for b in range(batch)]
    indices = flashattn.lightning_indexer(q, k, w, 30, cache_seqlens=seqlens, block_table=table)
    np.testing.assert_array_equal(indices, model(q, rows, w, 30, seqlens, True)[0])


@pytest.mark.parametrize("dtype", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_quantized_keys_are_their_scales_times_their_codes(rng, dtype):
    batch, nq, heads, d, nmax = 1, 2, 4, 64, 200
    q = rng.standard_normal((batch, nq, heads, d)).astype(np.float32)
    x = rng.standard_normal((batch, nmax, 1, d)).astype(np.float32)
    values, scales = flashattn.quantize_kv(x, dtype=dtype, granularity="per_token")
    w = rng.standard_normal((batch, nq, heads)).astype(np.float32)
    indices, scores = flashattn.lightning_indexer(q, values, w, 50, k_scale=scales,
                                                  cache_dtype=None if dtype == "int8" else dtype, return_scores=True)
    # The model over the dequantized keys: the kept scores agree within float32 rounding.
    decoded = values.astype(np.float64) if dtype == "int8" else dequantize_fp8(values, dtype)
    rows = [decoded[b, :, 0] * scales[b, :, 0, None] for b in range(batch)]
    expected = model(q, rows, w, 50, [nmax], True)
    np.testing.assert_allclose(scores, expected[1], rtol=1e-4, atol=1e-4)


def dequantize_fp8(codes, dtype):
    """OCP FP8 E4M3 / E5M2 bytes as float64 values."""
    exponent_bits, mantissa_bits = (4, 3) if dtype == "fp8_e4m3" else (5, 2)
    bias = 2 ** (exponent_bits - 1) - 1
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> mantissa_bits) & ((1 << exponent_bits) - 1)
    m = c & ((1 << mantissa_bits) - 1)
    normal = (1 + m / 2.0**mantissa_bits) * 2.0 ** (e - bias)
    subnormal = (m / 2.0**mantissa_bits) * 2.0 ** (1 - bias)
    return sign * np.where(e == 0, subnormal, normal)


def test_strided_queries_are_read_in_place(rng):
    q = integers(rng, (2, 5, 4, 40), 2)
    k = integers(rng, (2, 60, 1, 40), 3)
    w = integers(rng, (2, 5, 4), 3)
    head_major = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # (b, s, h, d) view
    wider = np.zeros((2, 5, 4, 48), np.float32)
    wider[..., :40] = q
    expected = flashattn.lightning_indexer(q, k, w, 16)
    for view in (head_major, wider[..., :40]):
        assert not view.flags.c_contiguous
        np.testing.assert_array_equal(flashattn.lightning_indexer(view, k, w, 16), expected)


def test_top_k_beyond_the_visible_keys_pads_with_minus_one(rng):
    q = integers(rng, (1, 2, 2, 16), 2)
    k = integers(rng, (1, 5, 1, 16), 3)
    w = integers(rng, (1, 2, 2), 3)
    indices, scores = flashattn.lightning_indexer(q, k, w, 8, return_scores=True)
    # Row 0 sees keys 0..3, row 1 all five.
    assert (indices[0, 0, 0, 4:] == -1).all() and (indices[0, 0, 0, :4] >= 0).all()
    assert (indices[0, 1, 0, 5:] == -1).all() and sorted(indices[0, 1, 0, :5]) == [0, 1, 2, 3, 4]
    assert np.isneginf(scores[0, 0, 0, 4:]).all()


def test_ties_go_to_the_lower_position(rng):
    q = integers(rng, (1, 1, 4, 16), 2)
    k = np.repeat(integers(rng, (1, 1, 1, 16), 3), 40, axis=1)
    w = integers(rng, (1, 1, 4), 3)
    np.testing.assert_array_equal(flashattn.lightning_indexer(q, k, w, 10)[0, 0, 0], np.arange(10))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"top_k": 0}, "top_k must be >= 1"),
        ({"weights": np.zeros((1, 2, 3), np.float32)}, "weights must have shape"),
        ({"k_index": np.zeros((1, 9, 2, 16), np.float32)}, "heads"),
        ({"cache_seqlens": np.array([10])}, "cache_seqlens[0] must be in [0, 9]"),
        ({"k_scale": np.ones((1, 9), np.float32)}, "k_scale applies to a quantized k_index"),
    ],
)
def test_errors_name_the_argument(rng, change, message):
    arguments = {
        "q_index": integers(rng, (1, 2, 2, 16), 2), "k_index": integers(rng, (1, 9, 1, 16), 3),
        "weights": integers(rng, (1, 2, 2), 3), "top_k": 4,
    }
    arguments.update(change)
    with pytest.raises(flashattn.Error, match=None) as raised:
        flashattn.lightning_indexer(**arguments)
    assert message in str(raised.value)
