"""flashattn: exact, IO-aware attention on the CPU, with flash-attn's and PyTorch's Python conventions.

NumPy arrays in, NumPy arrays out. The functions follow the flash-attn package (``flash_attn_func``,
``flash_attn_varlen_func``, ``flash_attn_with_kvcache``) and
``torch.nn.functional.scaled_dot_product_attention``; ``flashattn.torch`` offers the same functions for
``torch.Tensor`` with autograd. Importing ``flashattn`` does not import torch.

Arrays and copies
    Q, K, V (and dout, out) are float32 or float16 and are used in place, without copies, whatever their
    strides, as long as the last dimension is contiguous and every stride is a whole number of elements;
    otherwise the call raises ValueError (pass ``numpy.ascontiguousarray(x)``). Outputs are new C-contiguous
    arrays. The small side arrays are converted when needed (a copy only then): ``alibi_slopes`` and rotary
    tables to float32, ``cu_seqlens``, ``cache_seqlens`` and ``block_table`` to int32 (their values must fit),
    ``attn_mask`` to float32 unless it is bool; ``merge_attention_states`` stacks its partials into one
    float32 array. The compute runs with the GIL released, on all cores.

Errors
    A wrong element type is a TypeError; wrong ranks, shapes, strides and values are ValueErrors whose
    message names the argument and the values. Nothing passed in is modified by a call that raises
    (``flash_attn_with_kvcache`` checks everything before it writes the cache).

Conventions
    ``softmax_lse`` is float32 (batch, heads_q, seqlen_q), natural log, −inf for a row that sees no key (its
    output is 0). ``causal`` is aligned bottom-right as in flash-attn (query i sees key j ≤ i + Nk − Nq);
    ``scaled_dot_product_attention`` aligns it top-left as PyTorch does. Dropout is Philox-based and keyed by
    ``seed``; the same seed gives the same mask in the forward and the backward pass, where the fused kernels
    regenerate it instead of storing it.
    ``deterministic`` is accepted for compatibility: the backward pass is deterministic by construction.
"""

import operator
import os

import numpy as np

from . import _core

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_backward",
    "flash_attn_varlen_backward",
    "merge_attention_states",
    "scaled_dot_product_attention",
]

_UINT64 = 1 << 64


def _draw_seed():
    return int.from_bytes(os.urandom(8), "little")


def _seed(seed, dropout_p, required=False):
    """The dropout seed: the given one, or a fresh one (required=True: the caller must give it)."""
    if seed is None:
        if required and dropout_p > 0:
            raise ValueError("seed must be given when dropout_p > 0 (the forward pass's seed), got None")
        return _draw_seed()
    seed = operator.index(seed)
    if not 0 <= seed < _UINT64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return seed


def _window(window_size):
    try:
        left, right = window_size
        return operator.index(left), operator.index(right)
    except (TypeError, ValueError):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}") from None


def _float32(x, name):
    """A C-contiguous float32 copy of x, or x itself when it is one already."""
    array = np.asarray(x)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float32)


def _int32(x, name, ndim):
    """A C-contiguous int32 version of an integer array (a copy only when needed); values must fit."""
    array = np.asarray(x)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype (int32), got {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''}, got {array.ndim}")
    if array.dtype != np.int32 and array.size > 0:
        low, high = int(array.min()), int(array.max())
        if low < -(2**31) or high >= 2**31:
            raise ValueError(f"{name} values must fit in int32, got range [{low}, {high}]")
    return np.ascontiguousarray(array, dtype=np.int32)


def _modifiers(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed):
    m = _core.Modifiers()
    m.dropout_p = float(dropout_p)
    m.softmax_scale = None if softmax_scale is None else float(softmax_scale)
    m.causal = bool(causal)
    m.window_left, m.window_right = _window(window_size)
    m.softcap = float(softcap)
    if alibi_slopes is not None:
        slopes = _float32(alibi_slopes, "alibi_slopes")
        if slopes.ndim not in (1, 2):
            raise ValueError(
                f"alibi_slopes must have shape (heads_q,) or (batch, heads_q), got {slopes.shape}"
            )
        m.alibi_slopes = slopes
    m.seed = seed
    return m


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    seed=None,
):
    """Attention of q over k, v in flash-attn's (batch, seqlen, heads, dim) layout.

    q (batch, seqlen_q, heads_q, d), k (batch, seqlen_k, heads_kv, d), v (batch, seqlen_k, heads_kv, dv),
    float32 or float16, used without copies (see the module docstring). heads_kv divides heads_q
    (grouped-query attention: query head h uses K/V head h // (heads_q // heads_kv)).

    softmax_scale: default 1/sqrt(d). causal: bottom-right aligned. window_size (left, right): query i sees
    keys i + Nk − Nq − left ≤ j ≤ i + Nk − Nq + right, −1 = unbounded. softcap > 0: S ← softcap·tanh(S /
    softcap). alibi_slopes: float32 (heads_q,) or (batch, heads_q), S += −slope·|i + Nk − Nq − j|.
    dropout_p: probability of dropping an element of P (kept ones scaled by 1/(1 − p)), keyed by seed
    (None: a fresh random seed); regenerated inside the fused kernel, never stored.
    deterministic: accepted; every pass is deterministic.

    Returns out (batch, seqlen_q, heads_q, dv) of q's dtype, or with return_attn_probs=True the tuple
    (out, softmax_lse, dropout_mask): softmax_lse float32 (batch, heads_q, seqlen_q), natural log;
    dropout_mask bool (batch, heads_q, seqlen_q, seqlen_k), True where P was kept, or None when dropout_p
    is 0.
    """
    del deterministic
    seed = _seed(seed, dropout_p)
    m = _modifiers(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed)
    out, lse, keep = _core.forward(
        q, k, v, m, return_lse=bool(return_attn_probs), return_dropout_mask=bool(return_attn_probs)
    )
    return (out, lse, keep) if return_attn_probs else out


def flash_attn_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    *,
    seed=None,
):
    """Gradients (dq, dk, dv) of flash_attn_func for the incoming gradient dout (batch, seqlen_q, heads_q,
    dv).

    q, k, v and every keyword as given to the forward call; out and softmax_lse as it returned them (run it
    with return_attn_probs=True). With dropout_p > 0 the forward call's seed is required. The gradients are
    new arrays of q's dtype and the shapes of q, k, v; dk and dv are summed over the query heads sharing a
    K/V head. No gradient flows to alibi_slopes. Deterministic: the same inputs give the same bits.
    """
    del deterministic
    seed = _seed(seed, dropout_p, required=True)
    m = _modifiers(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed)
    dq, dk, dv = _core.backward(dout, q, k, v, out, softmax_lse, m)
    return dq, dk, dv


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    seed=None,
):
    """flash_attn_func over sequences of different lengths packed along one token axis.

    q (total_q, heads_q, d), k (total_k, heads_kv, d), v (total_k, heads_kv, dv); cu_seqlens_q and
    cu_seqlens_k (batch + 1,) integer offsets (converted to int32 if needed): sequence b owns rows
    [cu_seqlens[b], cu_seqlens[b + 1]), starting at 0, non-decreasing, ending at total; each length at most
    max_seqlen_q / max_seqlen_k. Masks align per sequence. alibi_slopes may be (batch, heads_q).
    Arrays with a zero stride (numpy.broadcast_to) are rejected. With dropout_p > 0 the sequences are
    computed one by one (sequence b's dropout stream at offset b of the seed's). Returns out
    (total_q, heads_q, dv), or with return_attn_probs=True (out, softmax_lse (heads_q, total_q), masks):
    masks is a list of one bool (heads_q, seqlen_q_b, seqlen_k_b) keep mask per sequence, or None when
    dropout_p is 0.
    """
    del deterministic
    seed = _seed(seed, dropout_p)
    m = _modifiers(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed)
    out, lse, keep = _core.varlen_forward(
        q,
        k,
        v,
        _int32(cu_seqlens_q, "cu_seqlens_q", 1),
        _int32(cu_seqlens_k, "cu_seqlens_k", 1),
        operator.index(max_seqlen_q),
        operator.index(max_seqlen_k),
        m,
        return_dropout_mask=bool(return_attn_probs),
    )
    return (out, lse, keep) if return_attn_probs else out


def flash_attn_varlen_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    *,
    seed=None,
):
    """Gradients (dq, dk, dv) of flash_attn_varlen_func; out and softmax_lse (heads_q, total_q) as it returned
    them (return_attn_probs=True), the forward call's seed when dropout_p > 0. Computed sequence by sequence;
    deterministic."""
    del deterministic
    seed = _seed(seed, dropout_p, required=True)
    m = _modifiers(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed)
    return _core.varlen_backward(
        dout,
        q,
        k,
        v,
        out,
        softmax_lse,
        _int32(cu_seqlens_q, "cu_seqlens_q", 1),
        _int32(cu_seqlens_k, "cu_seqlens_k", 1),
        operator.index(max_seqlen_q),
        operator.index(max_seqlen_k),
        m,
    )


def _kvcache(
    q,
    k_cache,
    v_cache,
    k,
    v,
    rotary_cos,
    rotary_sin,
    cache_seqlens,
    block_table,
    softmax_scale,
    causal,
    window_size,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
    bf16=False,
):
    """flash_attn_with_kvcache on arrays (bfloat16 as int16 when bf16): converts the side arrays, returns
    (out, softmax_lse)."""
    paged = block_table is not None
    q_batch = q.shape[0] if isinstance(q, np.ndarray) and q.ndim == 4 else 0
    if cache_seqlens is None:
        if isinstance(k_cache, np.ndarray) and k_cache.ndim == 4:
            capacity = k_cache.shape[1] * (
                np.shape(block_table)[1] if paged and np.ndim(block_table) == 2 else 1
            )
        else:
            capacity = 0
        cache_seqlens = np.full(q_batch, capacity, dtype=np.int32)
    elif np.ndim(cache_seqlens) == 0 and np.asarray(cache_seqlens).dtype.kind in "iu":
        cache_seqlens = np.full(q_batch, int(cache_seqlens), dtype=np.int64)
    cache_seqlens = _int32(cache_seqlens, "cache_seqlens", 1)
    if paged:
        block_table = _int32(block_table, "block_table", 2)
    if rotary_cos is not None:
        rotary_cos = _float32(rotary_cos, "rotary_cos")
    if rotary_sin is not None:
        rotary_sin = _float32(rotary_sin, "rotary_sin")
    if alibi_slopes is not None:
        alibi_slopes = _float32(alibi_slopes, "alibi_slopes")
    left, right = _window(window_size)
    out, lse = _core.kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        rotary_cos,
        rotary_sin,
        cache_seqlens,
        block_table,
        alibi_slopes,
        None if softmax_scale is None else float(softmax_scale),
        bool(causal),
        left,
        right,
        float(softcap),
        bool(rotary_interleaved),
        operator.index(num_splits),
        True,
        bf16,
    )
    return out, lse


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Attention of a few new queries over a key/value cache, appending k and v to the cache in place.

    q (batch, seqlen_q, heads_q, d). Contiguous cache: k_cache, v_cache (batch, seqlen_cache, heads_kv, d).
    Paged cache: k_cache, v_cache (num_blocks, page_block_size, heads_kv, d) and block_table (batch,
    max_blocks) integer page numbers (any page_block_size ≥ 1). k_cache and v_cache must share their strides.
    cache_seqlens: int or (batch,) integers, the keys already cached; None = the cache is full.
    k, v (batch, seqlen_new, heads_kv, d), optional: rotated (if rotary tables are given) and written into
    the caches at positions cache_seqlens[b] + i, which must fit (the caches must then be writable); the
    queries then attend to cache_seqlens[b] + seqlen_new keys, the queries being the last positions (causal
    and window aligned so). rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2), converted to float32:
    applied to q and k at their positions, GPT-J pairs when rotary_interleaved else GPT-NeoX halves (unlike
    flash-attn, q is rotated at its own positions also when neither causal nor a window is set).
    num_splits: key chunks computed in parallel and merged by LSE, 0 = heuristic.

    Returns out (batch, seqlen_q, heads_q, d), or (out, softmax_lse (batch, heads_q, seqlen_q)) with
    return_softmax_lse=True. Everything is checked before the caches are written: a call that raises leaves
    them unchanged.
    """
    out, lse = _kvcache(
        q,
        k_cache,
        v_cache,
        k,
        v,
        rotary_cos,
        rotary_sin,
        cache_seqlens,
        block_table,
        softmax_scale,
        causal,
        window_size,
        softcap,
        rotary_interleaved,
        alibi_slopes,
        num_splits,
    )
    return (out, lse) if return_softmax_lse else out


def merge_attention_states(outs, lses):
    """Merges partial attention results over disjoint key sets by their log-sum-exp.

    outs: list of (batch, seqlen, heads, dv) arrays, lses: list of float32 (batch, heads, seqlen) arrays,
    each pair as flash_attn_func(..., return_attn_probs=True) returns it (out, softmax_lse). The partials
    are stacked into float32 arrays (a copy). Returns (out, lse): out of the partials' dtype,
    lse = log Σ exp(lse_k), out = Σ exp(lse_k − lse)·out_k; a row that no partial saw is 0 with lse −inf.
    """
    outs, lses = list(outs), list(lses)
    if len(outs) != len(lses):
        raise ValueError(f"outs and lses must have the same length, got {len(outs)} and {len(lses)}")
    if not outs:
        raise ValueError("outs must hold at least one partial result, got an empty list")
    for i, o in enumerate(outs):
        if not isinstance(o, np.ndarray):
            raise TypeError(f"outs[{i}] must be a numpy.ndarray, got {type(o).__name__}")
        if o.dtype != outs[0].dtype:
            raise TypeError(f"outs[{i}] has dtype {o.dtype} but outs[0] has {outs[0].dtype}; they must agree")
        if o.shape != outs[0].shape:
            raise ValueError(
                f"outs[{i}] has shape {o.shape} but outs[0] has {outs[0].shape}; they must agree"
            )
    for i, lse in enumerate(lses):
        if np.shape(lse) != np.shape(lses[0]):
            raise ValueError(f"lses[{i}] has shape {np.shape(lse)} but lses[0] has {np.shape(lses[0])}")
    if outs[0].dtype not in (np.float32, np.float16):
        raise TypeError(f"outs must have dtype float32 or float16, got {outs[0].dtype}")
    o_partials = np.stack([o.astype(np.float32, copy=False) for o in outs])
    lse_partials = np.stack([_float32(lse, f"lses[{i}]") for i, lse in enumerate(lses)])
    if o_partials.ndim != 5:
        raise ValueError(f"outs must be (batch, seqlen, heads, dv) arrays, got shape {outs[0].shape}")
    return _core.merge(o_partials, lse_partials, outs[0])


def _sdpa_mask(attn_mask, shape):
    """attn_mask as a bool or float32 array broadcast (zero strides, no copy) to `shape`."""
    mask = np.asarray(attn_mask)
    if mask.dtype != np.bool_:
        if mask.dtype.kind != "f":
            raise TypeError(f"attn_mask must have dtype bool or a float dtype, got {mask.dtype}")
        mask = mask.astype(np.float32, copy=False)
    try:
        if mask.ndim > 4:
            raise ValueError
        return np.broadcast_to(mask, shape)
    except ValueError:
        raise ValueError(
            f"attn_mask of shape {mask.shape} is not broadcastable to (batch, heads, L, S) = "
            f"{tuple(shape)}"
        ) from None


def _sdpa_arguments(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """The mask broadcast to (batch, heads, L, S) and the checked scalars shared by both APIs."""
    if attn_mask is not None and is_causal:
        raise ValueError(
            "attn_mask and is_causal cannot both be set (PyTorch's rule); fold the causal mask "
            "into attn_mask"
        )
    for name, x in (("query", query), ("key", key)):
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise ValueError(
                f"{name} must be a 4-dimensional array (batch, heads, seqlen, dim), got "
                f"{getattr(x, 'ndim', type(x).__name__)}"
            )
    if attn_mask is not None:
        attn_mask = _sdpa_mask(attn_mask, (query.shape[0], query.shape[1], query.shape[2], key.shape[2]))
    return attn_mask, float(dropout_p), bool(is_causal), None if scale is None else float(scale)


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    seed=None,
):
    """torch.nn.functional.scaled_dot_product_attention's semantics on NumPy arrays.

    query (batch, heads, L, E), key (batch, heads_kv, S, E), value (batch, heads_kv, S, Ev), float32 or
    float16, used without copies through their strides (the last dimension contiguous). is_causal: query i
    sees key j ≤ i (aligned top-left, as PyTorch; for L ≠ S this differs from flash_attn_func's causal).
    attn_mask: broadcastable to (batch, heads, L, S); bool (True = take part) or float (added to the scores,
    converted to float32); not together with is_causal. A row that sees no key gives 0 (as PyTorch ≥ 2.5).
    scale: default 1/sqrt(E). enable_gqa: heads_kv may divide heads (query head h uses K/V head
    h // (heads // heads_kv), as repeat_interleave does); otherwise the head counts must agree.
    dropout_p with seed (None: fresh) as in flash_attn_func. Returns (batch, heads, L, Ev) of query's dtype.
    """
    attn_mask, dropout_p, is_causal, scale = _sdpa_arguments(
        query, key, value, attn_mask, dropout_p, is_causal, scale
    )
    out, _ = _core.sdpa_forward(
        query, key, value, attn_mask, dropout_p, is_causal, scale, bool(enable_gqa), _seed(seed, dropout_p)
    )
    return out
