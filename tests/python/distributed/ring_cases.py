"""What the NumPy and the torch ring tests share: the cases, the global problem every rank draws alike
(the generator is seeded by the test's name), its shards, and the float64 reference."""

import numpy as np

import flashattn.distributed as fd
from reference import assert_within_baseline, attention

LAYOUTS = ["zigzag", "contiguous"]
# (keywords, heads_q, heads_kv): no mask, causal, a sliding window, both; GQA and MQA.
MASKS = [
    dict(),
    dict(causal=True),
    dict(window_size=(7, 2)),
    dict(causal=True, window_size=(5, -1), softcap=3.0, softmax_scale=0.2),
]
HEADS = [(4, 2), (3, 1)]
# 13 and 97: no W in 2..4 divides them, nor 2W; 3: some zigzag ranks hold no row for W ≥ 2.
LENGTHS = [13, 97, 3]


# Modifiers at global positions (ALiBi per (batch, head) or per head, dropout with a fixed seed), each with
# and without the causal mask: the ring must equal one process's call with the same slopes, p and seed.
SLOPES = np.array([[0.5, 0.25, 0.125, 0.0625], [0.3, 0.2, 0.1, 0.05]], np.float32)  # (batch 2, heads_q 4)
POSITIONAL = [
    dict(keywords, causal=causal)
    for causal in (False, True)
    for keywords in (
        dict(alibi_slopes=SLOPES),
        dict(dropout_p=0.3, seed=1234),
        dict(alibi_slopes=SLOPES[0], dropout_p=0.2, seed=99, window_size=(20, 5)),
    )
]


def check_equals_single_process(got, base, rank, world_size, layout):
    """This rank's results equal one process's (same dropout mask, same ALiBi distances) within float32
    rounding: got and base hold o, lse, dq, dk, dv (base: the whole sequence's)."""
    for name in ("o", "dq", "dk", "dv"):
        mine = shard(np.asarray(base[name], np.float64), rank, world_size, layout)
        scale = max(1.0, float(np.abs(mine).max(initial=0.0)))
        np.testing.assert_allclose(np.asarray(got[name], np.float64), mine, rtol=0, atol=2e-5 * scale, err_msg=name)
    np.testing.assert_allclose(got["lse"], shard(base["lse"], rank, world_size, layout, axis=2), rtol=1e-5, atol=1e-5)


def problem(rng, seqlen, heads_q, heads_kv, head_dim=40, head_dim_v=24, batch=2):
    """Global q, k, v and an incoming gradient dout, float64 values exact in float16."""

    def draw(heads, dim):
        return rng.standard_normal((batch, seqlen, heads, dim)).astype(np.float16).astype(np.float64)

    return draw(heads_q, head_dim), draw(heads_kv, head_dim), draw(heads_kv, head_dim_v), draw(heads_q, head_dim_v)


def shard(x, rank, world_size, layout, axis=1):
    """Rank's rows of a global (batch, seqlen, ...) array (axis=2: of a (batch, heads, seqlen) LSE)."""
    indices = fd.shard_indices(x.shape[axis], world_size, rank, layout)
    return np.ascontiguousarray(np.take(x, indices, axis=axis))


def reference(q, k, v, dout, keywords):
    """The float64 reference of the whole sequence: o, lse, dq, dk, dv."""
    return attention(
        q,
        k,
        v,
        dout,
        scale=keywords.get("softmax_scale"),
        causal=keywords.get("causal", False),
        window=keywords.get("window_size", (-1, -1)),
        softcap=keywords.get("softcap", 0.0),
        alibi=keywords.get("alibi_slopes"),
    )


def check_within_baseline(got, ref, base, rank, world_size, layout, dtype):
    """Each of this rank's results within twice the single-process result's error of the reference (plus
    one rounding, reference.assert_within_baseline): got and base hold o, lse, dq, dk, dv."""
    for name in ("o", "dq", "dk", "dv"):
        mine = shard(ref[name], rank, world_size, layout)
        assert_within_baseline(name, got[name], mine, shard(base[name], rank, world_size, layout), dtype)
    lse = shard(ref["lse"], rank, world_size, layout, axis=2)
    assert got["lse"].dtype == np.float32
    np.testing.assert_allclose(got["lse"], lse, rtol=1e-5, atol=1e-5)
