"""Ring attention for CPU ``torch.Tensor`` s over a torch.distributed process group, with autograd.

Every rank of the group calls ``ring_flash_attn_func`` with its own shard of one long sequence (see
``flashattn.distributed`` for the layouts and ``shard_indices``); the K/V shards travel around the ring
with point-to-point ``isend``/``irecv`` (any backend that has them; written for gloo) while each rank
computes its rows against the visiting shard with flashattn's kernels. ``loss.backward()`` runs the ring
backward pass and must then be called on every rank too. ``decode_with_kvcache`` decodes over a KV cache
sharded along each sequence (inference only: no autograd). No MPI is needed on this path.
"""

from . import _arguments, _torch_call, _torch_decode

__all__ = ["ring_flash_attn_func", "decode_with_kvcache"]


def ring_flash_attn_func(
    q,
    k,
    v,
    *,
    group=None,
    layout="zigzag",
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    seed=None,
    timeout=60.0,
    sinks=None,
):
    """Attention over one sequence sharded across the ranks of `group` (None = the default group), each rank
    passing its shard: q (batch, seqlen_local, heads_q, d), k (batch, seqlen_local, heads_kv, d), v (batch,
    seqlen_local, heads_kv, dv), float32, float16 or bfloat16 CPU tensors, differentiable in q, k and v, and
    in sinks: attention sinks, a (heads_q,) tensor (or array) as in flashattn.torch.flash_attn_func, the same
    values on every rank. A sinks tensor's gradient is THIS RANK'S SHARE: the terms of its own rows; the
    whole gradient is the sum over the ranks (the allreduce a data-parallel wrapper does for every
    replicated parameter, or dist.all_reduce(sinks.grad)).

    A collective: every rank of the group calls it (and later loss.backward()) with the same keywords.
    The global sequence length is the sum of the ranks' seqlen_local; rank r must hold
    shard_indices(seqlen, world_size, r, layout)'s rows, in that order ("zigzag" or "contiguous").
    The keywords are flashattn.torch.flash_attn_func's, applied at global positions (causal, window_size,
    alibi_slopes, dropout: the mask a single process draws with the same seed; seed None: every rank draws
    one from torch's default generator, as flashattn.torch does, and all use rank 0's).
    Before any transfer the ranks exchange their arguments: if any rank's are invalid or the ranks
    disagree, every rank raises the same flashattn.Error (TypeError for element types). timeout: seconds a
    transfer may take before the call raises RuntimeError (a rank left the call); the group's own timeout
    bounds its collectives. deterministic: accepted; the ring is deterministic for a given world size.

    Returns out (batch, seqlen_local, heads_q, dv) of q's dtype, or (out, softmax_lse, None) with
    return_attn_probs=True, softmax_lse float32 (batch, heads_q, seqlen_local).
    """
    del deterministic
    keywords = _arguments.modifier_keywords(locals())
    out, lse = _torch_call.ring_attention(q, k, v, group, layout, timeout, keywords)
    return (out, lse, None) if return_attn_probs else out


def decode_with_kvcache(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    *,
    group=None,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    timeout=60.0,
    sinks=None,
    head_dim_v=None,
    k_scale=None,
    v_scale=None,
    cache_dtype=None,
    quantize_query_int8=False,
    quantize_probs_u8=False,
    cu_seqlens_q=None,
    max_seqlen_q=None,
):
    """flashattn.distributed.decode_with_kvcache for CPU tensors over the ranks of `group` (None = the default
    group): returns (out, softmax_lse) merged over every rank, the same on every rank, as new tensors (out of
    q's dtype, softmax_lse float32). Inference only: nothing is recorded for autograd.

    Every argument as in flashattn.distributed.decode_with_kvcache, as tensors (q, k_cache, v_cache, k, v,
    k_scale, v_scale; float32, float16 or bfloat16, the caches also int8 or uint8 when quantized) or, for the
    small side inputs (cache_seqlens, rotary tables, block_table, alibi_slopes, sinks, cu_seqlens_q), tensors or
    arrays: q (batch, seqlen_q, heads_q, d), or packed (total_q, heads_q, d) with cu_seqlens_q; this rank's
    consecutive part of every sequence's cache, rank 0 holding the oldest keys; new keys k, v appended on the
    rank that holds the sequence's tail (updating that rank's caches in place). A collective: every rank of
    the group calls it. Before anything is written the ranks exchange their arguments and then check every
    call they are about to make: if any rank's are invalid or the ranks disagree, every rank raises the same
    flashattn.Error (TypeError for element types). timeout: seconds the gather of the partial results may
    take before the call raises RuntimeError (a rank left the call); the group's own timeout bounds the
    checks. Each rank's partial result travels as float32 (O(total query rows·heads_q·dv) per rank, whatever
    the cache length) through one all_gather, and every rank merges them in rank order, the sinks joining
    each row once.
    """

    def prepare():
        return _torch_decode.prepare(
            tensors=dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v, k_scale=k_scale, v_scale=v_scale),
            tables=dict(rotary_cos=rotary_cos, rotary_sin=rotary_sin, block_table=block_table),
            cache_seqlens=cache_seqlens,
            packing_keywords=dict(cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q),
            modifiers=dict(
                softmax_scale=softmax_scale,
                causal=causal,
                window_size=window_size,
                softcap=softcap,
                alibi_slopes=alibi_slopes,
                sinks=sinks,
            ),
            options=_torch_decode.keyword_options(
                num_splits, head_dim_v, cache_dtype, quantize_query_int8, quantize_probs_u8, rotary_interleaved
            ),
            timeout=timeout,
        )

    return _torch_decode.sharded_decode(group, prepare)
