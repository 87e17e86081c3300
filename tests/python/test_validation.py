"""The Python part of the validation matrix (docs/robustness.md): every bad input raises TypeError (element
types) or flashattn.Error (everything else: a ValueError and a RuntimeError) whose message names the
argument, and no array passed in changes (the key/value caches included). Python has no null pointers (None
where an array is required is a TypeError naming it), and outputs are always new arrays, so 'output
overlaps an input' cannot be expressed here."""

import numpy as np
import pytest

import flashattn

F32 = np.float32


def arr(*shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def base_qkv():
    return arr(2, 5, 4, 16), arr(2, 7, 2, 16, seed=1), arr(2, 7, 2, 16, seed=2)


def forward_case(q=None, k=None, v=None, **kwargs):
    dq, dk, dv = base_qkv()
    args = [dq if q is None else q, dk if k is None else k, dv if v is None else v]
    return lambda: flashattn.flash_attn_func(*args, **kwargs), args + list(kwargs.values())


def backward_case(dout=None, lse=None, **kwargs):
    q, k, v = base_qkv()
    out, good_lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True)
    args = [arr(*out.shape, seed=3) if dout is None else dout, q, k, v, out, good_lse if lse is None else lse]
    return lambda: flashattn.flash_attn_backward(*args, **kwargs), args


def sdpa_case(query=None, key=None, **kwargs):
    key = arr(2, 4, 7, 16, seed=1) if key is None else key
    args = [arr(2, 4, 5, 16) if query is None else query, key, arr(*key.shape, seed=2)]
    return lambda: flashattn.scaled_dot_product_attention(*args, **kwargs), args + list(kwargs.values())


def varlen_case(cu_q=(0, 3, 5), cu_k=(0, 4, 7), max_q=3, max_k=4, **kwargs):
    q, k, v = arr(5, 4, 16), arr(7, 2, 16, seed=1), arr(7, 2, 16, seed=2)
    cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
    args = [q, k, v, cu_q, cu_k]
    return lambda: flashattn.flash_attn_varlen_func(*args, max_q, max_k, **kwargs), args


def kvcache_case(
    seqlens=(3, 5), new=2, block_table=None, cache_shape=(2, 8, 2, 16), q_dtype=F32, writeable=True, **kwargs
):
    q = arr(2, 1, 4, 16, dtype=q_dtype)
    k_cache, v_cache = arr(*cache_shape, seed=1), arr(*cache_shape, seed=2)
    k_cache.flags.writeable = writeable
    k, v = arr(2, new, 2, 16, seed=3), arr(2, new, 2, 16, seed=4)
    args = [q, k_cache, v_cache, k, v]
    extra = {"cache_seqlens": np.asarray(seqlens, dtype=np.int32)}
    if block_table is not None:
        extra["block_table"] = np.asarray(block_table, dtype=np.int32)
    call = lambda: flashattn.flash_attn_with_kvcache(*args, **extra, **kwargs)  # noqa: E731
    return call, args + list(extra.values()) + [x for x in kwargs.values() if isinstance(x, np.ndarray)]


def merge_case(outs=None, lses=None):
    outs = outs if outs is not None else [arr(1, 3, 2, 8), arr(1, 3, 2, 8, seed=1)]
    lses = lses if lses is not None else [arr(1, 2, 3), arr(1, 2, 3, seed=1)]
    return lambda: flashattn.merge_attention_states(outs, lses), outs + lses


q0, k0, v0 = base_qkv()
huge = np.lib.stride_tricks.as_strided(q0, shape=(1, 3, 1, 16), strides=(0, 2**63 - 4, 0, 4))

# (case id, (call, arrays), exception type, words the message must contain)
CASES = [
    ("q_not_an_array", forward_case(q=[[1.0]]), TypeError, ["q", "numpy.ndarray"]),
    ("q_float64", forward_case(q=q0.astype(np.float64)), TypeError, ["q", "float64"]),
    ("k_int32", forward_case(k=k0.astype(np.int32)), TypeError, ["k", "int32"]),
    ("dtypes_differ", forward_case(k=k0.astype(np.float16)), TypeError, ["k", "float16", "q"]),
    ("big_endian", forward_case(q=q0.astype(">f4")), TypeError, ["q"]),
    ("q_ndim", forward_case(q=q0[0]), ValueError, ["q", "4 dimensions"]),
    ("k_head_dim", forward_case(k=arr(2, 7, 2, 8)), ValueError, ["k", "head_dim"]),
    ("k_batch", forward_case(k=arr(3, 7, 2, 16)), ValueError, ["k", "batch"]),
    ("v_seqlen", forward_case(v=arr(2, 6, 2, 16)), ValueError, ["v", "seqlen_k"]),
    ("q_last_dim_strided", forward_case(q=arr(2, 5, 4, 32)[..., ::2]), ValueError, ["q", "contiguous"]),
    (
        "q_byte_stride",
        forward_case(q=np.zeros((2, 5, 4, 16 * 4 + 1), np.uint8)[..., 1:].view(F32)),
        ValueError,
        ["q", "stride"],
    ),
    # `huge` spans more than 2^63 bytes over q0's memory: q0 is what must stay unchanged.
    (
        "q_too_large_to_index",
        (forward_case(q=huge, k=k0[:1, :, :1], v=v0[:1, :, :1])[0], [q0, k0, v0]),
        ValueError,
        ["q", "64 bits"],
    ),
    ("heads_not_multiple", forward_case(q=arr(2, 5, 3, 16)), ValueError, ["heads_q", "heads_kv"]),
    (
        "head_dim_too_large",
        forward_case(q=arr(1, 1, 1, 577), k=arr(1, 1, 1, 577), v=arr(1, 1, 1, 577)),
        ValueError,
        ["head_dim", "577"],
    ),
    ("window_left_below_minus_1", forward_case(window_size=(-2, 0)), ValueError, ["window_left", "-2"]),
    ("window_right_below_minus_1", forward_case(window_size=(0, -5)), ValueError, ["window_right", "-5"]),
    ("window_not_pair", forward_case(window_size=3), TypeError, ["window_size"]),
    ("softcap_nan", forward_case(softcap=float("nan")), ValueError, ["softcap", "nan"]),
    ("softcap_negative", forward_case(softcap=-1.0), ValueError, ["softcap", "-1"]),
    ("scale_nan", forward_case(softmax_scale=float("nan")), ValueError, ["scale", "nan"]),
    ("scale_inf", forward_case(softmax_scale=float("inf")), ValueError, ["scale", "inf"]),
    ("dropout_negative", forward_case(dropout_p=-0.1), ValueError, ["dropout_p"]),
    ("dropout_one", forward_case(dropout_p=1.0), ValueError, ["dropout_p", "1"]),
    ("seed_negative", forward_case(dropout_p=0.1, seed=-1), ValueError, ["seed"]),
    ("alibi_wrong_length", forward_case(alibi_slopes=np.ones(3, F32)), ValueError, ["alibi_slopes", "(3,)"]),
    (
        "alibi_wrong_batch",
        forward_case(alibi_slopes=np.ones((3, 4), F32)),
        ValueError,
        ["alibi_slopes", "(3, 4)"],
    ),
    (
        "backward_lse_shape",
        backward_case(lse=np.zeros((2, 5, 4), F32)),
        ValueError,
        ["softmax_lse", "(2, 4, 5)"],
    ),
    ("backward_lse_nan", backward_case(lse=np.full((2, 4, 5), np.nan, F32)), ValueError, ["lse", "nan"]),
    ("backward_dout_shape", backward_case(dout=arr(2, 5, 4, 8)), ValueError, ["dout", "head_dim_v"]),
    ("backward_dropout_without_seed", backward_case(dropout_p=0.2), ValueError, ["seed"]),
    (
        "sdpa_mask_not_broadcastable",
        sdpa_case(attn_mask=np.ones((5, 6), bool)),
        ValueError,
        ["attn_mask", "(5, 6)"],
    ),
    ("sdpa_mask_int", sdpa_case(attn_mask=np.ones((5, 7), np.int32)), TypeError, ["attn_mask", "int32"]),
    ("sdpa_heads_without_gqa", sdpa_case(key=arr(2, 2, 7, 16)), ValueError, ["key", "enable_gqa"]),
    ("sdpa_gqa_not_multiple", sdpa_case(key=arr(2, 3, 7, 16), enable_gqa=True), ValueError, ["heads_q"]),
    ("sdpa_dropout", sdpa_case(dropout_p=1.5), ValueError, ["dropout_p"]),
    ("varlen_decreasing", varlen_case(cu_q=(0, 4, 3)), ValueError, ["cu_seqlens_q", "non-decreasing"]),
    ("varlen_wrong_end", varlen_case(cu_k=(0, 4, 6)), ValueError, ["cu_seqlens_k", "7"]),
    ("varlen_not_starting_at_0", varlen_case(cu_q=(1, 3, 5)), ValueError, ["cu_seqlens_q[0]"]),
    ("varlen_beyond_max", varlen_case(max_k=3), ValueError, ["cu_seqlens_k", "max_seqlen"]),
    ("varlen_float_offsets", varlen_case(cu_q=(0.0, 3.0, 5.0)), TypeError, ["cu_seqlens_q"]),
    ("varlen_lengths_differ", varlen_case(cu_k=(0, 7)), ValueError, ["cu_seqlens_k", "entries"]),
    ("kvcache_beyond_capacity", kvcache_case(seqlens=(3, 7)), ValueError, ["cache_seqlens[1]", "7 + 2"]),
    ("kvcache_negative_seqlen", kvcache_case(seqlens=(-1, 0)), ValueError, ["cache_seqlens[0]", "-1"]),
    (
        "kvcache_block_table_out_of_range",
        kvcache_case(cache_shape=(4, 3, 2, 16), block_table=[[0, 1, 4], [2, 3, 0]], seqlens=(5, 1)),
        ValueError,
        ["block_table[0][2] = 4", "out of range"],
    ),
    (
        "kvcache_pages_shared",
        kvcache_case(cache_shape=(4, 3, 2, 16), block_table=[[0, 1], [2, 1]], seqlens=(3, 3)),
        ValueError,
        ["block_table", "same cache slot"],
    ),
    ("kvcache_read_only", kvcache_case(writeable=False), ValueError, ["k_cache", "read-only"]),
    # q of another float type than the cache is valid; the appended k and v must be of q's type.
    ("kvcache_new_dtype", kvcache_case(q_dtype=np.float16), TypeError, ["k has dtype float32", "q"]),
    (
        "kvcache_rotary_beyond_table",
        kvcache_case(rotary_cos=np.ones((4, 4)), rotary_sin=np.zeros((4, 4))),
        ValueError,
        ["rotary", "rotary_max_pos"],
    ),
    ("kvcache_softcap_nan", kvcache_case(softcap=float("nan")), ValueError, ["softcap"]),
    ("merge_shapes_differ", merge_case(outs=[arr(1, 3, 2, 8), arr(1, 4, 2, 8)]), ValueError, ["outs[1]"]),
    ("merge_lse_shape", merge_case(lses=[arr(1, 2, 3), arr(1, 3, 2)]), ValueError, ["lses[1]"]),
    (
        "merge_lse_nan",
        merge_case(lses=[arr(1, 2, 3), np.full((1, 2, 3), np.nan, F32)]),
        ValueError,
        ["lse_partials", "nan"],
    ),
    (
        "merge_dtypes_differ",
        merge_case(outs=[arr(1, 3, 2, 8), arr(1, 3, 2, 8, dtype=np.float16)]),
        TypeError,
        ["outs[1]", "float16"],
    ),
]


@pytest.mark.parametrize("case", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_naming_the_argument_and_changes_nothing(case):
    (call, arrays), error, words = case
    arrays = [a for a in arrays if isinstance(a, np.ndarray)]
    # Byte copies: NaN patterns compare equal this way.
    before = [np.array(a, copy=True).view(np.uint8) for a in arrays]
    with pytest.raises(error) as raised:
        call()
    # Every invalid shape or value, whichever layer finds it, is a flashattn.Error: `except ValueError` and
    # `except RuntimeError` (flash-attn's type) both catch it. Wrong element types stay TypeErrors.
    assert isinstance(raised.value, flashattn.Error) == (error is ValueError), type(raised.value)
    message = str(raised.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    for a, b in zip(arrays, before):
        assert np.array_equal(np.array(a, copy=True).view(np.uint8), b), "an array passed in was modified"
