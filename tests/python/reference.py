"""Plain attention in NumPy: the float64 reference and the same-precision baseline the tests measure against.

attention() computes O = softmax(mask(scale·Q Kᵀ → softcap → + ALiBi + additive mask)) V and, given dO, the
gradients, materializing S and P. With compute=np.float64 it is the reference. With compute=np.float32 and
`low` set to the inputs' dtype it is the "standard implementation in the same precision": products
accumulated in float32 and every intermediate (S, P, O, dP, dS, gradients) rounded to `low`, as a
float16 GEMM with float32 accumulation does; its backward pass is the library's (docs/backward.md: P
recomputed from the float32 LSE, D = rowsum(dO ∘ O)), materialized. Tolerances are then relative to that
baseline's own error (flash-attn's rule): |ours − ref| ≤ 2·|baseline − ref| (+ the result's own rounding,
see assert_within_baseline).
"""

import numpy as np


def rounder(low, compute):
    if low is None or np.dtype(low) == np.dtype(compute):
        return lambda x: x
    return lambda x: x.astype(low).astype(compute)


def visible(Nq, Nk, causal=False, window=(-1, -1)):
    """flash-attn's bottom-right aligned causal/window mask: (Nq, Nk) bool."""
    i = np.arange(Nq)[:, None] + (Nk - Nq)
    j = np.arange(Nk)[None, :]
    keep = np.ones((Nq, Nk), dtype=bool)
    left, right = window
    if causal:
        keep &= j <= i
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep


def score_bias(shape, dtype, *, causal=False, window=(-1, -1), alibi=None, bool_mask=None, add_mask=None):
    """What the reference does to the (b, Hq, Nq, Nk) = `shape` scores after the softcap: the terms it adds
    (−slope·|i + Nk − Nq − j| for alibi (Hq,) or (b, Hq), then add_mask), arrays of `dtype` or wider that
    broadcast to `shape`, and the bool mask of the entries that take part (the causal/window band and
    bool_mask: True = take part), of `shape`."""
    b, Hq, Nq, Nk = shape
    terms = []
    mask = np.broadcast_to(visible(Nq, Nk, causal, window), shape).copy()
    if alibi is not None:
        slopes = np.broadcast_to(
            np.asarray(alibi, dtype=dtype).reshape(-1 if np.ndim(alibi) == 1 else b, Hq), (b, Hq)
        )
        dist = np.abs(np.arange(Nq)[:, None] + (Nk - Nq) - np.arange(Nk)[None, :])
        terms.append(-(slopes[:, :, None, None] * dist))
    if add_mask is not None:
        terms.append(np.broadcast_to(np.asarray(add_mask, dtype=dtype), shape))
    if bool_mask is not None:
        mask &= np.broadcast_to(bool_mask, shape)
    return terms, mask


def split_modifiers(mods, alibi_slopes):
    """A test's modifiers (flashattn's keywords, "alibi": True for ALiBi) as the keyword arguments of flashattn
    and of the reference (window_size as window, softmax_scale as scale); when mods asks for ALiBi,
    alibi_slopes() draws the slopes that both get."""
    kwargs = {key: value for key, value in mods.items() if key != "alibi"}
    ref = {
        "causal": kwargs.get("causal", False),
        "window": kwargs.get("window_size", (-1, -1)),
        "softcap": kwargs.get("softcap", 0.0),
        "scale": kwargs.get("softmax_scale"),
    }
    if mods.get("alibi"):
        kwargs["alibi_slopes"] = ref["alibi"] = alibi_slopes()
    return kwargs, ref


def attention(
    q,
    k,
    v,
    dout=None,
    *,
    scale=None,
    causal=False,
    window=(-1, -1),
    softcap=0.0,
    alibi=None,
    bool_mask=None,
    add_mask=None,
    keep=None,
    dropout_p=0.0,
    compute=np.float64,
    low=None,
    head_major=False,
):
    """q (b, Nq, Hq, d), k (b, Nk, Hkv, d), v (b, Nk, Hkv, dv) (or (b, H, N, d) when head_major).

    bool_mask / add_mask broadcast to (b, Hq, Nq, Nk) (bool: True = take part); keep: dropout keep mask
    (b, Hq, Nq, Nk). alibi: (Hq,) or (b, Hq). Returns dict with o, lse and, given dout, dq, dk, dv, all in
    the layout of the inputs, as `compute` arrays.
    """
    rnd = rounder(low, compute)
    if not head_major:
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
        if dout is not None:
            dout = dout.transpose(0, 2, 1, 3)
    q, k, v = (np.asarray(x, dtype=compute) for x in (q, k, v))
    b, Hq, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    S_raw = rnd(scale * (q @ kr.transpose(0, 1, 3, 2)))
    S = softcap * np.tanh(S_raw / softcap) if softcap > 0 else S_raw
    masks = {"causal": causal, "window": window, "alibi": alibi, "bool_mask": bool_mask, "add_mask": add_mask}
    terms, mask = score_bias((b, Hq, Nq, Nk), compute, **masks)
    for term in terms:
        S = S + term
    S = np.where(mask, S, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = S.max(axis=-1, keepdims=True)
        m_safe = np.where(np.isfinite(m), m, 0.0)
        E = np.exp(S - m_safe)
        l = E.sum(axis=-1, keepdims=True)
        lse = np.where(l > 0, m_safe + np.log(l), -np.inf)
        P = rnd(np.where(l > 0, E / np.where(l > 0, l, 1.0), 0.0))
    Z = np.ones_like(P) if keep is None else keep.astype(compute) / (1.0 - dropout_p)
    Pd = rnd(P * Z)
    O = rnd(Pd @ vr)
    result = {"o": O, "lse": lse[..., 0]}
    if dout is not None:
        # docs/backward.md's backward pass materialized: P recomputed from the stored float32 LSE, D from O.
        with np.errstate(invalid="ignore", over="ignore"):
            lse32 = lse.astype(np.float32).astype(compute)
            P = rnd(
                np.where(mask & np.isfinite(lse32), np.exp(S - np.where(np.isfinite(lse32), lse32, 0.0)), 0.0)
            )
        Pd = rnd(P * Z)
        dO = np.asarray(dout, dtype=compute)
        dV = rnd((Pd.transpose(0, 1, 3, 2) @ dO).reshape(b, Hkv, group, Nk, -1).sum(axis=2))
        dPd = rnd(dO @ vr.transpose(0, 1, 3, 2))
        dP = dPd * Z
        D = (dO * O).sum(
            axis=-1, keepdims=True
        )  # = rowsum(dP ∘ P), as the FlashAttention backward computes it
        dS = P * (dP - D)
        if softcap > 0:
            dS = dS * (1.0 - np.tanh(S_raw / softcap) ** 2)
        dS = rnd(dS)
        dQ = rnd(scale * (dS @ kr))
        dK = rnd((scale * (dS.transpose(0, 1, 3, 2) @ q)).reshape(b, Hkv, group, Nk, d).sum(axis=2))
        result.update(dq=dQ, dk=dK, dv=dV)
    if not head_major:
        for name in ("o", "dq", "dk", "dv"):
            if name in result:
                result[name] = result[name].transpose(0, 2, 1, 3)
    return result


def max_error(got, ref):
    """max |got − ref| over finite reference entries; infinities (−inf LSE rows) must match exactly."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    inf = ~np.isfinite(ref)
    assert np.array_equal(got[inf], ref[inf]), "non-finite entries differ"
    if not (~inf).any():
        return 0.0
    return float(np.abs(got[~inf] - ref[~inf]).max())


def unit_roundoff(dtype):
    """Half the distance from 1 to the next number of `dtype` ('bfloat16' for torch's, which NumPy lacks)."""
    return 2.0**-8 if dtype == "bfloat16" else float(np.finfo(dtype).eps) / 2


def assert_within_baseline(name, got, ref, base, dtype):
    """flash-attn's accuracy rule: our error at most twice the same-precision baseline's, plus
    - the one rounding of the result to its type that no implementation avoids: half an ulp at the
      reference's largest magnitude (with few elements, the baseline's own maximum error can fall below it);
    - in float32, 1e-6 for outputs and 1e-5 for gradients (a gradient entry is a difference of sums of tens of
      O(1) products, e.g. dP − D, whose float32 rounding is ~1e-6 even where the baseline cancels exactly)."""
    err, base_err = max_error(got, ref), max_error(base, ref)
    finite = np.abs(np.asarray(ref, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    magnitude = float(finite.max()) if finite.size else 0.0
    result_rounding = unit_roundoff(dtype) * 2.0 ** np.floor(np.log2(magnitude)) if magnitude > 0 else 0.0
    slack = (1e-5 if name.startswith("d") else 1e-6) if dtype == np.float32 else 0.0
    bound = 2 * base_err + max(slack, result_rounding)
    assert (
        err <= bound
    ), f"{name}: error {err:.3g} > 2 x baseline error {base_err:.3g} + {bound - 2 * base_err:.3g}"


def compare(results, ref, base, dtype, names):
    for name in names:
        assert_within_baseline(name, results[name], ref[name], base[name], dtype)


def assert_drop_rate(keep, dropout_p, sigmas=6.0):
    """The number of dropped elements of a keep mask (bool, any shape, or a list of them) is within `sigmas`
    binomial standard deviations sqrt(n·p·(1 − p)) of n·p: a fair mask fails this with probability below
    2e-9 (6 σ), whatever n, where a fixed tolerance on the fraction is either loose for large masks or
    fails by chance for small ones."""
    masks = [np.asarray(m) for m in (keep if isinstance(keep, (list, tuple)) else [keep])]
    n = sum(m.size for m in masks)
    dropped = n - sum(int(np.count_nonzero(m)) for m in masks)
    sd = np.sqrt(n * dropout_p * (1.0 - dropout_p))
    assert n > 0 and abs(dropped - n * dropout_p) <= sigmas * sd, (
        f"{dropped} of {n} elements dropped, expected {n * dropout_p:.1f} ± {sigmas} × {sd:.1f} (p = {dropout_p})"
    )
