"""shard_indices and the blocks of the torch.distributed ring, checked exhaustively on small cases in one
process: the shards partition the sequence as the layouts say, and for every rank the blocks of all ring
steps, trimmed to the pairs the whole sequence's mask lets through, cover each of those pairs once."""

import numpy as np
import pytest

import flashattn.distributed as fd
from flashattn.distributed import _layout, _torch_ring

from reference import visible

LAYOUTS = ["contiguous", "zigzag"]
BANDS = [(False, (-1, -1)), (True, (-1, -1)), (False, (3, 0)), (False, (2, 5)), (True, (4, -1)), (False, (0, 0))]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shards_partition_the_sequence(layout):
    for world_size in range(1, 6):
        for seqlen in range(0, 3 * world_size + 4):
            shards = [fd.shard_indices(seqlen, world_size, r, layout) for r in range(world_size)]
            assert all(s.dtype == np.int64 for s in shards)
            assert np.array_equal(np.sort(np.concatenate(shards)), np.arange(seqlen))
            parts = world_size if layout == "contiguous" else 2 * world_size
            chunk = lambda c: list(range(c * seqlen // parts, (c + 1) * seqlen // parts))  # noqa: E731
            for r, shard in enumerate(shards):
                expected = chunk(r) if layout == "contiguous" else chunk(r) + chunk(parts - 1 - r)
                assert shard.tolist() == expected


def test_shard_indices_rejects_bad_arguments():
    with pytest.raises(ValueError, match="layout must be 'contiguous' or 'zigzag', got 'ring'"):
        fd.shard_indices(8, 2, 0, "ring")
    for args in [(-1, 2, 0), (8, 0, 0), (8, 2, 2), (8, 2, -1)]:
        with pytest.raises(ValueError, match="0 <= rank < world_size"):
            fd.shard_indices(*args, "zigzag")


def block_mask(block, seqlen, causal, window):
    """The block's pairs the library's call lets through, at global positions: the whole sequence's band at
    the block's rows and keys (its block_position)."""
    rows = block.rows.global_start + np.arange(block.rows.length)
    keys = block.keys.global_start + np.arange(block.keys.length)
    return rows, keys, visible(seqlen, seqlen, causal, window)[np.ix_(rows, keys)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal, window", BANDS)
def test_blocks_cover_the_mask_once(layout, causal, window):
    band = _layout.Band.of(causal, window)
    for world_size in (1, 2, 3, 4):
        for seqlen in (1, 5, 13, 24):
            segments = [_layout.shard_segments(seqlen, world_size, r, layout) for r in range(world_size)]
            covered = np.zeros((seqlen, seqlen), dtype=int)
            for rank in range(world_size):
                for src in range(world_size):
                    for block in _layout.blocks(segments[rank], segments[src], band):
                        rows, keys, mask = block_mask(block, seqlen, causal, window)
                        assert mask[-1].any() and mask[:, -1].any(), "trimmed: the last row and key take part"
                        covered[np.ix_(rows, keys)] += mask
            assert np.array_equal(covered, visible(seqlen, seqlen, causal, window).astype(int)), (
                world_size,
                seqlen,
            )


@pytest.mark.parametrize(
    "layout, causal, window, travels",
    [
        # Shard j is needed by ranks ≥ j only: it never travels on from rank W − 1 to rank 0.
        ("contiguous", True, (-1, -1), lambda src, to: to > src),
        # Rows see 3 keys back, shards hold 10: only the next rank needs a shard.
        ("contiguous", False, (3, 0), lambda src, to: to == src + 1),
        # Every rank needs part of every shard.
        ("zigzag", True, (-1, -1), lambda src, to: True),
    ],
)
def test_forward_ring_transfers_what_a_later_rank_needs(layout, causal, window, travels):
    segments = [_layout.shard_segments(40, 4, r, layout) for r in range(4)]
    ring = _torch_ring.Ring(None, 0, 4, 1, 3, segments, None)
    needs = _torch_ring._Needs(ring, _layout.Band.of(causal, window))
    for src in range(4):
        for to_rank in range(4):
            if to_rank != src:
                assert needs.transfer(src, to_rank) == travels(src, to_rank), (src, to_rank)
