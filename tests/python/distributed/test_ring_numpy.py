"""flashattn.distributed's ring on NumPy shards over mpi4py: forward and backward against the single-process
flash_attn_func / flash_attn_backward and the float64 reference, for both layouts, the masks, GQA and
MQA, float32 and float16, lengths that the world size does not divide and ranks that hold no row; ALiBi and
dropout at global positions against one process with the same seed; the same bits on every run; and bad
input, which every rank reports alike before any transfer."""

import numpy as np
import pytest

import flashattn
import flashattn.distributed as fd
from ring_cases import HEADS, LAYOUTS, LENGTHS, MASKS, check_within_baseline, problem, reference, shard
from ring_cases import POSITIONAL, check_equals_single_process


def ring(comm, rank_arrays, layout, keywords):
    """This rank's forward and backward results: o, lse, dq, dk, dv."""
    q, k, v, dout = rank_arrays
    out, lse, none = fd.ring_flash_attn_func(q, k, v, comm=comm, layout=layout, return_attn_probs=True, **keywords)
    assert none is None
    dq, dk, dv = fd.ring_flash_attn_backward(dout, q, k, v, out, lse, comm=comm, layout=layout, **keywords)
    return dict(o=out, lse=lse, dq=dq, dk=dk, dv=dv)


def single(arrays, keywords):
    q, k, v, dout = arrays
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **keywords)
    dq, dk, dv = flashattn.flash_attn_backward(dout, q, k, v, out, lse, **keywords)
    return dict(o=out, lse=lse, dq=dq, dk=dk, dv=dv)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads_q, heads_kv", HEADS)
@pytest.mark.parametrize("keywords", MASKS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ring_matches_single_process(comm, rng, layout, keywords, heads_q, heads_kv, dtype):
    for seqlen in LENGTHS:
        q, k, v, dout = problem(rng, seqlen, heads_q, heads_kv)
        arrays = [x.astype(dtype) for x in (q, k, v, dout)]
        got = ring(comm, [shard(x, comm.rank, comm.size, layout) for x in arrays], layout, keywords)
        for name in ("o", "dq", "dk", "dv"):
            assert got[name].dtype == dtype
        check_within_baseline(
            got, reference(q, k, v, dout, keywords), single(arrays, keywords), comm.rank, comm.size, layout, dtype
        )


def test_ring_is_bitwise_reproducible(comm, rng):
    q, k, v, dout = (x.astype(np.float16) for x in problem(rng, 97, 4, 2))
    mine = [shard(x, comm.rank, comm.size, "zigzag") for x in (q, k, v, dout)]
    first, second = (ring(comm, mine, "zigzag", dict(causal=True)) for _ in range(2))
    for name in first:
        assert first[name].tobytes() == second[name].tobytes(), name


def test_inputs_are_not_modified(comm, rng):
    mine = [shard(x.astype(np.float32), comm.rank, comm.size, "zigzag") for x in problem(rng, 13, 2, 2)]
    copies = [x.copy() for x in mine]
    ring(comm, mine, "zigzag", dict(causal=True))
    for x, y in zip(mine, copies):
        assert np.array_equal(x, y)


def local(rng, comm, seqlen=13, layout="zigzag", dtype=np.float32):
    q, k, v, _ = problem(rng, seqlen, 2, 1)
    return [shard(x.astype(dtype), comm.rank, comm.size, layout) for x in (q, k, v)]


def test_ranks_that_disagree_all_raise(comm, rng):
    if comm.size == 1:
        pytest.skip("one rank cannot disagree with itself")
    q, k, v = local(rng, comm)
    with pytest.raises(ValueError, match=r"the ranks must agree on causal, but rank 0 has True, rank 1 has False"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, causal=comm.rank == 0)
    with pytest.raises(ValueError, match=r"the ranks must agree on layout"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, layout="zigzag" if comm.rank else "contiguous")


def test_one_rank_with_bad_input_makes_every_rank_raise(comm, rng):
    q, k, v = local(rng, comm)
    last = comm.size - 1
    bad = q.astype(np.float64) if comm.rank == last else q
    with pytest.raises(TypeError, match=rf"rank {last}: q must have dtype float32 or float16, got float64"):
        fd.ring_flash_attn_func(bad, k, v, comm=comm)
    bad = k[:, :, :, :-1] if comm.rank == last else k
    with pytest.raises(ValueError, match=rf"rank {last}: k .* must match q's batch, seqlen_local and head_dim"):
        fd.ring_flash_attn_func(q, bad, v, comm=comm)
    with pytest.raises(ValueError, match=r"the ranks must agree on window_size, but rank 0 has \(-1, -1\)"):
        if comm.size > 1:
            fd.ring_flash_attn_func(q, k, v, comm=comm, window_size=(-5, 0) if comm.rank == last else (-1, -1))
        else:
            raise ValueError("the ranks must agree on window_size, but rank 0 has (-1, -1)")


def test_the_librarys_own_checks_reach_every_rank(comm, rng):
    q, k, v = local(rng, comm)
    with pytest.raises(ValueError, match=r"window"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, window_size=(-5, 0))
    with pytest.raises(ValueError, match=r"softcap"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, softcap=-1.0)


def test_a_rank_holding_the_wrong_rows_makes_every_rank_raise(comm, rng):
    if comm.size == 1:
        pytest.skip("one rank holds every row whatever their number")
    q, k, v = local(rng, comm, layout="contiguous")
    last = comm.size - 1
    q, k, v = ([np.concatenate([x, x[:, :1]], axis=1) for x in (q, k, v)] if comm.rank == last else (q, k, v))
    with pytest.raises(ValueError, match=r"rank \d holds \d+ rows, but the contiguous layout gives rank \d \d+ of the seqlen"):
        fd.ring_flash_attn_func(q, k, v, comm=comm, layout="contiguous")


def test_backward_with_dropout_needs_the_seed(comm, rng):
    q, k, v = local(rng, comm)
    with pytest.raises(ValueError, match="seed must be given when dropout_p > 0"):
        fd.ring_flash_attn_backward(q, q, k, v, q, np.zeros((2, 2, q.shape[1]), np.float32), comm=comm, dropout_p=0.1)


def test_comm_must_be_a_communicator(rng):
    q = np.zeros((1, 4, 1, 8), np.float32)
    with pytest.raises(TypeError, match="comm must be an mpi4py.MPI.Intracomm, got int"):
        fd.ring_flash_attn_func(q, q, q, comm=0)


@pytest.mark.parametrize("keywords", POSITIONAL)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_alibi_and_dropout_at_global_positions_equal_one_process(comm, rng, layout, keywords):
    """The kernels take each block's global position, so ALiBi's distances and dropout's mask are the whole
    sequence's: the same as flash_attn_func / flash_attn_backward with the same seed."""
    arrays = [x.astype(np.float32) for x in problem(rng, 97, 4, 2)]
    got = ring(comm, [shard(x, comm.rank, comm.size, layout) for x in arrays], layout, keywords)
    check_equals_single_process(got, single(arrays, keywords), comm.rank, comm.size, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_drawn_dropout_seed_is_rank_0s_draw_from_numpys_generator(comm, rng, layout):
    """seed=None: every rank draws one np.random.randint(0, 2**64, dtype=np.uint64) from its own NumPy global
    generator, and the collective check's all-gather gives every rank rank 0's draw. The ranks agree even
    when their generators differ (seeded per rank here): the result is one process's with rank 0's seed,
    and each rank's generator has advanced by its one draw."""
    arrays = [x.astype(np.float32) for x in problem(rng, 97, 4, 2)]
    q, k, v, dout = (shard(x, comm.rank, comm.size, layout) for x in arrays)
    np.random.seed(100)
    seed = int(np.random.randint(0, 2**64, dtype=np.uint64))  # rank 0's draw
    np.random.seed(100 + comm.rank)
    np.random.randint(0, 2**64, dtype=np.uint64)
    after = np.random.random()
    np.random.seed(100 + comm.rank)
    keywords = dict(dropout_p=0.3, causal=True)
    out, lse, _ = fd.ring_flash_attn_func(q, k, v, comm=comm, layout=layout, return_attn_probs=True, **keywords)
    assert np.random.random() == after
    dq, dk, dv = fd.ring_flash_attn_backward(dout, q, k, v, out, lse, comm=comm, layout=layout, seed=seed, **keywords)
    got = dict(o=out, lse=lse, dq=dq, dk=dk, dv=dv)
    check_equals_single_process(got, single(arrays, dict(keywords, seed=seed)), comm.rank, comm.size, layout)
