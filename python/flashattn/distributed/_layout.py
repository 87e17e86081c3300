"""Which rows each rank holds, and which (query rows, key rows) blocks of a ring step take part.

A rank's shard is a list of segments, runs of consecutive global positions stored one after the other:
one segment in the contiguous layout, two (chunks r and 2W − 1 − r of 2W) in the zigzag layout. The same
partition as the C++ library's shard_length and shard_indices (include/flashattn/distributed.h), for the
torch.distributed path, which runs without MPI. docs/distributed.md derives the layouts and the blocks.
"""

import math
import operator
from typing import NamedTuple

import numpy as np

LAYOUTS = ("contiguous", "zigzag")


class Segment(NamedTuple):
    local_start: int  # first row of the segment in the rank's shard
    global_start: int  # its global position
    length: int


def check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'contiguous' or 'zigzag', got {layout!r}")
    return layout


def shard_segments(seqlen, world_size, rank, layout):
    """Rank's segments in storage order: contiguous rows [⌊rN/W⌋, ⌊(r+1)N/W⌋); zigzag chunks r and 2W−1−r of
    the 2W chunks [⌊cN/2W⌋, ⌊(c+1)N/2W⌋)."""
    if layout == "contiguous":
        parts, chunks = world_size, (rank,)
    else:
        parts, chunks = 2 * world_size, (rank, 2 * world_size - 1 - rank)
    segments, local_start = [], 0
    for c in chunks:
        start, stop = c * seqlen // parts, (c + 1) * seqlen // parts
        segments.append(Segment(local_start, start, stop - start))
        local_start += stop - start
    return segments


def shard_indices(seqlen, world_size, rank, layout):
    """The segments' positions one after the other, checked arguments."""
    seqlen, world_size, rank = (operator.index(x) for x in (seqlen, world_size, rank))
    if seqlen < 0 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"shard_indices needs seqlen >= 0, world_size >= 1 and 0 <= rank < world_size, got seqlen = "
            f"{seqlen}, world_size = {world_size}, rank = {rank}"
        )
    segments = shard_segments(seqlen, world_size, rank, check_layout(layout))
    return np.concatenate([np.arange(s.global_start, s.global_start + s.length, dtype=np.int64) for s in segments])


class Band(NamedTuple):
    """The keys j row i sees, at global positions: i − left ≤ j ≤ i + right (math.inf = unbounded); causal
    is right = 0. Self-attention over one sequence, so bottom-right and top-left alignment coincide."""

    left: float
    right: float

    @staticmethod
    def of(causal, window):
        left, right = window
        left = math.inf if left < 0 else left
        right = math.inf if right < 0 else right
        return Band(left, min(right, 0) if causal else right)


class Block(NamedTuple):
    """Rows [q.local_start, + q.length) of the local shard against keys [k.local_start, + k.length) of the
    visiting shard."""

    q: Segment
    k: Segment
    full: bool  # every row sees every key: no mask applies
    aligned: bool  # the rows sit where a call of their own would put them: a local mask is the global one

    @property
    def needs_positions(self):
        """Whether the local call must be told the block's global positions for the band to be right."""
        return not (self.full or self.aligned)


def block(q, k, band):
    """The block of segment q's rows against segment k's keys, or None when no row sees a key."""
    if q.length == 0 or k.length == 0:
        return None
    first_row, last_row = q.global_start, q.global_start + q.length - 1
    first_key, last_key = k.global_start, k.global_start + k.length - 1
    if first_row - band.left > last_key or last_row + band.right < first_key:
        return None
    full = last_row - band.left <= first_key and first_row + band.right >= last_key
    # A call of q.length rows over k.length keys aligns its band bottom-right: row i's diagonal is key
    # i + k.length − q.length, globally it is key i + q.global_start − k.global_start.
    aligned = k.length - q.length == q.global_start - k.global_start
    return Block(q, k, full, aligned)


def blocks(q_segments, k_segments, band):
    """The blocks of one ring step that some row sees, in a fixed order."""
    found = (block(q, k, band) for q in q_segments for k in k_segments)
    return [b for b in found if b is not None]
