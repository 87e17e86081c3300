"""Packed queries (cu_seqlens_q: 0, 1, 5 and 17 query rows mixed) in flashattn.distributed.decode_with_kvcache
and flashattn.distributed.torch.decode_with_kvcache: each rank holds a consecutive part of every sequence's
cache (contiguous or paged; parts that do not divide evenly, ranks with no key of a sequence, a sequence nobody
holds a key of); the merged (out, lse) on every rank against the single-process flash_attn_varlen_func over the
whole paged cache (seqused_k), with the new keys appended where the tail rank holds them."""

import numpy as np
import pytest

import flashattn
import flashattn.distributed as fd

ROWS = np.array([0, 1, 5, 17, 1, 5])  # query rows per sequence
LENGTHS = np.array([13, 29, 40, 37, 0, 3])  # keys cached per sequence, over all ranks
CAPACITY = 64
PAGE = 8
HEADS_Q, HEADS_KV, HEAD_DIM = 4, 2, 32
OPTIONS = [dict(), dict(causal=True), dict(window_size=(6, 1)), dict(causal=True, window_size=(9, 0), softcap=2.0)]


def cu_seqlens_q():
    return np.concatenate([[0], np.cumsum(ROWS)]).astype(np.int32)


def parts(rank, world_size):
    """Rank's keys of each sequence: [⌊len·r/W⌋, ⌊len·(r+1)/W⌋)."""
    return (LENGTHS * rank) // world_size, (LENGTHS * (rank + 1)) // world_size


def tail_rank(b, world_size):
    holders = [r for r in range(world_size) if np.diff(parts(r, world_size), axis=0)[0][b] > 0]
    return holders[-1] if holders else 0


def problem(rng):
    total_q, batch = int(ROWS.sum()), len(ROWS)

    def draw(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return dict(
        q=draw(total_q, HEADS_Q, HEAD_DIM),
        k=draw(total_q, HEADS_KV, HEAD_DIM),
        v=draw(total_q, HEADS_KV, HEAD_DIM),
        k_cache=draw(batch, CAPACITY, HEADS_KV, HEAD_DIM),
        v_cache=draw(batch, CAPACITY, HEADS_KV, HEAD_DIM),
    )


def single_process(arrays, append, options):
    """flash_attn_varlen_func over the whole cache (made paged), the new keys written after each sequence's."""
    caches = {name: arrays[name].copy() for name in ("k_cache", "v_cache")}
    used = LENGTHS.copy()
    if append:
        cu = cu_seqlens_q()
        for b in range(len(ROWS)):
            for name, new in (("k_cache", "k"), ("v_cache", "v")):
                caches[name][b, LENGTHS[b] : LENGTHS[b] + ROWS[b]] = arrays[new][cu[b] : cu[b + 1]]
        used = used + ROWS
    pages = {name: x.reshape((-1, PAGE) + x.shape[2:]) for name, x in caches.items()}
    table = np.arange(len(ROWS) * CAPACITY // PAGE, dtype=np.int32).reshape(len(ROWS), -1)
    out, lse, _ = flashattn.flash_attn_varlen_func(
        arrays["q"], pages["k_cache"], pages["v_cache"], cu_seqlens_q(), None, int(ROWS.max()), None,
        block_table=table, seqused_k=used, return_attn_probs=True, **options,
    )
    return out, lse, caches["k_cache"]


def local_problem(arrays, rank, world_size, rng, is_paged, append):
    """This rank's arguments: its part of each sequence's cache (at the start of a cache of its own, paged
    through a permuted table when is_paged), its cache_seqlens and the new keys. Returns (keywords, a function
    that gives its cache back as a contiguous (batch, capacity, ...) array)."""
    start, stop = parts(rank, world_size)
    caches = {}
    for name in ("k_cache", "v_cache"):
        mine = np.zeros_like(arrays[name])
        for b in range(len(ROWS)):
            mine[b, : stop[b] - start[b]] = arrays[name][b, start[b] : stop[b]]
        caches[name] = mine
    keywords = dict(caches, q=arrays["q"], cache_seqlens=stop - start, cu_seqlens_q=cu_seqlens_q())
    if append:
        keywords.update(k=arrays["k"], v=arrays["v"])
    if not is_paged:
        return keywords, lambda: keywords["k_cache"]
    table = rng.permutation(len(ROWS) * CAPACITY // PAGE).reshape(len(ROWS), -1)
    for name in ("k_cache", "v_cache"):
        pages = np.empty((table.size, PAGE) + caches[name].shape[2:], np.float32)
        pages[table.reshape(-1)] = caches[name].reshape((table.size, PAGE) + caches[name].shape[2:])
        keywords[name] = pages
    keywords["block_table"] = table
    return keywords, lambda: keywords["k_cache"][table].reshape((len(ROWS), CAPACITY) + caches["k_cache"].shape[2:])


def check_result(out, lse, ref_out, ref_lse):
    assert out.shape == ref_out.shape and lse.shape == ref_lse.shape
    np.testing.assert_allclose(out, ref_out, atol=1e-5 * max(1.0, np.abs(ref_out).max()), rtol=0)
    finite = np.isfinite(ref_lse)  # −inf for the query of the sequence without keys
    assert np.array_equal(lse[~finite], ref_lse[~finite])
    np.testing.assert_allclose(lse[finite], ref_lse[finite], atol=1e-5, rtol=0)


def check_appended(rank, world_size, k_cache, global_k, append):
    """The rank's part of each sequence's keys and, on its tail rank, the sequence's own new rows after them;
    nothing else written."""
    start, stop = parts(rank, world_size)
    for b in range(len(ROWS)):
        new = ROWS[b] if append and rank == tail_rank(b, world_size) else 0
        count = stop[b] - start[b] + new
        expected = np.concatenate([global_k[b, start[b] : stop[b]], global_k[b, LENGTHS[b] : LENGTHS[b] + new]])
        assert np.array_equal(k_cache[b, :count], expected), b
        assert not k_cache[b, count:].any(), f"sequence {b}: the rest of the rank's cache is untouched"


@pytest.mark.parametrize("is_paged", [False, True])
@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("options", OPTIONS)
def test_packed_numpy_matches_single_process(comm, rng, options, append, is_paged):
    arrays = problem(rng)
    ref_out, ref_lse, global_k = single_process(arrays, append, options)
    keywords, contiguous_k = local_problem(arrays, comm.rank, comm.size, rng, is_paged, append)
    out, lse = fd.decode_with_kvcache(comm=comm, **keywords, **options)
    check_result(out, lse, ref_out, ref_lse)
    check_appended(comm.rank, comm.size, contiguous_k(), global_k, append)


@pytest.mark.parametrize("is_paged", [False, True])
@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("options", OPTIONS)
def test_packed_torch_matches_single_process(group, comm, rng, options, append, is_paged):
    import torch

    import flashattn.distributed.torch as fdt

    arrays = problem(rng)
    ref_out, ref_lse, global_k = single_process(arrays, append, options)
    keywords, contiguous_k = local_problem(arrays, comm.rank, comm.size, rng, is_paged, append)
    tensors = {name: torch.from_numpy(x) if name in ("q", "k", "v", "k_cache", "v_cache") else x
               for name, x in keywords.items()}
    out, lse = fdt.decode_with_kvcache(group=group, **tensors, **options)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and lse.dtype == torch.float32
    check_result(out.numpy(), lse.numpy(), ref_out, ref_lse)
    check_appended(comm.rank, comm.size, contiguous_k(), global_k, append)  # the tensors share the arrays


def test_torch_unpacked_with_sinks_and_bfloat16_matches_numpy(group, comm, rng):
    """(batch, seqlen_q) queries, bfloat16, sinks and rotary embedding: the torch entry point's result is the
    NumPy one's (which runs flashattn::mpi), up to bfloat16's rounding of the result."""
    import torch

    import flashattn.distributed.torch as fdt

    batch, seqlen_q, new = len(LENGTHS), 3, 2
    draw = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    start, stop = parts(comm.rank, comm.size)
    caches = {}
    for name in ("k_cache", "v_cache"):
        whole, mine = draw(batch, CAPACITY, HEADS_KV, HEAD_DIM), np.zeros((batch, CAPACITY, HEADS_KV, HEAD_DIM))
        for b in range(batch):
            mine[b, : stop[b] - start[b]] = whole[b, start[b] : stop[b]]
        caches[name] = mine.astype(np.float32)
    angles = rng.uniform(0, np.pi, (CAPACITY + 8, 8))
    common = dict(cache_seqlens=stop - start, causal=True, rotary_cos=np.cos(angles).astype(np.float32),
                  rotary_sin=np.sin(angles).astype(np.float32), sinks=np.array([0.5, -1, 2, -np.inf], np.float32))
    q = draw(batch, seqlen_q, HEADS_Q, HEAD_DIM)
    k, v = draw(batch, new, HEADS_KV, HEAD_DIM), draw(batch, new, HEADS_KV, HEAD_DIM)
    numpy_caches = {name: x.copy() for name, x in caches.items()}
    ref_out, ref_lse = fd.decode_with_kvcache(q, comm=comm, k=k, v=v, **numpy_caches, **common)
    bf16 = {name: torch.from_numpy(x).bfloat16() for name, x in dict(q=q, k=k, v=v, **caches).items()}
    base = {name: x.float().numpy() for name, x in bf16.items()}
    base_out, _ = fd.decode_with_kvcache(base["q"], comm=comm, k=base["k"], v=base["v"], k_cache=base["k_cache"],
                                         v_cache=base["v_cache"], **common)
    out, lse = fdt.decode_with_kvcache(bf16["q"], group=group, k=bf16["k"], v=bf16["v"], k_cache=bf16["k_cache"],
                                       v_cache=bf16["v_cache"], **common)
    assert out.dtype == torch.bfloat16 and out.shape == (batch, seqlen_q, HEADS_Q, HEAD_DIM)
    np.testing.assert_allclose(out.float().numpy(), base_out, atol=2e-2 * max(1.0, np.abs(ref_out).max()), rtol=0)
    # The same new keys, rotated in float32 and rounded to the cache's bfloat16.
    assert torch.equal(bf16["k_cache"], torch.from_numpy(base["k_cache"]).bfloat16())


def test_ranks_must_agree_on_cu_seqlens_q(comm, group, rng):
    if comm.size == 1:
        pytest.skip("one rank cannot disagree with itself")
    import torch

    import flashattn.distributed.torch as fdt

    arrays = problem(rng)
    keywords, _ = local_problem(arrays, comm.rank, comm.size, rng, False, True)
    cu = cu_seqlens_q()
    if comm.rank == comm.size - 1:
        cu[3] += 1  # a row of sequence 3 moved to sequence 2: valid on its own
    keywords["cu_seqlens_q"] = cu
    untouched = keywords["k_cache"].copy()
    with pytest.raises(flashattn.Error, match="the ranks must agree on cu_seqlens_q"):
        fd.decode_with_kvcache(comm=comm, **keywords)
    tensors = {name: torch.from_numpy(x) if name in ("q", "k", "v", "k_cache", "v_cache") else x
               for name, x in keywords.items()}
    with pytest.raises(flashattn.Error, match="the ranks must agree on cu_seqlens_q"):
        fdt.decode_with_kvcache(group=group, **tensors)
    assert np.array_equal(keywords["k_cache"], untouched)
