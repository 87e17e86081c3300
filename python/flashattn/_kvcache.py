"""flash_attn_with_kvcache on NumPy arrays, shared by flashattn and flashattn.torch (which passes its
tensors as NumPy views, bfloat16 as int16): the side arrays converted, then one call of _core.kvcache."""

import operator

import numpy as np

from . import _arguments, _core


def kvcache(call, bf16=False):
    """Runs a flash_attn_with_kvcache call (its bound arguments, the arrays as NumPy): returns (out,
    softmax_lse or None) and appends k and v to the caches in place (and, for a quantized cache with
    per-token scales, their scales to k_scale and v_scale)."""
    q, k_cache, block_table, cache_seqlens = call.q, call.k_cache, call.block_table, call.cache_seqlens
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
    cache_seqlens = _arguments.int32(cache_seqlens, "cache_seqlens", 1)
    if paged:
        block_table = _arguments.int32(block_table, "block_table", 2)
    tables = {
        name: None if getattr(call, name) is None else _arguments.float32(getattr(call, name), name)
        for name in ("rotary_cos", "rotary_sin", "alibi_slopes")
    }
    window_left, window_right = _arguments.window(call.window_size)
    return _core.kvcache(
        q,
        k_cache,
        call.v_cache,
        k=call.k,
        v=call.v,
        cache_seqlens=cache_seqlens,
        block_table=block_table,
        **tables,
        softmax_scale=None if call.softmax_scale is None else float(call.softmax_scale),
        causal=bool(call.causal),
        window_left=window_left,
        window_right=window_right,
        softcap=float(call.softcap),
        rotary_interleaved=bool(call.rotary_interleaved),
        num_splits=operator.index(call.num_splits),
        return_lse=bool(call.return_softmax_lse),
        bf16=bf16,
        sinks=_arguments.sinks(call.sinks),
        head_dim_v=None if call.head_dim_v is None else operator.index(call.head_dim_v),
        k_scale=call.k_scale,
        v_scale=call.v_scale,
        cache_dtype=None if call.cache_dtype is None else str(call.cache_dtype),
        quantize_query_int8=bool(call.quantize_query_int8),
        quantize_probs_u8=bool(call.quantize_probs_u8),
    )


def quantize_kv(call, bf16=False):
    """Runs a quantize_kv call (its bound arguments, x as NumPy): returns (values, scales)."""
    return _core.quantize_kv(
        call.x,
        dtype=str(call.dtype),
        granularity=None if call.granularity is None else str(call.granularity),
        group_size=0 if call.group_size is None else operator.index(call.group_size),
        bf16=bf16,
    )
