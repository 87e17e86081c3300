"""Attention sinks and MLA shapes in flashattn.distributed: the mpi4py ring and the torch.distributed ring
with sinks (out and lse against one process's flash_attn_func; each rank's dsinks a share whose sum over the
ranks is one process's dsinks, dq, dk, dv as one process's), sinks of −inf giving the same bits as none,
decode_with_kvcache with sinks and head_dim_v (V read inside the K cache, d = 576, dv = 512), and bad sinks,
which every rank reports alike."""

import numpy as np
import pytest
import torch
import torch.distributed as dist

import flashattn
import flashattn.distributed as fd
import flashattn.torch as fat
from flashattn.distributed import torch as fdt
from ring_cases import LAYOUTS, problem, shard

# A finite sink, one of −inf (no sink), a large positive one that dominates its rows, and zero.
SINKS = np.array([1.0, -np.inf, 30.0, 0.0], np.float32)
CASES = [dict(causal=False), dict(causal=True), dict(causal=True, window_size=(9, 4))]


def check_sharded(got, base, rank, world_size, layout, names=("o", "dq", "dk", "dv")):
    """This rank's rows of got equal the whole sequence's base within float32 rounding; lse too."""
    for name in names:
        mine = shard(np.asarray(base[name], np.float64), rank, world_size, layout)
        scale = max(1.0, float(np.abs(mine).max(initial=0.0)))
        np.testing.assert_allclose(np.asarray(got[name], np.float64), mine, rtol=0, atol=2e-5 * scale, err_msg=name)
    np.testing.assert_allclose(got["lse"], shard(base["lse"], rank, world_size, layout, axis=2), rtol=1e-5, atol=1e-5)


def check_dsinks(shares, single):
    """The ranks' shares sum to one process's dsinks (relative to its size, as the other gradients)."""
    scale = max(1.0, float(np.abs(single).max()))
    np.testing.assert_allclose(np.asarray(shares, np.float64), single, rtol=0, atol=2e-5 * scale)


def numpy_ring(comm, arrays, layout, keywords):
    q, k, v, dout = (shard(x, comm.rank, comm.size, layout) for x in arrays)
    out, lse, _ = fd.ring_flash_attn_func(q, k, v, comm=comm, layout=layout, return_attn_probs=True, **keywords)
    grads = fd.ring_flash_attn_backward(dout, q, k, v, out, lse, comm=comm, layout=layout, **keywords)
    return dict(o=out, lse=lse, dq=grads[0], dk=grads[1], dv=grads[2], dsinks=grads[3] if len(grads) > 3 else None)


def numpy_single(arrays, keywords):
    q, k, v, dout = arrays
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **keywords)
    dq, dk, dv, dsinks = flashattn.flash_attn_backward(dout, q, k, v, out, lse, **keywords)
    return dict(o=out, lse=lse, dq=dq, dk=dk, dv=dv, dsinks=dsinks)


@pytest.mark.parametrize("seqlen", [97, 3])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_numpy_ring_with_sinks_matches_one_process(comm, rng, layout, case, seqlen):
    arrays = [x.astype(np.float32) for x in problem(rng, seqlen, 4, 2)]
    keywords = dict(case, sinks=SINKS)
    got, base = numpy_ring(comm, arrays, layout, keywords), numpy_single(arrays, keywords)
    check_sharded(got, base, comm.rank, comm.size, layout)
    assert got["dsinks"].dtype == np.float32 and got["dsinks"].shape == (4,)
    check_dsinks(comm.allreduce(got["dsinks"].astype(np.float64)), base["dsinks"])


def test_numpy_ring_with_minus_infinity_sinks_changes_no_bit(comm, rng):
    arrays = [x.astype(np.float16) for x in problem(rng, 97, 4, 2)]
    plain = numpy_ring(comm, arrays, "zigzag", dict(causal=True))
    sunk = numpy_ring(comm, arrays, "zigzag", dict(causal=True, sinks=np.full(4, -np.inf, np.float32)))
    for name in ("o", "lse", "dq", "dk", "dv"):
        assert plain[name].tobytes() == sunk[name].tobytes(), name
    assert np.array_equal(sunk["dsinks"], np.zeros(4, np.float32))


def torch_run(function, arrays, keywords):
    """out, lse and the gradients of q, k, v and the sinks tensor by loss.backward()."""
    q, k, v, dout = (torch.from_numpy(x).float() for x in arrays)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    sinks = torch.from_numpy(SINKS).clone().requires_grad_()
    out, lse, _ = function(*leaves, return_attn_probs=True, sinks=sinks, **keywords)
    (out * dout).sum().backward()
    grads = dict(o=out.detach(), lse=lse, dq=leaves[0].grad, dk=leaves[1].grad, dv=leaves[2].grad)
    return {name: x.numpy() for name, x in grads.items()}, sinks.grad


@pytest.mark.parametrize("case", CASES[:2])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_ring_with_sinks_matches_one_process(group, rng, layout, case):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    arrays = problem(rng, 97, 4, 2)
    mine = [shard(x, rank, world_size, layout) for x in arrays]
    got, share = torch_run(lambda *a, **kw: fdt.ring_flash_attn_func(*a, layout=layout, **kw), mine, case)
    base, whole = torch_run(fat.flash_attn_func, arrays, case)
    check_sharded(got, base, rank, world_size, layout)
    assert share.dtype == torch.float32 and share.shape == (4,)
    dist.all_reduce(share)  # the data-parallel wrapper's allreduce
    check_dsinks(share.double().numpy(), whole.double().numpy())


def decode_problem(rng, lengths, capacity, heads_q, heads_kv, head_dim):
    def draw(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return draw(len(lengths), 1, heads_q, head_dim), draw(len(lengths), capacity, heads_kv, head_dim)


def local_cache(cache, lengths, rank, world_size):
    """Rank's consecutive part [⌊len·r/W⌋, ⌊len·(r+1)/W⌋) of each sequence, at the start of its own cache."""
    start, stop = (lengths * rank) // world_size, (lengths * (rank + 1)) // world_size
    mine = np.zeros_like(cache)
    for b in range(cache.shape[0]):
        mine[b, : stop[b] - start[b]] = cache[b, start[b] : stop[b]]
    return mine, stop - start


@pytest.mark.parametrize("sinks", [None, np.array([0.5, -np.inf], np.float32), np.array([30.0, -2.0], np.float32)])
def test_sharded_decode_with_sinks_and_values_in_keys_matches_one_process(comm, rng, sinks):
    """MLA: V is the first head_dim_v = 512 of the 576 features of each K row (v_cache None). Sequence 1 is
    shorter than some ranks' shares (they hold none of it), sequence 2 has no key at all: O = 0, LSE = s_h."""
    lengths = np.array([13, 2, 0])
    q, k_cache = decode_problem(rng, lengths, 16, 2, 1, 576)
    mine, counts = local_cache(k_cache, lengths, comm.rank, comm.size)
    out, lse = fd.decode_with_kvcache(q, mine, None, counts, comm=comm, causal=True, sinks=sinks, head_dim_v=512)
    base, base_lse = flashattn.flash_attn_with_kvcache(
        q, k_cache, None, cache_seqlens=lengths, causal=True, return_softmax_lse=True, sinks=sinks, head_dim_v=512
    )
    assert out.shape == (3, 1, 2, 512)
    np.testing.assert_allclose(out, base, rtol=0, atol=1e-5 * max(1.0, float(np.abs(base).max())))
    np.testing.assert_allclose(lse, base_lse, rtol=1e-5, atol=1e-5)
    assert not out[2].any()
    expected = np.full(2, -np.inf, np.float32) if sinks is None else sinks
    assert np.array_equal(lse[2, :, 0], expected)


@pytest.mark.parametrize("causal", [False, True])
def test_sharded_decode_with_sinks_matches_one_process(comm, rng, causal):
    """GQA, lengths no W divides, a sequence some ranks hold none of, one nobody holds a key of."""
    lengths = np.array([97, 5, 0, 40])
    q, k_cache = decode_problem(rng, lengths, 100, 4, 2, 40)
    v_cache = rng.standard_normal(k_cache.shape).astype(np.float32)
    k_mine, counts = local_cache(k_cache, lengths, comm.rank, comm.size)
    v_mine, _ = local_cache(v_cache, lengths, comm.rank, comm.size)
    out, lse = fd.decode_with_kvcache(q, k_mine, v_mine, counts, comm=comm, causal=causal, sinks=SINKS)
    base, base_lse = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=lengths, causal=causal, return_softmax_lse=True, sinks=SINKS
    )
    np.testing.assert_allclose(out, base, rtol=0, atol=1e-5 * max(1.0, float(np.abs(base).max())))
    np.testing.assert_allclose(lse, base_lse, rtol=1e-5, atol=1e-5)


def test_bad_sinks_on_one_rank_make_every_rank_raise(comm, rng, group):
    last = comm.size - 1
    q, k, v, _ = (shard(x.astype(np.float32), comm.rank, comm.size, "zigzag") for x in problem(rng, 13, 2, 1))
    nan = np.array([0.5, np.nan if comm.rank == last else 1.0], np.float32)
    with pytest.raises(ValueError, match=rf"rank {last}: sinks must be finite or -inf, got nan at head 1"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, sinks=nan)
    short = np.zeros(1 if comm.rank == last else 2, np.float32)
    with pytest.raises(ValueError, match=rf"rank {last}: sinks must have shape \(heads_q,\) = \(2,\), got \(1,\)"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, sinks=short)
    with pytest.raises(ValueError, match=rf"rank {last}: .*sinks must be finite or -inf"):
        fdt.ring_flash_attn_func(*(torch.from_numpy(x) for x in (q, k, v)), sinks=torch.from_numpy(nan))
    cache = np.zeros((1, 4, 1, 16), np.float32)
    with pytest.raises(ValueError, match=rf"rank {last}: sinks must have shape \(heads_q,\) = \(2,\), got \(1,\)"):
        fd.decode_with_kvcache(np.zeros((1, 1, 2, 16), np.float32), cache, cache, 1, comm=comm, sinks=short)
    if comm.size > 1:
        other = np.array([0.5, comm.rank], np.float32)
        with pytest.raises(ValueError, match=r"the ranks must agree on sinks"):
            fd.decode_with_kvcache(np.zeros((1, 1, 2, 16), np.float32), cache, cache, 1, comm=comm, sinks=other)
