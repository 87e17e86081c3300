"""The NumPy + mpi4py functions' helpers: the compiled module, the communicator, the keywords and the
collective check around a prepared call of flashattn._distributed."""

import importlib.util
import operator

import numpy as np

from .. import _arguments as _kernel_arguments
from .._core import Error
from . import _agreement, _arguments, _layout


def compiled():
    """flashattn._distributed, imported on first use: it imports mpi4py.MPI, which initializes MPI."""
    if importlib.util.find_spec("flashattn._distributed") is None:
        raise ImportError("flashattn was built without flashattn._distributed, which the NumPy + mpi4py functions "
                          "need: the build found no MPI or no mpi4py (scripts/install-deps.sh installs both). "
                          "flashattn.distributed.torch works without it.")
    from .. import _distributed

    return _distributed


def check_comm(comm):
    """TypeError unless comm is an mpi4py intracommunicator (raised before the collective check, which
    needs the communicator: every rank that passes a wrong one raises it)."""
    from mpi4py import MPI

    if not isinstance(comm, MPI.Intracomm):
        raise TypeError(f"comm must be an mpi4py.MPI.Intracomm, got {type(comm).__name__}")


def agree(comm, prepare, layout=None):
    """The collective check around prepare() → (this rank's prepared call, seqlen = the sum of the ranks'
    lengths, the agreed dropout seed: rank 0's draw from NumPy's global generator when none is given).
    With a layout, each rank must hold its share of the rows."""
    call, lengths, seed = _agreement.agree(comm.allgather, prepare, draw_seed=_kernel_arguments.numpy_seed)
    if layout is not None:
        _layout.check_lengths(lengths, layout)
        return call, sum(lengths), seed
    return call, None, seed


def run_ring(comm, layout, timeout, keywords, shards, compile_call):
    """A ring call: this rank's checks and compile_call(checked Modifiers) → its prepared call of
    flashattn._distributed, the collective check, then the call's run()."""
    check_comm(comm)
    q, k, v = shards

    def prepare():
        m = modifiers_of(q, keywords)
        call = compile_call(m)
        _arguments.check_shards(q, k, v)
        params = _arguments.describe(q, k, v, layout, m)
        return _agreement.Prepared(params, call=(call, _arguments.check_timeout(timeout)), length=q.shape[1])

    (call, seconds), seqlen, seed = agree(comm, prepare, layout)
    return call.run(seqlen=seqlen, seed=seed, timeout_seconds=seconds)


def modifiers_of(q, keywords):
    """The checked keywords; q's batch and heads (for the slopes' shape) once q is known to be an array of 4
    dimensions."""
    if not isinstance(q, np.ndarray):
        raise TypeError(f"q must be a numpy.ndarray, got {type(q).__name__}")
    if q.ndim != 4:
        raise Error(f"q must have 4 dimensions (batch, seqlen_local, heads_q, head_dim), got {q.ndim}")
    return _arguments.modifiers(q.shape[0], q.shape[2], **keywords)


def addressable(x):
    """x, or for an array without elements (the shard of a rank that holds no row) an equivalent one with the
    strides of a contiguous array: NumPy gives such arrays zero strides, which the bindings reject."""
    if not isinstance(x, np.ndarray) or x.size > 0:
        return x
    dims = [max(n, 1) for n in x.shape]
    strides = [int(np.prod(dims[i + 1 :])) * x.itemsize for i in range(x.ndim)]
    return np.ndarray(x.shape, x.dtype, buffer=bytearray(x.itemsize), strides=strides)


def score_keywords(m):
    """The score modifiers' keywords of the _distributed calls (the ring's and ShardedDecode)."""
    left, right = m.window
    return dict(
        softmax_scale=m.softmax_scale,
        causal=m.causal,
        window_left=left,
        window_right=right,
        softcap=m.softcap,
        alibi_slopes=m.alibi_slopes,
        sinks=m.sinks,
    )


def ring_keywords(layout, m):
    """The keywords of _distributed.RingForward and RingBackward."""
    return dict(score_keywords(m), layout=layout, dropout_p=m.dropout_p)


def prepare_decode(
    comm,
    q,
    k_cache,
    v_cache,
    cache_seqlens,
    *,
    k,
    v,
    rotary_cos,
    rotary_sin,
    block_table,
    softmax_scale,
    causal,
    window_size,
    softcap,
    rotary_interleaved,
    alibi_slopes,
    num_splits,
    timeout,
    sinks,
    head_dim_v,
    k_scale,
    v_scale,
    cache_dtype,
    quantize_query_int8,
    quantize_probs_u8,
    cu_seqlens_q,
    max_seqlen_q,
):
    """decode_with_kvcache's prepared call: the side arrays converted as flash_attn_with_kvcache converts
    them, this rank's checks, and what the ranks must agree on (q itself among it)."""
    if not isinstance(q, np.ndarray):
        raise Error(f"q must be a numpy.ndarray, got {q!r}")
    packing = _arguments.packing(q, cu_seqlens_q, max_seqlen_q)
    batch, heads_q = packing.batch, packing.heads_q
    if packing.packed:  # the compiled call's form: one batch entry of total_q rows
        q, k, v = (None if x is None else np.asarray(x)[np.newaxis] for x in (q, k, v))
    if np.ndim(cache_seqlens) == 0:
        cache_seqlens = np.full(batch, cache_seqlens)
    m = _arguments.modifiers(
        batch,
        heads_q,
        dropout_p=0.0,
        softmax_scale=softmax_scale,
        causal=causal,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        seed=None,
        sinks=sinks,
    )
    call = compiled().ShardedDecode(
        comm,
        q,
        k_cache,
        v_cache,
        _kernel_arguments.int32(cache_seqlens, "cache_seqlens", 1),
        k=k,
        v=v,
        rotary_cos=None if rotary_cos is None else _kernel_arguments.float32(rotary_cos, "rotary_cos"),
        rotary_sin=None if rotary_sin is None else _kernel_arguments.float32(rotary_sin, "rotary_sin"),
        block_table=None if block_table is None else _kernel_arguments.int32(block_table, "block_table", 2),
        **score_keywords(m),
        rotary_interleaved=bool(rotary_interleaved),
        num_splits=int(num_splits),
        head_dim_v=None if head_dim_v is None else operator.index(head_dim_v),
        k_scale=k_scale,
        v_scale=v_scale,
        cache_dtype=None if cache_dtype is None else str(cache_dtype),
        quantize_query_int8=bool(quantize_query_int8),
        quantize_probs_u8=bool(quantize_probs_u8),
        cu_seqlens_q=packing.cu_seqlens_q,
        max_seqlen_q=packing.max_seqlen_q,
    )
    params = dict(
        **packing.describe(),
        q=_arguments.digest(q),
        heads_kv=k_cache.shape[2],
        head_dim_cache=k_cache.shape[3],
        head_dim_v=(k_cache if v_cache is None else v_cache).shape[3] if head_dim_v is None else head_dim_v,
        paged=block_table is not None,
        rotary=None if rotary_cos is None else (np.shape(rotary_cos), bool(rotary_interleaved)),
        causal=m.causal,
        window_size=m.window,
        softcap=m.softcap,
        softmax_scale=m.softmax_scale,
        alibi_slopes=None if m.alibi_slopes is None else _arguments.digest(m.alibi_slopes),
        sinks=None if m.sinks is None else _arguments.digest(m.sinks),
        cache=(str(k_cache.dtype), None if cache_dtype is None else str(cache_dtype)),
        scale_dims=None if k_scale is None else np.ndim(k_scale),
        quantize=(bool(quantize_query_int8), bool(quantize_probs_u8)),
    )
    return _agreement.Prepared(params, call=(call, _arguments.check_timeout(timeout)))
