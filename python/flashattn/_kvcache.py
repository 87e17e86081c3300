"""flash_attn_with_kvcache, and flash_attn_varlen_func over a paged cache, on NumPy arrays, shared by flashattn
and flashattn.torch (which passes its tensors as NumPy views, bfloat16 as int16): the side arrays converted,
then one call of _core.kvcache."""

import operator

import numpy as np

from . import _arguments, _block_mask, _core
from ._core import Error


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
        key_indices=_arguments.key_indices(call.key_indices, 4),
        block_mask=_block_mask.decode_argument(call.block_mask),
        document_ids=None if call.document_ids is None else _arguments.int32(call.document_ids, "document_ids", 2),
    )


def keys_per_sequence(call):
    """The keys each sequence of a varlen call over a paged cache attends: seqused_k (vLLM) or the
    differences of cu_seqlens_k (flash-attn), exactly one of them given; int32 (batch,)."""
    if call.seqused_k is not None and call.cu_seqlens_k is not None:
        raise Error(
            "give either seqused_k (keys per sequence) or cu_seqlens_k (their offsets) with block_table, not both"
        )
    if call.seqused_k is not None:
        return _arguments.int32(call.seqused_k, "seqused_k", 1)
    if call.cu_seqlens_k is None:
        raise Error("block_table needs the keys per sequence: give seqused_k or cu_seqlens_k")
    cu = _arguments.int32(call.cu_seqlens_k, "cu_seqlens_k", 1)
    if cu.size == 0 or cu[0] != 0:
        raise Error(f"cu_seqlens_k must start at 0, got {cu[:1].tolist()}")
    counts = np.diff(cu)
    if counts.size > 0 and counts.min() < 0:
        b = int(np.argmax(counts < 0))
        raise Error(
            f"cu_seqlens_k must be non-decreasing, got cu_seqlens_k[{b}]={cu[b]} > cu_seqlens_k[{b + 1}]={cu[b + 1]}"
        )
    return counts.astype(np.int32)


def varlen_kvcache(call, bf16=False):
    """Runs a flash_attn_varlen_func call with block_table (the arrays as NumPy): the packed queries
    (total_q, heads_q, d) over the paged caches k and v, through decode's packed form. Returns (out
    (total_q, heads_q, dv), softmax_lse (heads_q, total_q) or None)."""
    if float(call.dropout_p) > 0:
        raise Error(f"dropout_p must be 0 with block_table (attention over a KV cache has no dropout), got {call.dropout_p}")
    q = call.q
    if not isinstance(q, np.ndarray) or q.ndim != 3:
        raise Error(f"q must have 3 dimensions (total_q, heads_q, head_dim), got {np.ndim(q)}")
    cache_seqlens = keys_per_sequence(call)
    window_left, window_right = _arguments.window(call.window_size)
    return _core.kvcache(
        q[np.newaxis],
        call.k,
        call.v,
        k=None,
        v=None,
        rotary_cos=None,
        rotary_sin=None,
        cache_seqlens=cache_seqlens,
        block_table=_arguments.int32(call.block_table, "block_table", 2),
        alibi_slopes=None if call.alibi_slopes is None else _arguments.float32(call.alibi_slopes, "alibi_slopes"),
        softmax_scale=None if call.softmax_scale is None else float(call.softmax_scale),
        causal=bool(call.causal),
        window_left=window_left,
        window_right=window_right,
        softcap=float(call.softcap),
        rotary_interleaved=False,
        num_splits=0,
        return_lse=bool(call.return_attn_probs),
        bf16=bf16,
        sinks=_arguments.sinks(call.sinks),
        k_scale=call.k_scale,
        v_scale=call.v_scale,
        cache_dtype=None if call.cache_dtype is None else str(call.cache_dtype),
        cu_seqlens_q=_arguments.int32(call.cu_seqlens_q, "cu_seqlens_q", 1),
        max_seqlen_q=operator.index(call.max_seqlen_q),
        key_indices=_arguments.key_indices(call.key_indices, 3),
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


def lightning_indexer(call, bf16=False):
    """Runs a lightning_indexer call (its bound arguments, q_index and k_index as NumPy): returns (key_indices,
    scores or None)."""
    return _core.lightning_indexer(
        call.q_index,
        call.k_index,
        _arguments.float32(call.weights, "weights"),
        top_k=operator.index(call.top_k),
        cache_seqlens=None if call.cache_seqlens is None else _arguments.int32(call.cache_seqlens, "cache_seqlens", 1),
        block_table=None if call.block_table is None else _arguments.int32(call.block_table, "block_table", 2),
        causal=bool(call.causal),
        k_scale=None if call.k_scale is None else _arguments.float32(call.k_scale, "k_scale"),
        cache_dtype=None if call.cache_dtype is None else str(call.cache_dtype),
        return_scores=bool(call.return_scores),
        bf16=bf16,
    )
