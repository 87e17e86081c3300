"""flashattn.distributed.torch over a torch.distributed gloo group: out and the gradients of q, k, v through
loss.backward() against the single-process flashattn.torch.flash_attn_func and the float64 reference, for
float32, float16 and bfloat16, both layouts, the masks, GQA and MQA, lengths that the world size does not
divide and ranks that hold no row; ALiBi and dropout at global positions against one process with the same
seed; the same bits on every run; a subgroup; and bad input, which every rank reports alike before any
transfer."""

import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

import flashattn.torch as fat
from flashattn.distributed import _torch_ring
from flashattn.distributed import torch as fdt
from ring_cases import HEADS, LAYOUTS, LENGTHS, MASKS, check_within_baseline, problem, reference, shard
from ring_cases import POSITIONAL, check_equals_single_process

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def tensors(arrays, dtype):
    return [torch.from_numpy(x).to(dtype) for x in arrays]


def run(function, q, k, v, dout, keywords):
    """out, lse and the gradients of q, k, v by loss.backward(), as float64 NumPy arrays (lse float32)."""
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out, lse, _ = function(*leaves, return_attn_probs=True, **keywords)
    (out.float() * dout.float()).sum().backward()
    results = dict(o=out.detach(), lse=lse, dq=leaves[0].grad, dk=leaves[1].grad, dv=leaves[2].grad)
    for name in ("o", "dq", "dk", "dv"):
        assert results[name].dtype == q.dtype, name
    return {name: x.double().numpy() if name != "lse" else x.numpy() for name, x in results.items()}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads_q, heads_kv", HEADS)
@pytest.mark.parametrize("keywords", MASKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ring_matches_single_process(group, rng, layout, keywords, heads_q, heads_kv, dtype):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for seqlen in LENGTHS:
        arrays = problem(rng, seqlen, heads_q, heads_kv)
        if dtype == "bfloat16":  # values exact in bfloat16, so that the reference sees the same inputs
            arrays = [torch.from_numpy(x).bfloat16().double().numpy() for x in arrays]
        mine = tensors([shard(x, rank, world_size, layout) for x in arrays], DTYPES[dtype])
        got = run(lambda *a, **kw: fdt.ring_flash_attn_func(*a, layout=layout, **kw), *mine, keywords)
        base = run(fat.flash_attn_func, *tensors(arrays, DTYPES[dtype]), keywords)
        np_dtype = "bfloat16" if dtype == "bfloat16" else np.dtype(dtype)
        check_within_baseline(got, reference(*arrays, keywords), base, rank, world_size, layout, np_dtype)


def test_ring_is_bitwise_reproducible(group, rng):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mine = tensors([shard(x, rank, world_size, "zigzag") for x in problem(rng, 97, 4, 2)], torch.bfloat16)
    first, second = (run(fdt.ring_flash_attn_func, *mine, dict(causal=True)) for _ in range(2))
    for name in first:
        assert first[name].tobytes() == second[name].tobytes(), name


def test_a_subgroup_runs_its_own_ring(group, rng):
    """The ranks but rank 0 (all of them in a world of one): the group's ranks are not the global ones."""
    world_size = dist.get_world_size()
    members = list(range(1, world_size)) or [0]
    subgroup = dist.new_group(members)
    if dist.get_rank() not in members:
        return
    size, rank = len(members), members.index(dist.get_rank())
    arrays = problem(rng, 29, 2, 2)
    mine = tensors([shard(x, rank, size, "contiguous") for x in arrays], torch.float32)
    got = run(lambda *a, **kw: fdt.ring_flash_attn_func(*a, group=subgroup, layout="contiguous", **kw), *mine, {})
    base = run(fat.flash_attn_func, *tensors(arrays, torch.float32), {})
    check_within_baseline(got, reference(*arrays, {}), base, rank, size, "contiguous", np.float32)


def local(rng, seqlen=13, layout="zigzag", dtype=torch.float32):
    q, k, v, _ = problem(rng, seqlen, 2, 1)
    return tensors([shard(x, dist.get_rank(), dist.get_world_size(), layout) for x in (q, k, v)], dtype)


def test_ranks_that_disagree_all_raise(group, rng):
    if dist.get_world_size() == 1:
        pytest.skip("one rank cannot disagree with itself")
    q, k, v = local(rng)
    first = dist.get_rank() == 0
    with pytest.raises(ValueError, match=r"the ranks must agree on causal, but rank 0 has True, rank 1 has False"):
        fdt.ring_flash_attn_func(q, k, v, causal=first)
    with pytest.raises(ValueError, match=r"the ranks must agree on requires_grad, but rank 0 has True"):
        fdt.ring_flash_attn_func(q.clone().requires_grad_(first), k, v)


def test_one_rank_with_bad_input_makes_every_rank_raise(group, rng):
    q, k, v = local(rng)
    last = dist.get_world_size() - 1
    mine = dist.get_rank() == last
    with pytest.raises(TypeError, match=rf"rank {last}: q must have dtype float32, float16 or bfloat16, got torch.float64"):
        fdt.ring_flash_attn_func(q.double() if mine else q, k, v)
    with pytest.raises(TypeError, match=rf"rank {last}: v has dtype torch.float16 but q has dtype torch.float32"):
        fdt.ring_flash_attn_func(q, k, v.half() if mine else v)
    with pytest.raises(ValueError, match=rf"rank {last}: heads_kv = 2 must divide heads_q = 3"):
        fdt.ring_flash_attn_func(q[:, :, [0, 1, 1]] if mine else q[:, :, [0, 1]], torch.cat([k, k], 2), torch.cat([v, v], 2))
    with pytest.raises(ValueError, match=rf"rank {last}: .*softcap"):
        fdt.ring_flash_attn_func(q, k, v, softcap=-1.0 if mine else 0.0)


def test_a_rank_holding_the_wrong_rows_makes_every_rank_raise(group, rng):
    if dist.get_world_size() == 1:
        pytest.skip("one rank holds every row whatever their number")
    q, k, v = local(rng, layout="contiguous")
    if dist.get_rank() == dist.get_world_size() - 1:
        q, k, v = (torch.cat([x, x[:, :1]], 1) for x in (q, k, v))
    with pytest.raises(ValueError, match=r"rank \d holds \d+ rows, but the contiguous layout gives rank \d \d+ of the seqlen"):
        fdt.ring_flash_attn_func(q, k, v, layout="contiguous")


@pytest.mark.parametrize("keywords", POSITIONAL)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_alibi_and_dropout_at_global_positions_equal_one_process(group, rng, layout, keywords):
    """ALiBi's distances and dropout's mask are the whole sequence's: out and the gradients of loss.backward()
    equal flashattn.torch.flash_attn_func's with the same slopes and seed."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    arrays = problem(rng, 97, 4, 2)
    if "alibi_slopes" in keywords:
        keywords = dict(keywords, alibi_slopes=torch.from_numpy(keywords["alibi_slopes"]))
    mine = tensors([shard(x, rank, world_size, layout) for x in arrays], torch.float32)
    got = run(lambda *a, **kw: fdt.ring_flash_attn_func(*a, layout=layout, **kw), *mine, keywords)
    base = run(fat.flash_attn_func, *tensors(arrays, torch.float32), keywords)
    check_equals_single_process(got, base, rank, world_size, layout)


def test_a_rank_that_leaves_the_ring_makes_the_others_time_out(group, rng, monkeypatch):
    """Rank 0 passes the collective check, then skips the ring (as if it had crashed): the others raise
    within the timeout instead of waiting for its transfers. On a group of its own, which is unusable
    afterwards."""
    if dist.get_world_size() == 1:
        pytest.skip("a single rank has nobody to wait for")
    doomed = dist.new_group(list(range(dist.get_world_size())))
    q, k, v = local(rng)
    if dist.get_rank() == 0:
        monkeypatch.setattr(_torch_ring, "forward", lambda ring, q, k, v, m: (q.clone(), q.new_zeros(())))
        fdt.ring_flash_attn_func(q, k, v, group=doomed, timeout=1.0)
        return
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank \d: a ring transfer \(tag \d+\) did not complete within 1 s"):
        fdt.ring_flash_attn_func(q, k, v, group=doomed, timeout=1.0)
    assert time.monotonic() - started < 30


def torch_draw(state_seed):
    """The seed a call with seed=None draws right after torch.manual_seed(state_seed), and torch.rand(4)
    after that draw."""
    torch.manual_seed(state_seed)
    seed = int(torch.empty((), dtype=torch.int64).random_(-(2**63), None)) % 2**64
    return seed, torch.rand(4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_drawn_dropout_seed_is_rank_0s_draw_from_torchs_generator(group, rng, layout):
    """seed=None: every rank draws one seed from its own torch default generator, as flashattn.torch does, and
    the collective check's all-gather gives every rank rank 0's draw. The ranks agree even when their
    generators differ (seeded per rank here): out and the gradients of loss.backward() are one process's
    with rank 0's seed, and each rank's generator has advanced by its one draw."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    arrays = problem(rng, 97, 4, 2)
    mine = tensors([shard(x, rank, world_size, layout) for x in arrays], torch.float32)
    seed = torch_draw(100)[0]  # rank 0's draw
    _, after = torch_draw(100 + rank)
    torch.manual_seed(100 + rank)
    keywords = dict(dropout_p=0.3, causal=True)
    got = run(lambda *a, **kw: fdt.ring_flash_attn_func(*a, layout=layout, **kw), *mine, keywords)
    assert torch.equal(torch.rand(4), after)
    base = run(fat.flash_attn_func, *tensors(arrays, torch.float32), dict(keywords, seed=seed))
    check_equals_single_process(got, base, rank, world_size, layout)
