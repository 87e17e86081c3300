"""Attention sinks and multi-head latent attention shapes in the NumPy API: flash_attn_func, its varlen form,
flash_attn_with_kvcache (sinks=...; V read inside the K cache with v_cache=None, head_dim_v=dv) and the
backward passes returning (dq, dk, dv, dsinks), against a float64 NumPy implementation and finite differences
of it."""

import numpy as np
import pytest

import flashattn
from reference import visible


def sink_attention(q, k, v, sinks, causal=False):
    """float64 softmax over the scores and one sink logit per head, without a value: (out, lse)."""
    b, Nq, Hq, d = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    q64 = q.astype(np.float64).transpose(0, 2, 1, 3)
    k64 = np.repeat(k.astype(np.float64).transpose(0, 2, 1, 3), g, axis=1)
    v64 = np.repeat(v.astype(np.float64).transpose(0, 2, 1, 3), g, axis=1)
    S = q64 @ k64.swapaxes(-1, -2) / np.sqrt(d)
    S = np.where(visible(Nq, Nk, causal), S, -np.inf)
    s = np.broadcast_to(np.asarray(sinks, np.float64)[None, :, None, None], (b, Hq, Nq, 1))
    m = np.maximum(S.max(axis=-1, keepdims=True, initial=-np.inf), s)
    m = np.where(np.isneginf(m), 0.0, m)  # a row without keys or sink: exponents relative to 0, all e^{-inf}
    e = np.exp(S - m)
    l = e.sum(axis=-1, keepdims=True) + np.exp(s - m)
    out = (e / np.where(l == 0, 1.0, l)) @ v64
    with np.errstate(divide="ignore"):
        return out.transpose(0, 2, 1, 3), (m + np.log(l))[..., 0]


def random(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_lse_match_float64(rng, causal):
    q, k, v = random(rng, 2, 13, 4, 40), random(rng, 2, 9, 2, 40), random(rng, 2, 9, 2, 40)
    sinks = np.array([0.5, -1.0, -np.inf, 2.0], np.float32)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=causal, sinks=sinks, return_attn_probs=True)
    ref_out, ref_lse = sink_attention(q, k, v, sinks, causal)
    np.testing.assert_allclose(out, ref_out, atol=2e-6)
    np.testing.assert_allclose(lse, ref_lse, atol=2e-6)
    if causal:  # rows 0..3 see no key: O = 0, LSE = s_h
        assert np.all(out[:, :4] == 0)
        np.testing.assert_array_equal(lse[:, :, :4], np.broadcast_to(sinks[None, :, None], (2, 4, 4)))


def test_negative_infinity_sinks_change_no_bit(rng):
    q, k, v = random(rng, 1, 17, 3, 24), random(rng, 1, 21, 3, 24), random(rng, 1, 21, 3, 24)
    plain = flashattn.flash_attn_func(q, k, v, causal=True)
    none = flashattn.flash_attn_func(q, k, v, causal=True, sinks=np.full(3, -np.inf, np.float32))
    assert plain.tobytes() == none.tobytes()


def test_bad_sinks_are_refused(rng):
    q = random(rng, 1, 4, 2, 16)
    with pytest.raises(ValueError, match="sinks"):
        flashattn.flash_attn_func(q, q, q, sinks=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="sinks must be finite or -inf"):
        flashattn.flash_attn_func(q, q, q, sinks=np.array([0.0, np.nan], np.float32))


def test_backward_dsinks_matches_finite_differences(rng):
    q, k, v = random(rng, 2, 11, 4, 16), random(rng, 2, 7, 2, 16), random(rng, 2, 7, 2, 16)
    dout = random(rng, 2, 11, 4, 16)
    sinks = np.array([0.25, -0.5, 1.0, -np.inf], np.float32)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, sinks=sinks, return_attn_probs=True)
    dq, dk, dv, dsinks = flashattn.flash_attn_backward(dout, q, k, v, out, lse, causal=True, sinks=sinks)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape and dsinks.shape == (4,)

    def loss(s):
        return float(np.sum(sink_attention(q, k, v, s, causal=True)[0] * dout))

    step = 2.0**-12
    for h in range(3):
        plus, minus = sinks.astype(np.float64), sinks.astype(np.float64)
        plus[h] += step
        minus[h] -= step
        numeric = (loss(plus) - loss(minus)) / (2 * step)
        assert dsinks[h] == pytest.approx(numeric, rel=1e-4, abs=1e-5)
    assert dsinks[3] == 0.0
    # without sinks the backward pass keeps its three gradients
    out0, lse0, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert len(flashattn.flash_attn_backward(dout, q, k, v, out0, lse0)) == 3


def test_varlen_forward_and_backward_sum_over_sequences(rng):
    cu_q, cu_k = np.array([0, 3, 3, 12]), np.array([0, 5, 9, 17])
    q, k, v = random(rng, 12, 4, 16), random(rng, 17, 2, 16), random(rng, 17, 2, 16)
    dout = random(rng, 12, 4, 16)
    sinks = np.array([0.5, -1.0, 0.0, 1.5], np.float32)
    out, lse, _ = flashattn.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, 9, 8, causal=True, sinks=sinks, return_attn_probs=True
    )
    *_, dsinks = flashattn.flash_attn_varlen_backward(
        dout, q, k, v, out, lse, cu_q, cu_k, 9, 8, causal=True, sinks=sinks
    )
    expected = np.zeros(4)
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref_out, ref_lse = sink_attention(q[None, qs], k[None, ks], v[None, ks], sinks, causal=True)
        np.testing.assert_allclose(out[qs], ref_out[0], atol=2e-6)
        D = np.sum(dout[None, qs].astype(np.float64) * ref_out, axis=-1).transpose(0, 2, 1)  # (1, Hq, Nq)
        expected -= np.sum(np.exp(sinks[None, :, None] - ref_lse) * D, axis=(0, 2))
    np.testing.assert_allclose(dsinks, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_with_sinks_and_values_inside_keys(rng, paged):
    """MLA: d = 576, dv = 512, V = the first 512 features of K (v_cache=None, head_dim_v=512); one K/V head
    for 16 query heads; appends with v=None write each K row once; sinks on."""
    batch, Hq, d, dv, Nmax, page = 2, 16, 576, 512, 128, 64
    cached = np.array([100, 30])
    q = random(rng, batch, 1, Hq, d)
    k_new = random(rng, batch, 2, 1, d)
    sinks = np.linspace(-1.0, 1.0, Hq).astype(np.float32)
    if paged:
        k_cache = random(rng, batch * Nmax // page, page, 1, d)
        block_table = np.arange(batch * Nmax // page, dtype=np.int32)[::-1].reshape(batch, -1).copy()
    else:
        k_cache = random(rng, batch, Nmax, 1, d)
        block_table = None
    out, lse = flashattn.flash_attn_with_kvcache(
        q, k_cache, None, k=k_new, v=None, cache_seqlens=cached, block_table=block_table, num_splits=3,
        sinks=sinks, head_dim_v=dv, return_softmax_lse=True,
    )
    assert out.shape == (batch, 1, Hq, dv)
    for b in range(batch):
        n = cached[b] + 2
        if paged:
            keys = k_cache[block_table[b]].reshape(-1, 1, d)[:n]
        else:
            keys = k_cache[b, :n]
        np.testing.assert_array_equal(keys[cached[b]:], k_new[b])
        ref_out, ref_lse = sink_attention(q[b : b + 1], keys[None], keys[None, :, :, :dv], sinks)
        np.testing.assert_allclose(out[b], ref_out[0], atol=1e-5)
        np.testing.assert_allclose(lse[b], ref_lse[0], atol=1e-5)


def test_kvcache_values_inside_keys_refuses_bad_shapes(rng):
    q, k_cache = random(rng, 1, 1, 2, 64), random(rng, 1, 16, 1, 64)
    before = k_cache.copy()
    with pytest.raises(ValueError, match="head_dim_v"):
        flashattn.flash_attn_with_kvcache(q, k_cache, None, cache_seqlens=4, head_dim_v=65)
    with pytest.raises(ValueError, match="v"):
        flashattn.flash_attn_with_kvcache(
            q, k_cache, None, k=random(rng, 1, 1, 1, 64), v=random(rng, 1, 1, 1, 32), cache_seqlens=4, head_dim_v=32
        )
    np.testing.assert_array_equal(k_cache, before)
