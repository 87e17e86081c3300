"""FlexAttention's BlockMask for flashattn's functions (docs/sparse_attention.md), and create_block_mask.
Imports NumPy only, never torch: torch tensors are read through numpy.asarray (CPU tensors)."""

import operator

import numpy as np

from . import _arguments, _core
from ._core import Error


def _pair(block_size):
    """block_size as (block_size_q, block_size_k): an int for both, or a pair."""
    if isinstance(block_size, (tuple, list)):
        if len(block_size) != 2:
            raise Error(f"block_size must be an int or a pair (block_size_q, block_size_k), got {block_size!r}")
        q, k = (operator.index(x) for x in block_size)
    else:
        q = k = operator.index(block_size)
    if q < 1 or k < 1:
        raise Error(f"block_size must be positive, got ({q}, {k})")
    return q, k


def _lists(num, indices, name):
    """(num (batch, heads, q_blocks), indices (batch, heads, q_blocks, width)) as int32 arrays, or None."""
    if num is None and indices is None:
        return None
    if num is None or indices is None:
        raise Error(f"{name}_num_blocks and {name}_indices must be given together")
    return (_arguments.int32(num, f"{name}_num_blocks", 3), _arguments.int32(indices, f"{name}_indices", 4))


def _transposed(lists, kv_blocks):
    """Per (batch, head, key block) the set of query blocks whose lists name it."""
    num, indices = lists
    batch, heads, q_blocks = num.shape
    sets = [[[set() for _ in range(kv_blocks)] for _ in range(heads)] for _ in range(batch)]
    for b in range(batch):
        for h in range(heads):
            for r in range(q_blocks):
                for c in indices[b, h, r, : num[b, h, r]]:
                    if 0 <= c < kv_blocks:
                        sets[b][h][c].add(r)
    return sets


class BlockMask:
    """FlexAttention's BlockMask: which key blocks each query block visits.

    kv_num_blocks (batch, heads, q_blocks) and kv_indices (batch, heads, q_blocks, width), integers (int32):
    kv_indices[b, h, r, :kv_num_blocks[b, h, r]] are the partial key blocks of query block r, on which the
    call's causal, window_size and document_ids still mask elements; full_kv_num_blocks and full_kv_indices
    (optional, same shapes) the key blocks seen whole, with no mask at all. Other blocks are never visited.
    heads is 1 (every query head) or heads_q. Lists need not be sorted; a block appears once per query block.
    block_size: an int or (block_size_q, block_size_k), FlexAttention's default 128. q_num_blocks, q_indices,
    full_q_num_blocks, full_q_indices: FlexAttention's transposed lists (per key block, the query blocks that
    visit it); optional, and when given checked to be the transpose of the kv lists (the library builds its
    own). seq_lengths: optional (seqlen_q, seqlen_k) the mask was made for, checked against each call.
    NumPy arrays and CPU torch tensors are accepted.
    """

    def __init__(self, kv_num_blocks, kv_indices, full_kv_num_blocks=None, full_kv_indices=None,
                 q_num_blocks=None, q_indices=None, full_q_num_blocks=None, full_q_indices=None,
                 block_size=(128, 128), seq_lengths=None):
        self.kv_num_blocks, self.kv_indices = _lists(kv_num_blocks, kv_indices, "kv")
        full = _lists(full_kv_num_blocks, full_kv_indices, "full_kv")
        self.full_kv_num_blocks, self.full_kv_indices = full if full is not None else (None, None)
        self.q_num_blocks, self.q_indices = _lists(q_num_blocks, q_indices, "q") or (None, None)
        self.full_q_num_blocks, self.full_q_indices = (
            _lists(full_q_num_blocks, full_q_indices, "full_q") or (None, None)
        )
        self.BLOCK_SIZE = _pair(block_size)
        self.seq_lengths = None if seq_lengths is None else tuple(operator.index(n) for n in seq_lengths)
        if self.q_num_blocks is not None:
            self._check_transpose((self.kv_num_blocks, self.kv_indices), (self.q_num_blocks, self.q_indices), "q")
        if self.full_q_num_blocks is not None:
            if full is None:
                raise Error("full_q_num_blocks is given but full_kv_num_blocks is not")
            self._check_transpose(full, (self.full_q_num_blocks, self.full_q_indices), "full_q")

    def _check_transpose(self, kv, q, name):
        kv_blocks = q[0].shape[2]
        expected = _transposed(kv, kv_blocks)
        num, indices = q
        if num.shape[:2] != kv[0].shape[:2]:
            raise Error(f"{name}_num_blocks has (batch, heads) {num.shape[:2]}, the kv lists {kv[0].shape[:2]}")
        for b in range(num.shape[0]):
            for h in range(num.shape[1]):
                for c in range(kv_blocks):
                    given = indices[b, h, c, : num[b, h, c]]
                    if len(given) != len(set(given.tolist())) or set(given.tolist()) != expected[b][h][c]:
                        raise Error(
                            f"{name}_indices[{b}, {h}, {c}] must list the query blocks whose kv lists name key "
                            f"block {c}, {sorted(expected[b][h][c])}; got {sorted(given.tolist())}"
                        )

    @property
    def shape(self):
        """(batch, heads, seqlen_q, seqlen_k) when seq_lengths is known, else (batch, heads)."""
        batch, heads = self.kv_num_blocks.shape[:2]
        return (batch, heads, *self.seq_lengths) if self.seq_lengths else (batch, heads)

    def __repr__(self):
        return f"BlockMask(shape={self.shape}, block_size={self.BLOCK_SIZE})"

    def core_argument(self, seqlen_q, seqlen_k):
        """The tuple _core.Modifiers.block_mask takes, after checking seq_lengths against the call's (None:
        not known here, the library checks the shapes)."""
        known = seqlen_q is not None and seqlen_k is not None
        if self.seq_lengths is not None and known and self.seq_lengths != (seqlen_q, seqlen_k):
            raise Error(
                f"block_mask was made for seq_lengths {self.seq_lengths}, the call has (seqlen_q, seqlen_k) = "
                f"({seqlen_q}, {seqlen_k})"
            )
        return (self.kv_num_blocks, self.kv_indices, self.full_kv_num_blocks, self.full_kv_indices,
                *self.BLOCK_SIZE)


def create_block_mask(seqlen_q, seqlen_k, *, batch=1, heads=1, block_size=128, causal=False,
                      window_size=(-1, -1), document_ids=None):
    """The BlockMask of causal, window_size and document_ids (int32 (batch, seqlen_k), NumPy or a CPU tensor),
    bottom-right aligned as flash_attn_func: a key block is full for a query block when every element is
    visible, partial when some are, absent when none is; lists sorted ascending, heads copies of one mask.
    Pass the same causal, window_size and document_ids to the call, which applies them on partial blocks."""
    block_q, block_k = _pair(block_size)
    left, right = _arguments.window(window_size)
    batch, heads = operator.index(batch), operator.index(heads)
    if heads < 1:
        raise Error(f"heads must be >= 1, got {heads}")
    ids = None if document_ids is None else _arguments.int32(document_ids, "document_ids", 2)
    lists = _core.create_block_mask(
        batch=batch, seqlen_q=operator.index(seqlen_q), seqlen_k=operator.index(seqlen_k), block_size_q=block_q,
        block_size_k=block_k, causal=bool(causal), window_left=left, window_right=right, document_ids=ids,
    )
    if heads > 1:
        lists = tuple(np.ascontiguousarray(np.repeat(x, heads, axis=1)) for x in lists)
    return BlockMask(*lists, block_size=(block_q, block_k), seq_lengths=(seqlen_q, seqlen_k))


def _seqlen(x):
    """The sequence length of a (batch, seqlen, heads, dim) array or tensor, or None if it is not one."""
    shape = getattr(x, "shape", ())
    return int(shape[1]) if len(shape) == 4 else None


def decode_argument(block_mask):
    """A flash_attn_with_kvcache call's block_mask as _core.kvcache takes it (None: no block mask); its key
    blocks are those of each sequence's keys after the append, checked by the library."""
    if block_mask is None:
        return None
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a flashattn.BlockMask, got {type(block_mask).__name__}")
    return block_mask.core_argument(None, None)


def apply(call, m):
    """A flash_attn_func or backward call's block_mask and document_ids into the _core.Modifiers m."""
    if call.block_mask is not None:
        if not isinstance(call.block_mask, BlockMask):
            raise TypeError(f"block_mask must be a flashattn.BlockMask, got {type(call.block_mask).__name__}")
        m.block_mask = call.block_mask.core_argument(_seqlen(call.q), _seqlen(call.k))
    if call.document_ids is not None:
        m.document_ids = _arguments.int32(call.document_ids, "document_ids", 2)
