"""flashattn.distributed: attention over one long sequence sharded across processes (context parallelism).

Each rank holds a shard of the sequence's rows in flash-attn's (batch, seqlen_local, heads, dim) layout.
The ring functions pass the K/V shards around the ranks while each computes its rows against the visiting
shard, and merge the partial results by their log-sum-exp; the result is the attention a single process
computes over the whole sequence, at global positions (causal, window, ALiBi, dropout). The global
sequence length is the sum of the ranks' seqlen_local; rank r must hold the rows
``shard_indices(seqlen, world_size, r, layout)``, in that order:

- ``"contiguous"``: rank r holds rows [⌊rN/W⌋, ⌊(r+1)N/W⌋).
- ``"zigzag"`` (the default): the sequence is cut into 2W chunks [⌊cN/2W⌋, ⌊(c+1)N/2W⌋) and rank r holds
  chunks r and 2W−1−r, which gives every rank the same causal work.

This module's functions take NumPy arrays and an mpi4py communicator (``comm``) and run flashattn's MPI
library (flashattn::mpi); ``flashattn.distributed.torch`` runs the ring (with autograd) and the sharded
decode over a torch.distributed group, without MPI. Every function is a collective: every rank of the
communicator calls it. Before any transfer the ranks exchange their arguments: if any rank's are invalid, or the ranks disagree
(shapes, dtype, keywords, layout), every rank raises the same flashattn.Error (TypeError for element
types) naming the rank and the values, and nobody hangs. A transfer that does not complete within
``timeout`` seconds (a rank left the call) raises flashattn.Error. The outputs are new arrays; nothing passed
in is modified (but the KV cache that decode_with_kvcache appends to).
"""

from . import _arguments, _layout, _mpi

__all__ = [
    "ring_flash_attn_func",
    "ring_flash_attn_backward",
    "decode_with_kvcache",
    "shard_indices",
    "last_ring_timings",
]


def shard_indices(seqlen, world_size, rank, layout="zigzag"):
    """The global positions (int64 NumPy array) of the rows that rank `rank` of `world_size` holds in
    `layout`, in the order it stores them. Needs no MPI: flashattn.distributed.torch's shards are the same."""
    return _layout.shard_indices(seqlen, world_size, rank, layout)


def last_ring_timings():
    """Per ring step of this rank's last ring call, a dict: compute_seconds (kernels and merges),
    transfer_seconds (posting to completion of the step's transfers), wait_seconds (waited for them after
    the compute: 0 when the transfer was hidden) and bytes (received)."""
    return _mpi.compiled().last_ring_timings()


def ring_flash_attn_func(
    q,
    k,
    v,
    *,
    comm,
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
    """flashattn.flash_attn_func over one sequence sharded across the ranks of `comm`.

    q (batch, seqlen_local, heads_q, d), k (batch, seqlen_local, heads_kv, d), v (batch, seqlen_local,
    heads_kv, dv): this rank's rows, float32 or float16, used without copies (the last dimension
    contiguous). The keywords are flash_attn_func's, applied at global positions; with dropout_p > 0 and
    seed None, every rank draws one seed from NumPy's global generator (as flash_attn_func does) and all use
    rank 0's, which the collective check carries to every rank (pass a seed to be able to call
    ring_flash_attn_backward). Blocks are
    computed in float32 and out rounded once. deterministic: accepted; for a given number of ranks the
    results are the same bits on every run. sinks: float32 (heads_q,) attention sinks as in flash_attn_func,
    the same values on every rank; each row's sink joins it once, after the merge of its blocks.

    Returns out (batch, seqlen_local, heads_q, dv) of q's dtype, or (out, softmax_lse, None) with
    return_attn_probs=True: softmax_lse float32 (batch, heads_q, seqlen_local), natural log.
    """
    del deterministic
    keywords = _arguments.modifier_keywords(locals())

    def compile_call(m):
        arrays = [_mpi.addressable(x) for x in (q, k, v)]
        return _mpi.compiled().RingForward(comm, *arrays, **_mpi.ring_keywords(layout, m))

    out, lse = _mpi.run_ring(comm, layout, timeout, keywords, (q, k, v), compile_call)
    return (out, lse, None) if return_attn_probs else out


def ring_flash_attn_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    *,
    comm,
    layout="zigzag",
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    seed=None,
    timeout=60.0,
    sinks=None,
):
    """The gradients (dq, dk, dv) of ring_flash_attn_func on this rank's shards, for the incoming gradient
    dout (batch, seqlen_local, heads_q, dv); with sinks, (dq, dk, dv, dsinks).

    q, k, v, comm and every keyword as given to the forward call; out and softmax_lse as it returned them
    (return_attn_probs=True); the forward call's seed when dropout_p > 0. The dK/dV accumulators travel the
    ring in float32 and come home after W steps; the result is the same bits on every run for a given
    number of ranks. New arrays of q's dtype and of the shapes of q, k, v.

    dsinks (float32 (heads_q,)) is THIS RANK'S SHARE of the sinks' gradient: −Σ e^{sinks[h] − lse}·rowsum(dout
    ∘ out) over this rank's own rows only, as for any parameter every rank holds a copy of. The whole
    gradient is the sum of the shares over the ranks (comm.allreduce, or a data-parallel wrapper's
    allreduce); the call itself adds no communication for it.
    """
    del deterministic
    keywords = _arguments.modifier_keywords(locals())

    def compile_call(m):
        _arguments.check_seed(seed, m.dropout_p, required=True)
        arrays = [_mpi.addressable(x) for x in (dout, q, k, v, out)]
        call = _mpi.compiled().RingBackward(comm, *arrays, softmax_lse, **_mpi.ring_keywords(layout, m))
        _arguments.check_outputs(q, v, out, dout, softmax_lse)
        return call

    return _mpi.run_ring(comm, layout, timeout, keywords, (q, k, v), compile_call)


def decode_with_kvcache(
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    *,
    comm,
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
    """flashattn.flash_attn_with_kvcache over a KV cache sharded along each sequence across the ranks of
    `comm`; returns (out, softmax_lse) merged over every rank, the same on every rank.

    q (batch, seqlen_q, heads_q, d) is the same on every rank. k_cache, v_cache: this rank's consecutive
    part of every sequence's cache, contiguous (batch, seqlen_cache, heads_kv, d) or paged (num_blocks,
    page_block_size, heads_kv, d) with block_table; rank 0 holds the oldest keys. cache_seqlens: int or
    (batch,) integers, the keys of each sequence on this rank. k, v (batch, seqlen_new, heads_kv, d),
    optional: appended on the rank that holds the sequence's tail (the highest rank with a key of it, or
    rank 0 if none has any), ignored elsewhere. Rotary embedding, causal masks, windows and ALiBi
    apply at global positions, the queries being the last positions of the whole sequence. Every other keyword as
    in flash_attn_with_kvcache (num_splits is per rank), sinks and head_dim_v included: v_cache None reads V
    as the first head_dim_v features of each k_cache row (v must then be None). A quantized cache (int8, or
    uint8 with cache_dtype="fp8_e4m3" or "fp8_e5m2") takes k_scale and v_scale as flash_attn_with_kvcache does,
    per-token scales being this rank's rows of them; the ranks must agree on the element type, the scales' granularity
    and the quantize_* options (with quantize_probs_u8 the weights are rounded per block of each rank's
    keys, so the result differs from one process's by that rounding). Each rank computes its
    partial result without the sinks, one collective gathers them (O(batch·seqlen_q·heads_q·dv) floats per
    rank, whatever the cache length) and every rank merges them in rank order, where the sinks (the same
    values on every rank) join each row once.

    Packed queries (a prefill-and-decode step, as flash_attn_varlen_func over a cache takes them): with
    cu_seqlens_q (batch + 1,) integer offsets, q is (total_q, heads_q, d) and sequence b owns its rows
    [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (any count, 0 included), the last positions of the whole sequence;
    max_seqlen_q bounds each count (None: the largest). k and v, if given, are (total_q, heads_kv, d): each
    sequence appends the rows of its own queries on its tail rank. out is then (total_q, heads_q, dv) and
    softmax_lse (heads_q, total_q). The ranks must pass the same cu_seqlens_q.
    """
    _mpi.check_comm(comm)

    def prepare():
        return _mpi.prepare_decode(
            comm,
            q,
            k_cache,
            v_cache,
            cache_seqlens,
            k=k,
            v=v,
            rotary_cos=rotary_cos,
            rotary_sin=rotary_sin,
            block_table=block_table,
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=window_size,
            softcap=softcap,
            rotary_interleaved=rotary_interleaved,
            alibi_slopes=alibi_slopes,
            num_splits=num_splits,
            timeout=timeout,
            sinks=sinks,
            head_dim_v=head_dim_v,
            k_scale=k_scale,
            v_scale=v_scale,
            cache_dtype=cache_dtype,
            quantize_query_int8=quantize_query_int8,
            quantize_probs_u8=quantize_probs_u8,
            cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=max_seqlen_q,
        )

    (call, seconds), _, _ = _mpi.agree(comm, prepare)
    return call.run(timeout_seconds=seconds)
