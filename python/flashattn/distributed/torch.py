"""Ring attention for CPU ``torch.Tensor`` s over a torch.distributed process group, with autograd.

Every rank of the group calls ``ring_flash_attn_func`` with its own shard of one long sequence (see
``flashattn.distributed`` for the layouts and ``shard_indices``); the K/V shards travel around the ring
with point-to-point ``isend``/``irecv`` (any backend that has them; written for gloo) while each rank
computes its rows against the visiting shard with flashattn's kernels. ``loss.backward()`` runs the ring
backward pass and must then be called on every rank too. No MPI is needed on this path.
"""

from . import _arguments, _torch_call

__all__ = ["ring_flash_attn_func"]


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
