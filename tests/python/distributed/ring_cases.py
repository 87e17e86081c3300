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
