"""Ring attention over torch.distributed: the forward and backward loops, the per-block kernel calls and the
point-to-point transfers (isend/irecv: batch_isend_irecv hangs on gloo in PyTorch 1.13).

Step s of W: rank r holds the K/V shard of rank src = (r − s) mod W. It starts the transfer that gives it
the next step's shard (send to r + 1, receive from r − 1), computes its rows against the blocks of the
visiting shard that they see (each block a kernel call placed at its global positions, so that the band,
ALiBi and dropout are the whole sequence's), merges each block's (O, LSE) into a float32 running state by
log-sum-exp, and waits for the transfer. Blocks are computed in float32 (float16/bfloat16 widened exactly) and O is
rounded to the element type once. Attention sinks join each row once, after the last merge. The backward pass
walks the same ring with the final O and LSE; the float32 dK/dV accumulators of a shard travel with it and
arrive home after W steps, summed in ring order (deterministic). With sinks, each rank's dsinks is its own
rows' share of the gradient (the ranks' shares sum to the whole). docs/distributed.md derives both.
"""

import datetime
import math
from typing import NamedTuple

import torch
import torch.distributed as dist

import flashattn.torch as fat
from flashattn import _core

from . import _layout


class Ring(NamedTuple):
    """One call's communicator view: the group, this rank, the global ranks of its neighbours, every rank's
    segments and how long a transfer may take."""

    group: object
    rank: int
    world_size: int
    next_rank: int  # global ranks, as isend/irecv want them
    prev_rank: int
    segments: list  # segments[r]: rank r's shard segments
    timeout: datetime.timedelta

    def source(self, step):
        return (self.rank - step) % self.world_size

    @property
    def seqlen(self):
        return sum(segment.length for segments in self.segments for segment in segments)


def _kernel_modifiers(m):
    """The kernels' Modifiers of the checked keywords and the agreed seed: the whole sequence's band, ALiBi and
    dropout, which each block's call evaluates at its own global positions (_block_keywords)."""
    kernel = _core.Modifiers()
    kernel.dropout_p, kernel.seed = m.dropout_p, m.seed
    kernel.softmax_scale, kernel.causal, kernel.softcap = m.softmax_scale, m.causal, m.softcap
    kernel.window_left, kernel.window_right = m.window
    if m.alibi_slopes is not None:
        kernel.alibi_slopes = m.alibi_slopes
    return kernel


def _block_keywords(ring, block, modifiers):
    """The keywords of a block's kernel call: the modifiers, and where the block sits in the whole sequence
    (the kernels' private block_position)."""
    position = (block.rows.global_start, block.keys.global_start, ring.seqlen, ring.seqlen)
    return dict(modifiers=modifiers, block_position=position)


def _rows(x, segment, dim=1):
    return x.narrow(dim, segment.local_start, segment.length)


def _widen(x):
    return x.detach().float().contiguous()


# Transfers ---------------------------------------------------------------------------------------------


def _pack(tensors):
    """The tensors' bytes, one after the other, in one uint8 buffer (one message per transfer)."""
    return torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def _unpack(buffer, specs):
    """Views of `buffer` as tensors of the given (shape, dtype)s."""
    tensors, offset = [], 0
    for shape, dtype in specs:
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        tensors.append(buffer[offset : offset + nbytes].view(dtype).view(shape))
        offset += nbytes
    return tensors


class _Transfer:
    """One step's non-blocking send to the next rank and receive from the previous one; either may be
    absent. wait() returns the received tensors (or None)."""

    def __init__(self, ring, tag, send=None, receive=None):
        self.ring, self.tag, self.works, self.specs, self.buffer = ring, tag, [], receive, None
        if send is not None:
            self.sent = _pack(send)  # kept alive until the send completes
            self.works.append(dist.isend(self.sent, ring.next_rank, group=ring.group, tag=tag))
        if receive is not None:
            nbytes = sum(math.prod(s) * torch.empty((), dtype=d).element_size() for s, d in receive)
            self.buffer = torch.empty(nbytes, dtype=torch.uint8)
            self.works.append(dist.irecv(self.buffer, ring.prev_rank, group=ring.group, tag=tag))

    def wait(self):
        for work in self.works:
            try:
                work.wait(self.ring.timeout)
            except RuntimeError as error:
                raise RuntimeError(
                    f"rank {self.ring.rank}: a ring transfer (tag {self.tag}) did not complete within "
                    f"{self.ring.timeout.total_seconds():g} s; a rank probably left the call: {error}"
                ) from error
        return None if self.buffer is None else _unpack(self.buffer, self.specs)


def _kv_specs(ring, src, k, v):
    length = sum(s.length for s in ring.segments[src])
    return [
        ((k.shape[0], length) + tuple(k.shape[2:]), k.dtype),
        ((v.shape[0], length) + tuple(v.shape[2:]), v.dtype),
    ]


# Forward -----------------------------------------------------------------------------------------------


class _Needs:
    """Which visiting shards a rank computes with, and which transfers the forward ring can skip: shard j
    goes from rank t − 1 to rank t only if t or a rank after it (before the ring returns to j) needs it."""

    def __init__(self, ring, band):
        self.ring, self.band, self.known = ring, band, {}

    def sees(self, rank, src):
        if (rank, src) not in self.known:
            segs = self.ring.segments
            self.known[rank, src] = bool(_layout.blocks(segs[rank], segs[src], self.band))
        return self.known[rank, src]

    def transfer(self, src, to_rank):
        """Whether shard src travels to to_rank."""
        w = self.ring.world_size
        return any(self.sees((to_rank + i) % w, src) for i in range((src - to_rank) % w))


def forward(ring, q, k, v, m):
    """This rank's (out of q's dtype, lse float32 (batch, heads_q, L))."""
    batch, length, heads_q, _ = q.shape
    out = torch.zeros(batch, length, heads_q, v.shape[-1], dtype=torch.float32)
    lse = torch.full((batch, heads_q, length), -math.inf, dtype=torch.float32)
    qf, needs, w, r = _widen(q), _Needs(ring, m.band), ring.world_size, ring.rank
    modifiers = _kernel_modifiers(m)
    held = (k, v)
    for step in range(w):
        src = ring.source(step)
        transfer = None
        if step + 1 < w:
            incoming = (src - 1) % w
            send = held if held is not None and needs.transfer(src, (r + 1) % w) else None
            receive = _kv_specs(ring, incoming, k, v) if needs.transfer(incoming, r) else None
            transfer = _Transfer(ring, 2 * step, send, receive)
        if held is not None and needs.sees(r, src):
            kf, vf = _widen(held[0]), _widen(held[1])
            for block in _layout.blocks(ring.segments[r], ring.segments[src], m.band):
                o_b, lse_b, _ = _core.forward(
                    _rows(qf, block.rows).numpy(),
                    _rows(kf, block.keys).numpy(),
                    _rows(vf, block.keys).numpy(),
                    return_lse=True,
                    return_dropout_mask=False,
                    **_block_keywords(ring, block, modifiers),
                )
                o_b, lse_b = torch.from_numpy(o_b), torch.from_numpy(lse_b)
                rows_o, rows_lse = _rows(out, block.rows), _rows(lse, block.rows, dim=2)
                merged_o, merged_lse = fat.merge_attention_states([rows_o, o_b], [rows_lse, lse_b])
                rows_o.copy_(merged_o)
                rows_lse.copy_(merged_lse)
        held = transfer.wait() if transfer is not None else None
    if m.sinks is not None:
        out, lse = _join_sinks(out, lse, m.sinks)
    return out.to(q.dtype), lse


def _join_sinks(out, lse, sinks):
    """The rows' sinks merged in as one more partial each, LSE = s_h and O = 0 (the kernels' rule: a −∞ sink
    changes nothing)."""
    sink_lse = torch.from_numpy(sinks)[None, :, None].expand(lse.shape).contiguous()
    return fat.merge_attention_states([out, torch.zeros_like(out)], [lse, sink_lse])


def _sink_gradient_share(doutf, outf, lse, sinks):
    """This rank's share of dsinks: −Σ_{b,i} e^{s_h − LSE_i}·D_i over its own rows, D_i = rowsum(dO_i ∘ O_i),
    in float64 (0 for a −∞ sink)."""
    s = torch.from_numpy(sinks).double()
    D = (doutf.double() * outf.double()).sum(-1).transpose(1, 2)  # (batch, heads_q, L), as lse
    terms = -torch.exp(s[None, :, None] - lse.double()) * D
    terms = torch.where((s == -math.inf)[None, :, None], torch.zeros_like(terms), terms)
    return terms.sum(dim=(0, 2)).float()


# Backward ----------------------------------------------------------------------------------------------


def backward(ring, dout, q, k, v, out, lse, m):
    """This rank's (dq, dk, dv) of q's dtype, from the final out and lse of forward(), and with sinks its share
    of dsinks (float32 (heads_q,)), else None."""
    qf, outf, doutf = _widen(q), _widen(out), _widen(dout)
    dq = torch.zeros(qf.shape, dtype=torch.float32)
    w, r = ring.world_size, ring.rank
    modifiers = _kernel_modifiers(m)
    held = (k, v)  # the visiting K/V shard
    gradient_transfer = None  # brings the visiting shard's dK/dV accumulators
    for step in range(w):
        src = ring.source(step)
        kv_transfer = None
        if step + 1 < w:
            kv_transfer = _Transfer(ring, 2 * step, held, _kv_specs(ring, (src - 1) % w, k, v))
        kf, vf = _widen(held[0]), _widen(held[1])
        dk, dv = torch.zeros(kf.shape, dtype=torch.float32), torch.zeros(vf.shape, dtype=torch.float32)
        for block in _layout.blocks(ring.segments[r], ring.segments[src], m.band):
            dq_b, dk_b, dv_b = _core.backward(
                _rows(doutf, block.rows).numpy(),
                _rows(qf, block.rows).numpy(),
                _rows(kf, block.keys).numpy(),
                _rows(vf, block.keys).numpy(),
                _rows(outf, block.rows).numpy(),
                _rows(lse, block.rows, dim=2).contiguous().numpy(),
                **_block_keywords(ring, block, modifiers),
            )
            _rows(dq, block.rows).add_(torch.from_numpy(dq_b))
            _rows(dk, block.keys).add_(torch.from_numpy(dk_b))
            _rows(dv, block.keys).add_(torch.from_numpy(dv_b))
        if gradient_transfer is not None:
            dk_sum, dv_sum = gradient_transfer.wait()
            dk, dv = dk_sum.add_(dk), dv_sum.add_(dv)
        # The accumulators go one rank on; at the last step that is their shard's home.
        following = (src - 1) % w if step + 1 < w else r
        gradient_transfer = (
            _Transfer(ring, 2 * step + 1, (dk, dv), _kv_specs(ring, following, dk, dv)) if w > 1 else None
        )
        held = kv_transfer.wait() if kv_transfer is not None else None
    dk, dv = gradient_transfer.wait() if gradient_transfer is not None else (dk, dv)
    dsinks = None if m.sinks is None else _sink_gradient_share(doutf, outf, lse, m.sinks)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dsinks
