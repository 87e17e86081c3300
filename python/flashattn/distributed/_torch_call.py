"""What flashattn.distributed.torch.ring_flash_attn_func does around the ring: this rank's checks, the
collective check over the group, the call's Ring, and the autograd Function whose forward and backward are
_torch_ring's loops."""

import datetime

import torch
import torch.distributed as dist

import flashattn.torch as fat

from .. import _tensors
from .._core import Error
from . import _agreement, _arguments, _layout, _torch_ring

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_tensor(x, name):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise Error(f"{name} must be on the CPU, got device {x.device}")
    if x.dtype not in _DTYPES:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() != 4:
        raise Error(f"{name} must have 4 dimensions (batch, seqlen_local, heads, dim), got {x.dim()}")


def _prepare(q, k, v, layout, requires_grad, timeout, keywords):
    """Checks this rank's arguments (the kernel's own checks through a one-row call) → Prepared, whose call
    is (Modifiers, timeout in seconds)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(x, name)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {x.dtype} but q has dtype {q.dtype}; they must agree")
    _arguments.check_shards(q, k, v)
    batch, length, heads_q, head_dim = q.shape
    m = _arguments.modifiers(batch, heads_q, **keywords)
    fat.flash_attn_func(
        torch.zeros(batch, 1, heads_q, head_dim),
        torch.zeros(batch, 1, k.shape[2], head_dim),
        torch.zeros(batch, 1, k.shape[2], v.shape[3]),
        seed=0,
        **m.keywords(),
    )
    params = _arguments.describe(q, k, v, layout, m, requires_grad=requires_grad)
    return _agreement.Prepared(params, call=(m, _arguments.check_timeout(timeout)), length=length)


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def _ring(group, layout, lengths, timeout):
    """The call's Ring, after checking on every rank alike that each rank holds its layout's share."""
    _layout.check_lengths(lengths, layout)
    world_size, rank, seqlen = len(lengths), dist.get_rank(group), sum(lengths)
    segments = [_layout.shard_segments(seqlen, world_size, r, layout) for r in range(world_size)]
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
    """sinks: the tensor whose float32 copy modifiers.sinks holds (differentiable), or None. Its gradient is
    this rank's share (the sum over the ranks is the whole gradient, as for any replicated parameter)."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, ring, modifiers):
        out, lse = _torch_ring.forward(ring, q, k, v, modifiers)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.modifiers = ring, modifiers
        ctx.sinks_dtype = sinks.dtype if isinstance(sinks, torch.Tensor) else None
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv, dsinks = _torch_ring.backward(ctx.ring, dout, q, k, v, out, lse, ctx.modifiers)
        dsinks = dsinks.to(ctx.sinks_dtype) if ctx.sinks_dtype is not None else None
        return dq, dk, dv, dsinks, None, None


def ring_attention(q, k, v, group, layout, timeout, keywords):
    """(out, lse) of the ring over `group`, recorded by autograd when q, k or v requires a gradient."""
    if not dist.is_initialized():
        raise Error("torch.distributed is not initialized: call torch.distributed.init_process_group")
    if dist.get_rank(group) < 0:
        raise Error("this process is not a member of `group`")
    sinks = keywords["sinks"]
    requires_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in (q, k, v, sinks)
    )

    def allgather(obj):
        gathered = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, obj, group=group)
        return gathered

    (modifiers, seconds), lengths, seed = _agreement.agree(
        allgather,
        lambda: _prepare(q, k, v, layout, requires_grad, timeout, keywords),
        draw_seed=_tensors.torch_seed,
    )
    modifiers = modifiers._replace(seed=seed)
    ring = _ring(group, layout, lengths, seconds)
    return RingFlashAttnFunc.apply(q, k, v, sinks, ring, modifiers)
