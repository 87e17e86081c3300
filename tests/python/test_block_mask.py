"""flashattn.BlockMask, create_block_mask, and flash_attn_func / flash_attn_backward with block_mask and
document_ids against a NumPy float64 model that applies the same mask densely; the transposed q_* lists
checked; rejected masks."""

import numpy as np
import pytest

import flashattn
from reference import visible


def random_block_mask(rng, batch, heads, nq, nk, bq, bk, unsorted=True):
    """Random partial/full/absent classes per (batch, head, query block, key block), as a BlockMask (lists
    shuffled) and the class array (0 absent, 1 partial, 2 full)."""
    tq, tk = -(-nq // bq), -(-nk // bk)
    cls = rng.choice([0, 1, 2], size=(batch, heads, tq, tk), p=[0.4, 0.35, 0.25])
    cls[:, :, 0] = 0  # a query block that sees nothing
    num, idx = np.zeros((batch, heads, tq), np.int32), np.zeros((batch, heads, tq, tk), np.int32)
    full_num, full_idx = np.zeros_like(num), np.zeros_like(idx)
    for b, h, r in np.ndindex(batch, heads, tq):
        for c, (n, i) in ((1, (num, idx)), (2, (full_num, full_idx))):
            blocks = np.flatnonzero(cls[b, h, r] == c)
            if unsorted:
                rng.shuffle(blocks)
            n[b, h, r] = len(blocks)
            i[b, h, r, : len(blocks)] = blocks
    return flashattn.BlockMask(num, idx, full_num, full_idx, block_size=(bq, bk)), cls


def documents(rng, batch, nk):
    return np.sort(rng.integers(0, 4, size=(batch, nk)), axis=1).astype(np.int32)


def dense_keep(cls, bq, bk, heads_q, nq, nk, causal=False, window=(-1, -1), docs=None):
    """(batch, heads_q, nq, nk) bool: full blocks whole, partial blocks through the predicates."""
    batch = cls.shape[0]
    block = np.broadcast_to(cls, (batch, heads_q) + cls.shape[2:]) if cls.shape[1] == 1 else cls
    element = block[:, :, np.arange(nq) // bq][:, :, :, np.arange(nk) // bk]
    keep = np.broadcast_to(visible(nq, nk, causal, window), (batch, heads_q, nq, nk)).copy()
    if docs is not None:
        rows = docs[:, np.arange(nq) + nk - nq]
        keep &= (rows[:, :, None] == docs[:, None, :])[:, None]
    return (element == 2) | ((element == 1) & keep)


def model(q, k, v, keep, dout=None):
    """float64 attention over the (batch, heads_q, nq, nk) bool mask `keep`; with dout also (dq, dk, dv)."""
    q, k, v = (np.moveaxis(x.astype(np.float64), 2, 1) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = q.shape[-1] ** -0.5
    s = np.where(keep, scale * q @ np.swapaxes(k, -1, -2), -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    o = p @ v
    lse = np.where(total[..., 0] > 0, np.log(np.where(total[..., 0] > 0, total[..., 0], 1.0)) + m[..., 0], -np.inf)
    if dout is None:
        return np.moveaxis(o, 1, 2), lse
    do = np.moveaxis(dout.astype(np.float64), 2, 1)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    dq, dk = scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q
    fold = lambda x: x.reshape(x.shape[0], -1, group, *x.shape[2:]).sum(axis=2)  # noqa: E731
    return [np.moveaxis(x, 1, 2) for x in (dq, fold(dk), fold(dv))]


def inputs(rng, batch, nq, nk, hq, hkv, d):
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(batch, nq, hq, d), f(batch, nk, hkv, d), f(batch, nk, hkv, d), f(batch, nq, hq, d)


CASES = [
    dict(nq=97, nk=113, bq=64, bk=64, causal=False, docs=False, heads=1),
    dict(nq=97, nk=113, bq=32, bk=48, causal=True, docs=True, heads=4),
    dict(nq=113, nk=113, bq=13, bk=29, causal=False, docs=True, heads=1, window=(30, 5)),
    dict(nq=1, nk=97, bq=128, bk=16, causal=True, docs=False, heads=1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['nq']}x{c['nk']}_b{c['bq']}x{c['bk']}")
def test_forward_and_backward_match_the_dense_model(case, rng):
    batch, hq, hkv, d = 2, 4, 2, 40
    q, k, v, dout = inputs(rng, batch, case["nq"], case["nk"], hq, hkv, d)
    mask, cls = random_block_mask(rng, batch, case["heads"], case["nq"], case["nk"], case["bq"], case["bk"])
    docs = documents(rng, batch, case["nk"]) if case["docs"] else None
    window = case.get("window", (-1, -1))
    kwargs = dict(causal=case["causal"], window_size=window, block_mask=mask, document_ids=docs)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **kwargs)
    keep = dense_keep(cls, case["bq"], case["bk"], hq, case["nq"], case["nk"], case["causal"], window, docs)
    ref_out, ref_lse = model(q, k, v, keep)
    np.testing.assert_allclose(out, ref_out, atol=2e-5, rtol=1e-4)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(ref_lse))
    np.testing.assert_allclose(lse[np.isfinite(lse)], ref_lse[np.isfinite(ref_lse)], atol=1e-5, rtol=1e-5)
    grads = flashattn.flash_attn_backward(dout, q, k, v, out, lse, **kwargs)
    for name, ours, ref in zip(("dq", "dk", "dv"), grads, model(q, k, v, keep, dout)):
        np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=1e-3, err_msg=name)


def test_document_block_mask_gives_the_dense_document_call(rng):
    q, k, v, _ = inputs(rng, 2, 200, 200, 2, 2, 32)
    docs = documents(rng, 2, 200)
    mask = flashattn.create_block_mask(200, 200, batch=2, heads=2, block_size=64, causal=True, document_ids=docs)
    assert mask.kv_num_blocks.shape == (2, 2, 4) and mask.BLOCK_SIZE == (64, 64)
    dense = flashattn.flash_attn_func(q, k, v, causal=True, document_ids=docs)
    sparse = flashattn.flash_attn_func(q, k, v, causal=True, document_ids=docs, block_mask=mask)
    np.testing.assert_allclose(sparse, dense, atol=1e-6, rtol=1e-6)  # the kernel's tiles differ, not the result


def test_create_block_mask_classifies_blocks(rng):
    docs = documents(rng, 1, 113)
    mask = flashattn.create_block_mask(97, 113, block_size=(32, 16), causal=True, window_size=(40, -1),
                                       document_ids=docs)
    keep = visible(97, 113, True, (40, -1)) & (docs[0, np.arange(97) + 16][:, None] == docs[0][None, :])
    for r in range(4):
        rows = keep[32 * r : 32 * (r + 1)]
        for c in range(8):
            block = rows[:, 16 * c : 16 * (c + 1)]
            expected = 2 if block.all() else 1 if block.any() else 0
            partial = mask.kv_indices[0, 0, r, : mask.kv_num_blocks[0, 0, r]]
            full = mask.full_kv_indices[0, 0, r, : mask.full_kv_num_blocks[0, 0, r]]
            assert (2 if c in full else 1 if c in partial else 0) == expected, (r, c)


def transpose(num, idx, tk):
    batch, heads, tq = num.shape
    q_num = np.zeros((batch, heads, tk), np.int32)
    q_idx = np.zeros((batch, heads, tk, tq), np.int32)
    for b, h, r in np.ndindex(batch, heads, tq):
        for c in idx[b, h, r, : num[b, h, r]]:
            q_idx[b, h, c, q_num[b, h, c]] = r
            q_num[b, h, c] += 1
    return q_num, q_idx


def test_transposed_lists_are_checked(rng):
    mask, _ = random_block_mask(rng, 1, 2, 50, 60, 16, 16)
    q_num, q_idx = transpose(mask.kv_num_blocks, mask.kv_indices, 4)
    fq_num, fq_idx = transpose(mask.full_kv_num_blocks, mask.full_kv_indices, 4)
    lists = (mask.kv_num_blocks, mask.kv_indices, mask.full_kv_num_blocks, mask.full_kv_indices)
    flashattn.BlockMask(*lists, q_num, q_idx, fq_num, fq_idx, block_size=16)
    wrong = q_num.copy()
    wrong[0, 1, 2] += 1
    with pytest.raises(flashattn.Error, match=r"q_indices\[0, 1, 2\] must list the query blocks"):
        flashattn.BlockMask(*lists, wrong, q_idx, block_size=16)
    with pytest.raises(flashattn.Error, match="full_q_indices"):
        flashattn.BlockMask(*lists, q_num, q_idx, q_num, q_idx, block_size=16)


def test_rejected_masks_raise_errors_naming_them(rng):
    q, k, v, dout = inputs(rng, 1, 40, 50, 2, 1, 8)
    mask, _ = random_block_mask(rng, 1, 1, 40, 50, 16, 16, unsorted=False)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, block_mask=mask, return_attn_probs=True)
    bad = flashattn.BlockMask(np.ones_like(mask.kv_num_blocks), mask.kv_indices + 9, block_size=16)
    with pytest.raises(flashattn.Error, match=r"block_mask.kv_indices\[0, 0, 0, 0\] must be a key block in \[0, 4\)"):
        flashattn.flash_attn_func(q, k, v, block_mask=bad)
    with pytest.raises(flashattn.Error, match="kv_num_blocks"):
        eight = flashattn.BlockMask(mask.kv_num_blocks, mask.kv_indices, block_size=8)
        flashattn.flash_attn_func(q, k, v, block_mask=eight)
    with pytest.raises(flashattn.Error, match="seq_lengths"):
        flashattn.flash_attn_func(q, k, v, block_mask=flashattn.BlockMask(
            mask.kv_num_blocks, mask.kv_indices, block_size=16, seq_lengths=(40, 51)))
    with pytest.raises(flashattn.Error, match="document_ids need seqlen_q <= seqlen_k"):
        flashattn.flash_attn_func(q, k[:, :30], v[:, :30], document_ids=np.zeros((1, 30), np.int32))
    with pytest.raises(TypeError, match="block_mask must be a flashattn.BlockMask"):
        flashattn.flash_attn_func(q, k, v, block_mask=(1, 2))
    with pytest.raises(flashattn.Error, match="block_size must be positive"):
        flashattn.create_block_mask(40, 50, block_size=0)
    with pytest.raises(flashattn.Error, match="key block 1 is listed twice"):
        twice = mask.kv_indices.copy()
        twice[0, 0, :, :2] = 1
        num = np.full_like(mask.kv_num_blocks, 2)
        twice_mask = flashattn.BlockMask(num, twice, block_size=16)
        flashattn.flash_attn_backward(dout, q, k, v, out, lse, block_mask=twice_mask)
