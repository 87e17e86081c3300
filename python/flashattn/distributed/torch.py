"""Ring attention for CPU ``torch.Tensor`` s over a torch.distributed process group, with autograd.

Every rank of the group calls ``ring_flash_attn_func`` with its own shard of one long sequence (see
``flashattn.distributed`` for the layouts and ``shard_indices``); the K/V shards travel around the ring
with point-to-point ``isend``/``irecv`` (any backend that has them; written for gloo) while each rank
computes its rows against the visiting shard with flashattn's kernels. ``loss.backward()`` runs the ring
backward pass and must then be called on every rank too. No MPI is needed on this path.
"""

import datetime
import zlib

import torch
import torch.distributed as dist

import flashattn.torch as fat

from . import _agreement, _layout, _torch_ring

__all__ = ["ring_flash_attn_func"]

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_tensor(x, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU, got device {x.device}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() != 4:
        raise ValueError(f"{name} must have 4 dimensions (batch, seqlen_local, heads, dim), got {x.dim()}")


def _check_shapes(q, k, v):
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but q has dtype {q.dtype}; they must agree")
    if k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
        raise ValueError(
            f"k (batch, seqlen_local, heads_kv, head_dim) = {tuple(k.shape)} must match q's batch, "
            f"seqlen_local and head_dim: q is {tuple(q.shape)}"
        )
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v's (batch, seqlen_local, heads_kv) must be k's {tuple(k.shape[:3])}, got {tuple(v.shape)}")
    if q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"heads_kv = {k.shape[2]} must divide heads_q = {q.shape[2]}")


def _slopes(alibi_slopes, batch, heads_q):
    if alibi_slopes is None:
        return None
    slopes = torch.as_tensor(alibi_slopes).detach().to(torch.float32).contiguous()
    if tuple(slopes.shape) not in ((heads_q,), (batch, heads_q)):
        raise ValueError(
            f"alibi_slopes must have shape (heads_q,) = ({heads_q},) or (batch, heads_q) = ({batch}, {heads_q}), "
            f"got {tuple(slopes.shape)}"
        )
    return slopes


def _window(window_size):
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        raise TypeError(f"window_size must be a pair of ints (left, right), got {window_size!r}") from None


def _prepare(q, k, v, layout, requires_grad, timeout, **keywords):
    """Checks this rank's arguments (the kernel's own checks through a one-row call) → Prepared, whose call
    is (Modifiers, timeout in seconds)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(x, name)
    _check_shapes(q, k, v)
    batch, length, heads_q, head_dim = q.shape
    m = _torch_ring.Modifiers(
        softmax_scale=None if keywords["softmax_scale"] is None else float(keywords["softmax_scale"]),
        causal=bool(keywords["causal"]),
        window=_window(keywords["window_size"]),
        softcap=float(keywords["softcap"]),
        alibi_slopes=_slopes(keywords["alibi_slopes"], batch, heads_q),
        dropout_p=float(keywords["dropout_p"]),
        seed=_agreement.check_seed(keywords["seed"]),
    )
    fat.flash_attn_func(
        torch.zeros(batch, 1, heads_q, head_dim),
        torch.zeros(batch, 1, k.shape[2], head_dim),
        torch.zeros(batch, 1, k.shape[2], v.shape[3]),
        dropout_p=m.dropout_p,
        softmax_scale=m.softmax_scale,
        causal=m.causal,
        window_size=m.window,
        softcap=m.softcap,
        alibi_slopes=m.alibi_slopes,
        seed=0,
    )
    slopes = None
    if m.alibi_slopes is not None:
        slopes = (tuple(m.alibi_slopes.shape), zlib.crc32(m.alibi_slopes.numpy().tobytes()))
    params = dict(
        layout=_layout.check_layout(layout),
        dtype=str(q.dtype),
        batch=batch,
        heads_q=heads_q,
        heads_kv=k.shape[2],
        head_dim=head_dim,
        head_dim_v=v.shape[3],
        causal=m.causal,
        window_size=m.window,
        softcap=m.softcap,
        softmax_scale=m.softmax_scale,
        dropout_p=m.dropout_p,
        seed=m.seed,
        alibi_slopes=slopes,
        requires_grad=requires_grad,
    )
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    return _agreement.Prepared(params, call=(m, timeout), length=length)


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def _ring(group, layout, lengths, timeout):
    """The call's Ring, after checking on every rank alike that each rank holds its layout's share."""
    world_size, rank, seqlen = len(lengths), dist.get_rank(group), sum(lengths)
    segments = [_layout.shard_segments(seqlen, world_size, r, layout) for r in range(world_size)]
    for r, length in enumerate(lengths):
        expected = sum(s.length for s in segments[r])
        if length != expected:
            raise ValueError(
                f"rank {r} holds {length} rows, but the {layout} layout gives rank {r} {expected} of the "
                f"seqlen = {seqlen} rows (the sum of the ranks' seqlen_local): shard with shard_indices"
            )
    return _torch_ring.Ring(
        group=group,
        rank=rank,
        world_size=world_size,
        next_rank=_global_rank(group, (rank + 1) % world_size),
        prev_rank=_global_rank(group, (rank - 1) % world_size),
        segments=segments,
        timeout=datetime.timedelta(seconds=timeout),
    )


class RingFlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring, modifiers):
        out, lse = _torch_ring.forward(ring, q, k, v, modifiers)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.modifiers = ring, modifiers
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        return _torch_ring.backward(ctx.ring, dout, q, k, v, out, lse, ctx.modifiers) + (None, None)


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
):
    """Attention over one sequence sharded across the ranks of `group` (None = the default group), each rank
    passing its shard: q (batch, seqlen_local, heads_q, d), k (batch, seqlen_local, heads_kv, d), v (batch,
    seqlen_local, heads_kv, dv), float32, float16 or bfloat16 CPU tensors, differentiable in q, k and v.

    A collective: every rank of the group calls it (and later loss.backward()) with the same keywords.
    The global sequence length is the sum of the ranks' seqlen_local; rank r must hold
    shard_indices(seqlen, world_size, r, layout)'s rows, in that order ("zigzag" or "contiguous").
    The keywords are flashattn.torch.flash_attn_func's, applied at global positions (causal, window_size,
    alibi_slopes, dropout: the mask a single process draws with the same seed; seed None = rank 0's draw).
    Before any transfer the ranks exchange their arguments: if any rank's are invalid or the ranks
    disagree, every rank raises the same ValueError (TypeError for element types). timeout: seconds a
    transfer may take before the call raises RuntimeError (a rank left the call); the group's own timeout
    bounds its collectives. deterministic: accepted; the ring is deterministic for a given world size.

    Returns out (batch, seqlen_local, heads_q, dv) of q's dtype, or (out, softmax_lse, None) with
    return_attn_probs=True, softmax_lse float32 (batch, heads_q, seqlen_local).
    """
    del deterministic
    if not dist.is_initialized():
        raise ValueError("torch.distributed is not initialized: call torch.distributed.init_process_group")
    if dist.get_rank(group) < 0:
        raise ValueError("this process is not a member of `group`")
    requires_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in (q, k, v)
    )

    def allgather(obj):
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, obj, group=group)
        return gathered

    (modifiers, timeout), lengths, seed = _agreement.agree(
        allgather,
        lambda: _prepare(
            q,
            k,
            v,
            layout,
            requires_grad,
            timeout,
            dropout_p=dropout_p,
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=window_size,
            softcap=softcap,
            alibi_slopes=alibi_slopes,
            seed=seed,
        ),
    )
    modifiers = modifiers._replace(seed=seed)
    ring = _ring(group, layout, lengths, timeout)
    _torch_ring.check_blocks(ring, modifiers)
    out, lse = RingFlashAttnFunc.apply(q, k, v, ring, modifiers)
    return (out, lse, None) if return_attn_probs else out
