"""flash_attn_varlen_func with block_table: packed queries of any count per sequence over a paged KV cache,
each sequence against the float64 reference over its own keys (within twice the float32 baseline's error);
seqused_k and cu_seqlens_k give the same call; the errors (both or neither given, dropout, keys beyond the
pages) leave the cache untouched."""

import numpy as np
import pytest

import flashattn
from reference import attention, compare, max_error


def paged_problem(rng, rows, keys, Hq=4, Hkv=2, d=32, page_size=16, dtype=np.float32):
    """Packed q, paged caches holding each sequence's keys in shuffled pages, the block table."""
    b = len(rows)
    max_pages = max(1, -(-max(keys) // page_size))
    num_pages = b * max_pages + 2
    block_table = rng.permutation(num_pages)[: b * max_pages].reshape(b, max_pages).astype(np.int32)
    k_cache = rng.standard_normal((num_pages, page_size, Hkv, d)).astype(dtype)
    v_cache = rng.standard_normal((num_pages, page_size, Hkv, d)).astype(dtype)
    cu_q = np.concatenate([[0], np.cumsum(rows)]).astype(np.int32)
    q = rng.standard_normal((int(cu_q[-1]), Hq, d)).astype(dtype)
    return q, k_cache, v_cache, block_table, cu_q


def sequence_keys(cache, block_table, b, Nk):
    """Sequence b's first Nk cache rows, (1, Nk, Hkv, d)."""
    return cache[block_table[b]].reshape(-1, *cache.shape[2:])[None, :Nk]


def expected(q, k_cache, v_cache, block_table, cu_q, keys, compute, **mods):
    """(out (total_q, Hq, d), lse (Hq, total_q)) sequence by sequence, computed in `compute`."""
    outs, lses = [np.zeros((0, *q.shape[1:]))], [np.zeros((q.shape[1], 0))]
    for b, Nk in enumerate(keys):
        q_b = q[None, cu_q[b] : cu_q[b + 1]]
        if q_b.shape[1] == 0 or Nk == 0:  # no rows, or rows that see no key: O = 0, LSE = −inf
            outs.append(np.zeros(q_b.shape[1:]))
            lses.append(np.full((q.shape[1], q_b.shape[1]), -np.inf))
            continue
        if compute == np.float32:
            q_b = q_b.astype(np.float32)
        r = attention(q_b, sequence_keys(k_cache, block_table, b, Nk), sequence_keys(v_cache, block_table, b, Nk),
                      compute=compute, low=q.dtype if compute == np.float32 else None, **mods)
        outs.append(r["o"][0])
        lses.append(r["lse"][0])
    return np.concatenate(outs), np.concatenate(lses, axis=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("mods", [{"causal": True}, {"causal": True, "window": (20, 0)}, {"softcap": 5.0}],
                         ids=["causal", "window", "softcap"])
def test_each_sequence_matches_the_reference(rng, dtype, mods):
    rows, keys = [0, 1, 5, 97, 3], [0, 1, 18, 200, 2]
    q, k_cache, v_cache, block_table, cu_q = paged_problem(rng, rows, keys, dtype=dtype)
    before = (k_cache.copy(), v_cache.copy())
    out, lse, masks = flashattn.flash_attn_varlen_func(
        q, k_cache, v_cache, cu_q, None, max(rows), max(keys), causal=mods.get("causal", False),
        window_size=mods.get("window", (-1, -1)), softcap=mods.get("softcap", 0.0), return_attn_probs=True,
        block_table=block_table, seqused_k=np.array(keys, dtype=np.int32),
    )
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (4, q.shape[0]) and masks is None
    ref = expected(q, k_cache, v_cache, block_table, cu_q, keys, np.float64, **mods)
    base = expected(q, k_cache, v_cache, block_table, cu_q, keys, np.float32, **mods)
    compare({"o": out, "lse": lse}, dict(zip(("o", "lse"), ref)), dict(zip(("o", "lse"), base)), dtype, ["o"])
    assert max_error(lse, ref[1]) < 1e-4
    np.testing.assert_array_equal(k_cache, before[0])  # nothing appended
    np.testing.assert_array_equal(v_cache, before[1])


def test_seqused_k_and_cu_seqlens_k_are_the_same_call(rng):
    rows, keys = [2, 0, 7], [9, 4, 30]
    q, k_cache, v_cache, block_table, cu_q = paged_problem(rng, rows, keys)
    cu_k = np.concatenate([[0], np.cumsum(keys)]).astype(np.int32)
    by_used = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, 7, 30, causal=True,
                                               block_table=block_table, seqused_k=np.array(keys))
    by_offsets = flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 7, 30, causal=True,
                                                  block_table=block_table)
    np.testing.assert_array_equal(by_used, by_offsets)


def test_quantized_cache_matches_its_dequantized_values(rng):
    rows, keys = [3, 1, 12], [17, 1, 40]
    q, k_cache, v_cache, block_table, cu_q = paged_problem(rng, rows, keys, d=64)
    k8, k_scale = flashattn.quantize_kv(k_cache, "int8")
    v8, v_scale = flashattn.quantize_kv(v_cache, "int8")
    out = flashattn.flash_attn_varlen_func(q, k8, v8, cu_q, None, 12, 40, causal=True, block_table=block_table,
                                           seqused_k=np.array(keys), k_scale=k_scale, v_scale=v_scale)
    k_deq = (k8.astype(np.float64) * k_scale[..., None]).astype(np.float32)
    v_deq = (v8.astype(np.float64) * v_scale[..., None]).astype(np.float32)
    ref = expected(q, k_deq, v_deq, block_table, cu_q, keys, np.float64, causal=True)[0]
    assert max_error(out, ref) < 1e-5


def test_errors_name_the_argument_and_write_nothing(rng):
    rows, keys = [2, 3], [5, 9]
    q, k_cache, v_cache, block_table, cu_q = paged_problem(rng, rows, keys)
    cu_k = np.concatenate([[0], np.cumsum(keys)]).astype(np.int32)
    used = np.array(keys, dtype=np.int32)
    call = dict(block_table=block_table)
    with pytest.raises(flashattn.Error, match="seqused_k.*cu_seqlens_k.*not both"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 3, 9, seqused_k=used, **call)
    with pytest.raises(flashattn.Error, match="give seqused_k or cu_seqlens_k"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, 3, 9, **call)
    with pytest.raises(flashattn.Error, match="dropout_p must be 0"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 3, 9, dropout_p=0.1, **call)
    with pytest.raises(flashattn.Error, match="seqused_k applies to a paged KV cache"):
        flashattn.flash_attn_varlen_func(q, k_cache[:2], v_cache[:2], cu_q, cu_k, 3, 9, seqused_k=used)
    with pytest.raises(flashattn.Error, match="cache_seqlens\\[1\\]"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, None, 3, 9, seqused_k=np.array([5, 999]), **call)
    bad_table = block_table.copy()
    bad_table[0, 0] = k_cache.shape[0]
    with pytest.raises(flashattn.Error, match="block_table\\[0\\]\\[0\\]"):
        flashattn.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, 3, 9, block_table=bad_table)
    q3, k3, v3, table3, _ = paged_problem(rng, [2, 1, 2], [5, 5, 5])
    before = (k3.copy(), v3.copy())
    with pytest.raises(flashattn.Error, match="cu_seqlens_q must be non-decreasing, got cu_seqlens_q\\[1\\]=4"):
        flashattn.flash_attn_varlen_func(q3, k3, v3, np.array([0, 4, 2, 5]), None, 5, 5, block_table=table3,
                                         seqused_k=np.array([5, 5, 5]))
    np.testing.assert_array_equal(k3, before[0])
    np.testing.assert_array_equal(v3, before[1])
