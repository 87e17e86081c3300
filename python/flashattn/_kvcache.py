"""flash_attn_with_kvcache on NumPy arrays, shared by flashattn and flashattn.torch (which passes its
tensors as NumPy views, bfloat16 as int16): the side arrays converted, then one call of _core.kvcache."""

import operator

import numpy as np

from . import _arguments, _core


def kvcache(
    q,
    k_cache,
    v_cache,
    *,
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
    return_lse,
    bf16=False,
):
    """Returns (out, softmax_lse or None); appends k and v to the caches in place."""
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
    if rotary_cos is not None:
        rotary_cos = _arguments.float32(rotary_cos, "rotary_cos")
    if rotary_sin is not None:
        rotary_sin = _arguments.float32(rotary_sin, "rotary_sin")
    if alibi_slopes is not None:
        alibi_slopes = _arguments.float32(alibi_slopes, "alibi_slopes")
    window_left, window_right = _arguments.window(window_size)
    return _core.kvcache(
        q,
        k_cache,
        v_cache,
        k=k,
        v=v,
        rotary_cos=rotary_cos,
        rotary_sin=rotary_sin,
        cache_seqlens=cache_seqlens,
        block_table=block_table,
        alibi_slopes=alibi_slopes,
        softmax_scale=None if softmax_scale is None else float(softmax_scale),
        causal=bool(causal),
        window_left=window_left,
        window_right=window_right,
        softcap=float(softcap),
        rotary_interleaved=bool(rotary_interleaved),
        num_splits=operator.index(num_splits),
        return_lse=bool(return_lse),
        bf16=bf16,
    )
