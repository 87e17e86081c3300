"""Decoding over a sharded KV cache for CPU tensors over a torch.distributed group, without MPI: flashattn::mpi's
sharded decode (docs/distributed.md, "Decoding over a sharded cache") in Python. Each rank decodes against its
part of every sequence's cache with flashattn's decode, told how many keys of the sequence follow its part (so
that masks and ALiBi see global positions) and with the rotary tables shifted to global positions; the rank
that holds a sequence's tail appends its new keys. One all_gather carries the float32 partials and every
rank merges them in rank order, where the sinks join each row once. Inference only: no autograd."""

import datetime
import operator
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

import flashattn.torch as fat
from flashattn import _arguments as _kernel_arguments
from flashattn import _core, _tensors
from flashattn._core import Error

from . import _agreement, _arguments


class Call(NamedTuple):
    """This rank's checked call: `arrays` are the NumPy views _core.kvcache takes (q, k and v packed as one batch
    entry of total_q rows), `keywords` its other keywords (sinks left out: they join in the merge)."""

    arrays: dict
    keywords: dict
    packing: object  # _arguments.Packing
    cache_seqlens: np.ndarray  # int32 (batch,): this rank's keys of each sequence
    rows: np.ndarray  # query rows per sequence
    new_rows: np.ndarray  # keys each sequence appends
    first_rows: np.ndarray  # (batch + 1,): sequence b's first row among all the query rows
    head_dim_v: int
    sinks: object  # float32 (heads_q,) NumPy or None
    q_dtype: torch.dtype
    seconds: float


def _arrays(packing, tensors, tables):
    """The NumPy views of the tensors (q, k, v with a batch axis of one when packed) and of the tables (rotary
    float32, block_table int32)."""
    arrays = {name: _tensors.array(t, name) for name, t in tensors.items()}
    for name, table in tables.items():
        table = _tensors.side_array(table, name)
        if table is None:
            arrays[name] = None
        elif name == "block_table":
            arrays[name] = _kernel_arguments.int32(table, name, 2)
        else:
            arrays[name] = _kernel_arguments.float32(table, name)
    if packing.packed:
        for name in ("q", "k", "v"):
            if arrays[name] is not None:
                arrays[name] = arrays[name][np.newaxis]
    return arrays


def _cache_seqlens(cache_seqlens, batch):
    if isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = cache_seqlens.detach().cpu().numpy()
    if np.ndim(cache_seqlens) == 0:
        cache_seqlens = np.full(batch, cache_seqlens)
    return _kernel_arguments.int32(cache_seqlens, "cache_seqlens", 1)


def prepare(tensors, tables, cache_seqlens, packing_keywords, modifiers, options, timeout):
    """This rank's checks (the library's own, on the call it makes when it appends nothing) → Prepared, whose
    length is this rank's cache_seqlens. tensors: q, k_cache, v_cache, k, v, k_scale, v_scale; tables:
    rotary_cos, rotary_sin, block_table; packing_keywords: cu_seqlens_q, max_seqlen_q; modifiers: the score
    modifiers' keywords; options: keyword_options()."""
    q = tensors["q"]
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
    packing = _arguments.packing(q, **packing_keywords)
    arrays = _arrays(packing, tensors, tables)
    counts = _cache_seqlens(cache_seqlens, packing.batch)
    m = _arguments.modifiers(packing.batch, packing.heads_q, dropout_p=0.0, seed=None, **modifiers)
    arrays["alibi_slopes"] = m.alibi_slopes
    left, right = m.window
    keywords = dict(
        options,
        softmax_scale=m.softmax_scale,
        causal=m.causal,
        window_left=left,
        window_right=right,
        softcap=m.softcap,
        bf16=q.dtype == torch.bfloat16,
        cu_seqlens_q=packing.cu_seqlens_q,
        max_seqlen_q=packing.max_seqlen_q,
    )
    reading = dict(arrays, k=None, v=None)
    _core.kvcache(**reading, cache_seqlens=counts, **keywords, return_lse=True, check_only=True)
    batch = packing.batch
    if packing.packed:
        first_rows = packing.cu_seqlens_q.astype(np.int64)
    else:
        first_rows = np.arange(batch + 1, dtype=np.int64) * q.shape[1]
    rows = np.diff(first_rows)
    appended = 0 if arrays["k"] is None else arrays["k"].shape[1]
    new_rows = (rows if appended else np.zeros(batch, np.int64)) if packing.packed else np.full(batch, appended)
    values = arrays["k_cache"] if arrays["v_cache"] is None else arrays["v_cache"]
    head_dim_v = options["head_dim_v"] or values.shape[3]
    call = Call(arrays, keywords, packing, counts, rows, new_rows, first_rows, head_dim_v, m.sinks, q.dtype,
                _arguments.check_timeout(timeout))
    return _agreement.Prepared(_describe(call, m, options), call=call, length=counts.tolist())


def _describe(call, m, options):
    """What the ranks must agree on (num_splits is per rank)."""
    arrays = call.arrays
    return dict(
        dtype=str(call.q_dtype),
        q=_arguments.digest(arrays["q"]),
        **call.packing.describe(),
        new_rows=call.new_rows.tolist(),
        shapes=[None if arrays[n] is None else tuple(arrays[n].shape[2:]) for n in ("k_cache", "v_cache")],
        paged=arrays["block_table"] is not None,
        rotary=None if arrays["rotary_cos"] is None else arrays["rotary_cos"].shape,
        modifiers=(m.causal, m.window, m.softcap, m.softmax_scale),
        alibi_slopes=None if m.alibi_slopes is None else _arguments.digest(m.alibi_slopes),
        sinks=None if m.sinks is None else _arguments.digest(m.sinks),
        options={name: value for name, value in options.items() if name != "num_splits"},
    )


class Plan(NamedTuple):
    """The calls of this rank: consecutive sequences [first, end) that share whether they append and the rotary
    shift, with each sequence's keys on this rank and the keys of the whole sequence after them."""

    groups: list  # (first, end, appends, rotary_shift)
    keys_after: np.ndarray


def plan(call, counts, rank):
    """This rank's Plan from every rank's cache_seqlens, counts (world, batch)."""
    counts = np.asarray(counts, dtype=np.int64)
    before, total, mine = counts[:rank].sum(0), counts.sum(0), counts[rank]
    holders = counts > 0
    tail = np.where(holders.any(0), counts.shape[0] - 1 - np.argmax(holders[::-1], axis=0), 0)
    length = total + call.new_rows
    if length.size and length.max() > np.iinfo(np.int32).max:
        raise Error(f"a sequence has {length.max()} keys over all ranks, more than int32 positions")
    appends = (tail == rank) & (call.new_rows > 0)
    keys = mine + np.where(appends, call.new_rows, 0)
    shift = total - mine if call.arrays["rotary_cos"] is not None else np.zeros_like(total)
    active = (call.rows > 0) & (keys > 0)
    groups, first = [], 0
    key = list(zip(active, appends, shift))
    for b in range(1, len(key) + 1):
        if b == len(key) or key[b] != key[first]:
            if active[first]:
                groups.append((first, b, bool(appends[first]), int(shift[first])))
            first = b
    return Plan(groups, (length - before - keys).astype(np.int32))


def _group_arrays(call, first, end, appends, shift):
    """The arrays of the call over sequences [first, end)."""
    a, r0, r1 = call.arrays, int(call.first_rows[first]), int(call.first_rows[end])
    rows = (lambda x: x[:, r0:r1]) if call.packing.packed else (lambda x: x[first:end])
    paged = a["block_table"] is not None
    group = dict(a, q=rows(a["q"]), k=rows(a["k"]) if appends else None, v=None)
    if appends and a["v"] is not None:
        group["v"] = rows(a["v"])
    if paged:
        group["block_table"] = a["block_table"][first:end]
    else:
        for name in ("k_cache", "v_cache"):
            group[name] = None if a[name] is None else a[name][first:end]
        for name in ("k_scale", "v_scale"):  # per-token scales follow the cache's sequences
            if a[name] is not None and a[name].ndim >= 3:
                group[name] = a[name][first:end]
    if a["alibi_slopes"] is not None and a["alibi_slopes"].ndim == 2:
        group["alibi_slopes"] = a["alibi_slopes"][first:end]
    for name in ("rotary_cos", "rotary_sin"):
        if a[name] is not None:
            group[name] = a[name][shift:]
    return group


def _group_keywords(call, plan_, first, end):
    keywords = dict(call.keywords, cache_seqlens=call.cache_seqlens[first:end], keys_after=plan_.keys_after[first:end])
    if call.packing.packed:
        cu = call.packing.cu_seqlens_q[first : end + 1]
        keywords["cu_seqlens_q"] = cu - cu[0]
    return keywords


def check(call, plan_):
    """The library's checks of every call of the plan, appends included; nothing written."""
    for first, end, appends, shift in plan_.groups:
        group = _group_arrays(call, first, end, appends, shift)
        _core.kvcache(**group, **_group_keywords(call, plan_, first, end), return_lse=True, check_only=True)


def partial(call, plan_):
    """This rank's float32 partial: o (rows, heads_q, dv) over all the query rows, then lse in the layout of
    the result ((batch, heads_q, seqlen_q), or (heads_q, total_q) when packed), flattened into one tensor."""
    total_rows, heads_q, dv = int(call.first_rows[-1]), call.packing.heads_q, call.head_dim_v
    o = torch.zeros(total_rows, heads_q, dv)
    if call.packing.packed:
        lse = torch.full((heads_q, total_rows), -float("inf"))
    else:  # q (batch, seqlen_q, heads_q, head_dim)
        lse = torch.full((call.packing.batch, heads_q, call.arrays["q"].shape[1]), -float("inf"))
    for first, end, appends, shift in plan_.groups:
        group = _group_arrays(call, first, end, appends, shift)
        out, group_lse = _core.kvcache(**group, **_group_keywords(call, plan_, first, end), return_lse=True)
        out = _tensors.tensor(out, call.keywords["bf16"]).float()
        r0, r1 = int(call.first_rows[first]), int(call.first_rows[end])
        o[r0:r1] = out.reshape(r1 - r0, heads_q, dv)
        if call.packing.packed:
            lse[:, r0:r1] = torch.from_numpy(group_lse)
        else:
            lse[first:end] = torch.from_numpy(group_lse)
    return torch.cat([o.reshape(-1), lse.reshape(-1)]), o.shape, lse.shape


def merge(call, gathered, o_shape, lse_shape):
    """The ranks' partials merged in rank order, the sinks joined once: (out of q's dtype, lse float32)."""
    o_size = o_shape.numel()
    total_rows, heads_q, dv = o_shape
    packed = call.packing.packed
    batch, seqlen = (1, total_rows) if packed else (call.packing.batch, lse_shape[2])
    outs = [g[:o_size].view(batch, seqlen, heads_q, dv) for g in gathered]
    lses = [g[o_size:].view(batch, heads_q, seqlen) for g in gathered]
    if call.sinks is not None:  # one more partial: LSE = s_h, O = 0
        outs.append(torch.zeros_like(outs[0]))
        lses.append(torch.from_numpy(call.sinks)[None, :, None].expand(batch, heads_q, seqlen).contiguous())
    out, lse = fat.merge_attention_states(outs, lses)
    return out.to(call.q_dtype).view(o_shape if packed else (batch, seqlen, heads_q, dv)), lse.view(lse_shape)


def sharded_decode(group, prepare_call):
    """The collective: checks, plan, this rank's partial, one all_gather, the merge."""
    if not dist.is_initialized():
        raise Error("torch.distributed is not initialized: call torch.distributed.init_process_group")
    if dist.get_rank(group) < 0:
        raise Error("this process is not a member of `group`")
    world, rank = dist.get_world_size(group), dist.get_rank(group)

    def allgather(obj):
        gathered = [None] * world
        dist.all_gather_object(gathered, obj, group=group)
        return gathered

    call, counts, _ = _agreement.agree(allgather, prepare_call)
    plan_ = _agreement.agree(allgather, lambda: _agreement.Prepared({}, call=_checked_plan(call, counts, rank)))[0]
    mine, o_shape, lse_shape = partial(call, plan_)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    work = dist.all_gather(gathered, mine, group=group, async_op=True)
    try:
        work.wait(datetime.timedelta(seconds=call.seconds))
    except RuntimeError as error:
        raise RuntimeError(
            f"rank {rank}: the all_gather of the partial results did not complete within {call.seconds:g} s; a "
            f"rank probably left the call: {error}"
        ) from error
    return merge(call, gathered, o_shape, lse_shape)


def _checked_plan(call, counts, rank):
    plan_ = plan(call, counts, rank)
    check(call, plan_)
    return plan_


def keyword_options(num_splits, head_dim_v, cache_dtype, quantize_query_int8, quantize_probs_u8, rotary_interleaved):
    """The plain keywords of _core.kvcache, converted."""
    return dict(
        num_splits=operator.index(num_splits),
        head_dim_v=None if head_dim_v is None else operator.index(head_dim_v),
        cache_dtype=None if cache_dtype is None else str(cache_dtype),
        quantize_query_int8=bool(quantize_query_int8),
        quantize_probs_u8=bool(quantize_probs_u8),
        rotary_interleaved=bool(rotary_interleaved),
    )
