"""flashattn.distributed.decode_with_kvcache: each rank holds a consecutive part of every sequence's cache
(contiguous or paged; some ranks hold none of a short sequence, nobody holds an empty one); the merged
(out, lse) on every rank against the single-process flash_attn_with_kvcache over the whole cache, with
causal masks, windows, softcap, GQA/MQA, ALiBi and rotary embedding at global positions and new tokens
appended on the rank that holds the sequence's tail (rank 0 when none holds a key of it)."""

import numpy as np
import pytest

import flashattn
import flashattn.distributed as fd
from reference import assert_within_baseline

LENGTHS = np.array([50, 7, 1, 0])  # keys cached per sequence, over all ranks
CAPACITY = 64
PAGE = 8
OPTIONS = [
    dict(causal=True),
    dict(causal=True, window_size=(20, 0), seqlen_q=3),
    dict(softcap=2.0, softmax_scale=0.3),
    dict(causal=True, new=2, rotary=True, seqlen_q=2),
    dict(new=2, rotary=True, seqlen_q=3),  # not causal: every query rotated at the sequence's cached length
    dict(new=3),
    dict(alibi=True, seqlen_q=3),
    dict(causal=True, window_size=(20, 0), alibi=True, new=2, seqlen_q=2),
]


def parts(rank, world_size):
    """Rank's keys of each sequence: [⌊len·r/W⌋, ⌊len·(r+1)/W⌋)."""
    return (LENGTHS * rank) // world_size, (LENGTHS * (rank + 1)) // world_size


def tail_rank(b, world_size):
    """The highest rank with a key of sequence b (rank 0 when no rank has one)."""
    holders = [r for r in range(world_size) if np.diff(parts(r, world_size), axis=0)[0][b] > 0]
    return holders[-1] if holders else 0


def problem(rng, options, heads_q, heads_kv, dtype, head_dim=40):
    batch, seqlen_q, new = len(LENGTHS), options.get("seqlen_q", 1), options.get("new", 0)

    def draw(*shape):
        return rng.standard_normal(shape).astype(dtype)

    arrays = dict(
        q=draw(batch, seqlen_q, heads_q, head_dim),
        k_cache=draw(batch, CAPACITY, heads_kv, head_dim),
        v_cache=draw(batch, CAPACITY, heads_kv, head_dim),
    )
    if new:
        arrays.update(k=draw(batch, new, heads_kv, head_dim), v=draw(batch, new, heads_kv, head_dim))
    if options.get("alibi"):
        arrays.update(alibi_slopes=np.linspace(0.5, 0.05, heads_q).astype(np.float32))
    if options.get("rotary"):
        angles = rng.uniform(0, np.pi, (CAPACITY, head_dim // 4))
        arrays.update(rotary_cos=np.cos(angles).astype(np.float32), rotary_sin=np.sin(angles).astype(np.float32))
    return arrays


def keywords(options):
    return {name: options[name] for name in ("causal", "window_size", "softcap", "softmax_scale") if name in options}


def local_cache(cache, rank, world_size):
    """Rank's part of a global (batch, capacity, heads, d) cache, at the start of a cache of its own."""
    start, stop = parts(rank, world_size)
    mine = np.zeros_like(cache)
    for b in range(cache.shape[0]):
        mine[b, : stop[b] - start[b]] = cache[b, start[b] : stop[b]]
    return mine


def paged(cache, block_table):
    """A contiguous cache as pages: sequence b's page i is page block_table[b, i]."""
    pages = np.empty((block_table.size, PAGE) + cache.shape[2:], cache.dtype)
    pages[block_table.reshape(-1)] = cache.reshape((block_table.size, PAGE) + cache.shape[2:])
    return pages


def run(comm, rng, arrays, options, is_paged):
    """This rank's decode_with_kvcache call; returns (out, lse, its contiguous cache after the call)."""
    k_cache, v_cache = (local_cache(arrays[name], comm.rank, comm.size) for name in ("k_cache", "v_cache"))
    names = ("k", "v", "rotary_cos", "rotary_sin", "alibi_slopes")
    extra = {name: arrays[name] for name in names if name in arrays}
    start, stop = parts(comm.rank, comm.size)
    if is_paged:
        table = rng.permutation(k_cache.shape[0] * CAPACITY // PAGE).reshape(k_cache.shape[0], -1)
        k_cache, v_cache = paged(k_cache, table), paged(v_cache, table)
        extra["block_table"] = table
    out, lse = fd.decode_with_kvcache(arrays["q"], k_cache, v_cache, stop - start, comm=comm, **extra, **keywords(options))
    if is_paged:
        k_cache = k_cache[table].reshape((table.shape[0], CAPACITY) + k_cache.shape[2:])
    return out, lse, k_cache


@pytest.mark.parametrize("is_paged", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 2), (3, 1)])
@pytest.mark.parametrize("options", OPTIONS)
def test_sharded_decode_matches_single_process(comm, rng, options, heads_q, heads_kv, dtype, is_paged):
    arrays = problem(rng, options, heads_q, heads_kv, dtype)
    out, lse, k_cache = run(comm, rng, arrays, options, is_paged)

    def single(arrays):
        caches = {name: arrays[name].copy() for name in ("k_cache", "v_cache")}
        rest = {name: x for name, x in arrays.items() if name not in caches}
        out, lse = flashattn.flash_attn_with_kvcache(
            cache_seqlens=LENGTHS, return_softmax_lse=True, **caches, **rest, **keywords(options)
        )
        return out, lse, caches["k_cache"]

    base_out, base_lse, global_k = single(arrays)
    ref_out, ref_lse, _ = single({name: x.astype(np.float32) if x.dtype == dtype else x for name, x in arrays.items()})
    assert out.dtype == dtype and lse.dtype == np.float32
    assert_within_baseline("o", out, ref_out, base_out, dtype)
    finite = np.isfinite(ref_lse)  # −inf for the queries of the sequence with no key
    assert np.array_equal(lse[~finite], ref_lse[~finite])
    lse_error, base_error = (np.abs(x[finite] - ref_lse[finite]) for x in (lse, base_lse))
    assert (lse_error <= 2 * base_error + 1e-5).all()
    check_appended(comm, k_cache, global_k, options.get("new", 0))


@pytest.mark.parametrize("is_paged", [False, True])
@pytest.mark.parametrize(
    "cache_dtype, group_size", [("int8", None), ("int8", 8), ("fp8_e4m3", None), ("fp8_e5m2", None)]
)
def test_sharded_decode_of_a_quantized_cache(comm, rng, cache_dtype, group_size, is_paged):
    """An int8 or FP8 (E4M3, E5M2) cache (quantize_kv of the global values; per-token scales sharded with their rows,
    FP8's per-head scales whole on every rank): the merged result is one process's over the whole quantized
    cache up to float32's rounding, and the new keys and their scales are quantized on the tail rank."""
    new = 2
    arrays = problem(rng, dict(new=new, seqlen_q=2), 4, 2, np.float32)
    k_values, k_scale = flashattn.quantize_kv(arrays["k_cache"], cache_dtype, group_size)
    v_values, v_scale = flashattn.quantize_kv(arrays["v_cache"], cache_dtype, group_size)
    per_token = k_scale.ndim >= 3
    fp8 = cache_dtype if cache_dtype.startswith("fp8") else None
    whole = dict(k_cache=k_values.copy(), v_cache=v_values.copy(), k_scale=k_scale.copy(), v_scale=v_scale.copy())
    base_out, base_lse = flashattn.flash_attn_with_kvcache(
        arrays["q"], k=arrays["k"], v=arrays["v"], cache_seqlens=LENGTHS, causal=True, cache_dtype=fp8,
        return_softmax_lse=True, **whole,
    )

    mine = {name: local_cache(x, comm.rank, comm.size) if name.endswith("cache") or per_token else x.copy()
            for name, x in dict(k_cache=k_values, v_cache=v_values, k_scale=k_scale, v_scale=v_scale).items()}
    start, stop = parts(comm.rank, comm.size)
    extra = {}
    if is_paged:
        table = rng.permutation(len(LENGTHS) * CAPACITY // PAGE).reshape(len(LENGTHS), -1)
        sharded = {"k_cache", "v_cache"} | ({"k_scale", "v_scale"} if per_token else set())
        mine = {name: paged(x, table) if name in sharded else x for name, x in mine.items()}
        extra["block_table"] = table
    out, lse = fd.decode_with_kvcache(arrays["q"], comm=comm, cache_seqlens=stop - start, k=arrays["k"],
                                      v=arrays["v"], causal=True, cache_dtype=fp8, **mine, **extra)
    np.testing.assert_allclose(out, base_out, atol=1e-5 * max(1.0, np.abs(base_out).max()), rtol=0)
    finite = np.isfinite(base_lse)
    assert np.array_equal(lse[~finite], base_lse[~finite])
    np.testing.assert_allclose(lse[finite], base_lse[finite], atol=1e-5, rtol=0)
    for name in ("k_cache", "k_scale") if per_token else ("k_cache",):
        local = mine[name]
        if is_paged:
            local = local[table].reshape((table.shape[0], CAPACITY) + local.shape[2:])
        check_appended(comm, local, whole[name], new)


def check_appended(comm, k_cache, global_k, new):
    """Each rank's cache holds its part of each sequence's keys and, on the sequence's tail rank, the new
    ones after them (rotated at their global positions, as the single-process call wrote them to
    global_k); nothing else of it is written. A sequence no rank has a key of gets its new keys on rank 0."""
    start, stop = parts(comm.rank, comm.size)
    for b in range(len(LENGTHS)):
        appends = new > 0 and comm.rank == tail_rank(b, comm.size)
        count = stop[b] - start[b] + (new if appends else 0)
        expected = np.concatenate([global_k[b, start[b] : stop[b]], global_k[b, LENGTHS[b] : LENGTHS[b] + new]])
        assert np.array_equal(k_cache[b, :count], expected[:count]), b
        assert not k_cache[b, count:].any(), f"sequence {b}: the rest of the rank's cache is untouched"


def test_ranks_must_agree_on_the_queries(comm, rng):
    if comm.size == 1:
        pytest.skip("one rank cannot disagree with itself")
    arrays = problem(rng, dict(), 2, 2, np.float32)
    q = arrays["q"] + comm.rank
    with pytest.raises(ValueError, match=r"the ranks must agree on q, but rank 0 has 'shape \(4, 1, 2, 40\), float32"):
        fd.decode_with_kvcache(q, arrays["k_cache"], arrays["v_cache"], 1, comm=comm)


def test_one_rank_with_bad_input_makes_every_rank_raise(comm, rng):
    arrays = problem(rng, dict(), 2, 2, np.float32)
    last = comm.size - 1
    lengths = np.full(len(LENGTHS), 1.5 if comm.rank == last else 1)
    with pytest.raises(TypeError, match=rf"rank {last}: cache_seqlens must have an integer dtype \(int32\), got float64"):
        fd.decode_with_kvcache(arrays["q"], arrays["k_cache"], arrays["v_cache"], lengths, comm=comm)
