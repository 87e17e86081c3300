"""The checks and conversions of arguments that flashattn's NumPy functions and flashattn.torch's tensor
functions share, producing what flashattn._core's functions take: the dropout seed, window_size, the small
side arrays, the Modifiers object, the varlen offsets, the scaled_dot_product_attention options and the
merged partials. Imports NumPy only, never torch."""

import operator
import types

import numpy as np

from . import _core
from ._core import Error

_UINT64 = 1 << 64


def call_of(arguments):
    """A public function's arguments (its locals() on entry: every parameter, defaults filled in) as one
    object with an attribute per parameter (call.q, call.dropout_p), which the helpers below take whole."""
    return types.SimpleNamespace(**arguments)


def numpy_seed():
    """A dropout seed drawn from NumPy's global generator (np.random.seed reproduces it): one
    np.random.randint(0, 2**64, dtype=np.uint64) draw, which advances it by two 32-bit outputs."""
    return int(np.random.randint(0, _UINT64, dtype=np.uint64))


def dropout_seed(seed, dropout_p, required=False, draw=numpy_seed):
    """The dropout seed: the given one, or with dropout_p > 0 one draw() (flash-attn takes its seed from
    PyTorch's generator only when it drops); required=True: the caller must give it."""
    if seed is None:
        if required and dropout_p > 0:
            raise Error("seed must be given when dropout_p > 0 (the forward pass's seed), got None")
        return draw() if float(dropout_p) > 0 else 0
    seed = operator.index(seed)
    if not 0 <= seed < _UINT64:
        raise Error(f"seed must be in [0, 2**64), got {seed}")
    return seed


def byte_count(value, name):
    """value as a number of bytes: an int in [0, 2**64)."""
    count = operator.index(value)
    if not 0 <= count < _UINT64:
        raise Error(f"{name} must be in [0, 2**64), got {count}")
    return count


def window(window_size):
    """window_size as the pair of ints (left, right)."""
    try:
        left, right = window_size
        return operator.index(left), operator.index(right)
    except (TypeError, ValueError):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}") from None


def float32(x, name):
    """A C-contiguous float32 copy of x, or x itself when it is one already."""
    array = np.asarray(x)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.float32)


def int32(x, name, ndim):
    """A C-contiguous int32 version of an integer array (a copy only when needed); values must fit."""
    array = np.asarray(x)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype (int32), got {array.dtype}")
    if array.ndim != ndim:
        raise Error(f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''}, got {array.ndim}")
    if array.dtype != np.int32 and array.size > 0:
        low, high = int(array.min()), int(array.max())
        if low < -(2**31) or high >= 2**31:
            raise Error(f"{name} values must fit in int32, got range [{low}, {high}]")
    return np.ascontiguousarray(array, dtype=np.int32)


def modifiers(call, seed_required=False, draw_seed=numpy_seed):
    """The score modifiers of a flash_attn_func, flash_attn_varlen_func or backward call (its bound
    arguments, alibi_slopes as NumPy) as a _core.Modifiers object; with dropout the seed is draw_seed()
    when None, unless seed_required (a backward pass needs its forward pass's seed)."""
    m = _core.Modifiers()
    m.dropout_p = float(call.dropout_p)
    m.softmax_scale = None if call.softmax_scale is None else float(call.softmax_scale)
    m.causal = bool(call.causal)
    m.window_left, m.window_right = window(call.window_size)
    m.softcap = float(call.softcap)
    if call.alibi_slopes is not None:
        slopes = float32(call.alibi_slopes, "alibi_slopes")
        if slopes.ndim not in (1, 2):
            raise Error(
                f"alibi_slopes must have shape (heads_q,) or (batch, heads_q), got {slopes.shape}"
            )
        m.alibi_slopes = slopes
    m.sinks = sinks(call.sinks)
    m.seed = dropout_seed(call.seed, call.dropout_p, required=seed_required, draw=draw_seed)
    return m


def sinks(values):
    """The attention sinks (one logit per query head) as a float32 (heads_q,) array, or None."""
    if values is None:
        return None
    array = float32(values, "sinks")
    if array.ndim != 1:
        raise Error(f"sinks must have shape (heads_q,), got {array.shape}")
    return array


def key_indices(values, ndim):
    """The selected keys of each query row and K/V head as an int32 array of `ndim` dimensions (the last two
    heads_kv and k), or None (every key)."""
    return None if values is None else int32(values, "key_indices", ndim)


def packed_sequences(call):
    """The keywords of _core.varlen_forward and varlen_backward that describe a varlen call's packed
    sequences: the offsets as int32 arrays and the maximum lengths as ints."""
    return {
        "cu_seqlens_q": int32(call.cu_seqlens_q, "cu_seqlens_q", 1),
        "cu_seqlens_k": int32(call.cu_seqlens_k, "cu_seqlens_k", 1),
        "max_seqlen_q": operator.index(call.max_seqlen_q),
        "max_seqlen_k": operator.index(call.max_seqlen_k),
    }


def reject_cache_keywords(call):
    """flash_attn_varlen_func without block_table: seqused_k, the quantized cache's keywords and key_indices
    describe a paged cache and need it."""
    for name in ("seqused_k", "k_scale", "v_scale", "cache_dtype", "key_indices"):
        if getattr(call, name) is not None:
            raise Error(f"{name} applies to a paged KV cache: give block_table too")


def reject_mask_with_causal(attn_mask, is_causal):
    if attn_mask is not None and is_causal:
        raise Error(
            "attn_mask and is_causal cannot both be set (PyTorch's rule); fold the causal mask "
            "into attn_mask"
        )


def broadcast_mask(attn_mask, shape):
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
        raise Error(
            f"attn_mask of shape {mask.shape} is not broadcastable to (batch, heads, L, S) = "
            f"{tuple(shape)}"
        ) from None


def sdpa_mask(call):
    """A scaled_dot_product_attention call's attn_mask for NumPy arrays, broadcast to (batch, heads, L, S),
    after the checks of the mask and the ranks."""
    query, key, attn_mask = call.query, call.key, call.attn_mask
    reject_mask_with_causal(attn_mask, call.is_causal)
    for name, x in (("query", query), ("key", key)):
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            raise Error(
                f"{name} must be a 4-dimensional array (batch, heads, seqlen, dim), got "
                f"{getattr(x, 'ndim', type(x).__name__)}"
            )
    if attn_mask is None:
        return None
    return broadcast_mask(attn_mask, (query.shape[0], query.shape[1], query.shape[2], key.shape[2]))


def sdpa_options(call, attn_mask, draw_seed=numpy_seed):
    """The keywords of _core.sdpa_forward and sdpa_backward after the arrays, for a
    scaled_dot_product_attention call; attn_mask is the call's, broadcast already; with dropout and no seed,
    the seed is draw_seed()."""
    return {
        "attn_mask": attn_mask,
        "dropout_p": float(call.dropout_p),
        "is_causal": bool(call.is_causal),
        "scale": None if call.scale is None else float(call.scale),
        "enable_gqa": bool(call.enable_gqa),
        "seed": dropout_seed(call.seed, call.dropout_p, draw=draw_seed),
    }


def merge_partials(outs, lses):
    """merge_attention_states' NumPy partials checked and stacked into the float32 arrays _core.merge takes:
    o_partials (num_partials, batch, seqlen, heads, dv) and lse_partials (num_partials, batch, heads,
    seqlen), with outs[0], whose dtype the result takes."""
    outs, lses = list(outs), list(lses)
    if len(outs) != len(lses):
        raise Error(f"outs and lses must have the same length, got {len(outs)} and {len(lses)}")
    if not outs:
        raise Error("outs must hold at least one partial result, got an empty list")
    for i, o in enumerate(outs):
        if not isinstance(o, np.ndarray):
            raise TypeError(f"outs[{i}] must be a numpy.ndarray, got {type(o).__name__}")
        if o.dtype != outs[0].dtype:
            raise TypeError(f"outs[{i}] has dtype {o.dtype} but outs[0] has {outs[0].dtype}; they must agree")
        if o.shape != outs[0].shape:
            raise Error(
                f"outs[{i}] has shape {o.shape} but outs[0] has {outs[0].shape}; they must agree"
            )
    for i, lse in enumerate(lses):
        if np.shape(lse) != np.shape(lses[0]):
            raise Error(f"lses[{i}] has shape {np.shape(lse)} but lses[0] has {np.shape(lses[0])}")
    if outs[0].dtype not in (np.float32, np.float16):
        raise TypeError(f"outs must have dtype float32 or float16, got {outs[0].dtype}")
    o_partials = np.stack([o.astype(np.float32, copy=False) for o in outs])
    lse_partials = np.stack([float32(lse, f"lses[{i}]") for i, lse in enumerate(lses)])
    if o_partials.ndim != 5:
        raise Error(f"outs must be (batch, seqlen, heads, dv) arrays, got shape {outs[0].shape}")
    return o_partials, lse_partials, outs[0]
