"""flash_attn_varlen_func (forward and backward) against flash_attn_func on each sequence and against the
float64 reference; merge_attention_states against attention over the union of the key sets."""

import numpy as np
import pytest

import flashattn
from reference import assert_drop_rate, attention, compare, max_error

LENGTHS_Q = [5, 0, 13, 1]
LENGTHS_K = [7, 3, 13, 9]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "mods",
    [{}, {"causal": True}, {"window_size": (4, 2), "softcap": 4.0}],
    ids=["plain", "causal", "window_softcap"],
)
def test_varlen_matches_reference_per_sequence(rng, mods, dtype):
    Hq, Hkv, d, dv = 4, 2, 40, 24
    cu_q, cu_k = np.cumsum([0] + LENGTHS_Q), np.cumsum([0] + LENGTHS_K)  # int64: converted to int32
    q = rng.standard_normal((cu_q[-1], Hq, d)).astype(dtype)
    k = rng.standard_normal((cu_k[-1], Hkv, d)).astype(dtype)
    v = rng.standard_normal((cu_k[-1], Hkv, dv)).astype(dtype)
    dout = rng.standard_normal((cu_q[-1], Hq, dv)).astype(dtype)
    slopes = rng.uniform(0.1, 0.4, size=(len(LENGTHS_Q), Hq)).astype(np.float32)
    out, lse, none = flashattn.flash_attn_varlen_func(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max(LENGTHS_Q),
        max(LENGTHS_K),
        alibi_slopes=slopes,
        return_attn_probs=True,
        **mods
    )
    assert none is None and out.shape == (cu_q[-1], Hq, dv) and lse.shape == (Hq, cu_q[-1])
    dq, dk, dv_ = flashattn.flash_attn_varlen_backward(
        dout, q, k, v, out, lse, cu_q, cu_k, max(LENGTHS_Q), max(LENGTHS_K), alibi_slopes=slopes, **mods
    )
    ref_kw = {
        "causal": mods.get("causal", False),
        "window": mods.get("window_size", (-1, -1)),
        "softcap": mods.get("softcap", 0.0),
    }
    for b in range(len(LENGTHS_Q)):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        args = [x[None] for x in (q[rq], k[rk], v[rk], dout[rq])]
        ref = attention(*args, alibi=slopes[b], **ref_kw)
        base = attention(*args, alibi=slopes[b], compute=np.float32, low=dtype, **ref_kw)
        got = {"o": out[None, rq], "dq": dq[None, rq], "dk": dk[None, rk], "dv": dv_[None, rk]}
        compare(got, ref, base, dtype, ["o", "dq", "dk", "dv"])
        assert max_error(lse[:, rq], ref["lse"][0]) < 1e-4
        # The sequence alone through flash_attn_func: the same numbers.
        single = flashattn.flash_attn_func(*args[:3], alibi_slopes=slopes[b], **mods)
        np.testing.assert_array_equal(single[0], out[rq])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_varlen_dropout_per_sequence_masks(rng, dtype):
    Hq, Hkv, d, p = 2, 1, 24, 0.3
    cu_q, cu_k = np.cumsum([0] + LENGTHS_Q), np.cumsum([0] + LENGTHS_K)
    q = rng.standard_normal((cu_q[-1], Hq, d)).astype(dtype)
    k = rng.standard_normal((cu_k[-1], Hkv, d)).astype(dtype)
    v = rng.standard_normal((cu_k[-1], Hkv, d)).astype(dtype)
    dout = rng.standard_normal((cu_q[-1], Hq, d)).astype(dtype)
    args = (cu_q, cu_k, max(LENGTHS_Q), max(LENGTHS_K))
    out, lse, masks = flashattn.flash_attn_varlen_func(
        q, k, v, *args, dropout_p=p, causal=True, return_attn_probs=True, seed=5
    )
    assert [m.shape for m in masks] == [(Hq, a, b) for a, b in zip(LENGTHS_Q, LENGTHS_K)]
    assert_drop_rate(masks, p)
    dq, dk, dv = flashattn.flash_attn_varlen_backward(
        dout, q, k, v, out, lse, *args, dropout_p=p, causal=True, seed=5
    )
    for b in range(len(LENGTHS_Q)):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        seq = [x[None] for x in (q[rq], k[rk], v[rk], dout[rq])]
        kw = {"causal": True, "keep": masks[b][None], "dropout_p": p}
        ref = attention(*seq, **kw)
        base = attention(*seq, compute=np.float32, low=dtype, **kw)
        got = {"o": out[None, rq], "dq": dq[None, rq], "dk": dk[None, rk], "dv": dv[None, rk]}
        compare(got, ref, base, dtype, ["o", "dq", "dk", "dv"])


def test_varlen_dropout_seed_comes_from_numpys_global_generator(rng):
    """seed=None draws the seed as flash_attn_func does (one np.random.randint(0, 2**64, dtype=np.uint64)):
    np.random.seed reproduces the masks, which are those of the drawn seed given explicitly."""
    cu_q, cu_k = np.cumsum([0] + LENGTHS_Q), np.cumsum([0] + LENGTHS_K)
    q = rng.standard_normal((cu_q[-1], 2, 16)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], 1, 16)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], 1, 16)).astype(np.float32)
    args = (q, k, v, cu_q, cu_k, max(LENGTHS_Q), max(LENGTHS_K))
    np.random.seed(11)
    seed = int(np.random.randint(0, 2**64, dtype=np.uint64))
    after = np.random.random()
    np.random.seed(11)
    out, _, masks = flashattn.flash_attn_varlen_func(*args, dropout_p=0.25, return_attn_probs=True)
    assert np.random.random() == after
    again, _, explicit = flashattn.flash_attn_varlen_func(*args, dropout_p=0.25, return_attn_probs=True, seed=seed)
    np.testing.assert_array_equal(out, again)
    for mask, expected in zip(masks, explicit):
        np.testing.assert_array_equal(mask, expected)
    assert_drop_rate(masks, 0.25)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_merge_of_key_halves_equals_attention_over_all_keys(rng, dtype):
    b, Nq, Nk, H, d = 2, 9, 31, 3, 40
    q = rng.standard_normal((b, Nq, H, d)).astype(dtype)
    k = rng.standard_normal((b, Nk, H, d)).astype(dtype)
    v = rng.standard_normal((b, Nk, H, d)).astype(dtype)
    parts = [slice(0, 12), slice(12, 20), slice(20, Nk)]
    outs, lses = [], []
    for part in parts:
        out, lse, _ = flashattn.flash_attn_func(q, k[:, part], v[:, part], return_attn_probs=True)
        outs.append(out.astype(np.float32))
        lses.append(lse)
    out, lse = flashattn.merge_attention_states(outs, lses)
    assert out.dtype == np.float32 and lse.shape == (b, H, Nq)
    ref = attention(q, k, v)
    # Within twice the error of one call over all keys (its output rounded to dtype once, like each partial).
    full, full_lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    assert max_error(out, ref["o"]) <= 2 * max_error(full, ref["o"]) + 1e-6
    assert max_error(lse, ref["lse"]) <= 2 * max_error(full_lse, ref["lse"]) + 1e-6
    # Partials of the outputs' own dtype give an output of that dtype.
    out16, _ = flashattn.merge_attention_states([o.astype(np.float16) for o in outs], lses)
    assert out16.dtype == np.float16


def test_merge_ignores_partials_that_saw_no_key(rng):
    out = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    lse = rng.standard_normal((1, 2, 4)).astype(np.float32)
    empty_out, empty_lse = np.zeros_like(out), np.full_like(lse, -np.inf)
    merged, merged_lse = flashattn.merge_attention_states([out, empty_out], [lse, empty_lse])
    np.testing.assert_allclose(merged, out, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(merged_lse, lse, rtol=1e-6)
    nothing, nothing_lse = flashattn.merge_attention_states([empty_out], [empty_lse])
    assert np.all(nothing == 0) and np.all(nothing_lse == -np.inf)
