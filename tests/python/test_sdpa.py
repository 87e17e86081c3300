"""scaled_dot_product_attention against a reference with PyTorch's semantics: (batch, heads, L, E) layout,
top-left causal (also for L != S), boolean masks True = attend, additive float masks, broadcasting, GQA."""

import numpy as np
import pytest

import flashattn
from reference import attention, compare


def torch_semantics(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, **kw):
    """PyTorch's math definition: top-left causal j <= i, bool mask True = attend, float mask added."""
    L, S = query.shape[2], key.shape[2]
    bool_mask, add_mask = None, None
    if is_causal:
        bool_mask = np.tril(np.ones((L, S), dtype=bool))
    elif attn_mask is not None and attn_mask.dtype == np.bool_:
        bool_mask = attn_mask
    elif attn_mask is not None:
        add_mask = attn_mask
    return attention(
        query, key, value, scale=scale, bool_mask=bool_mask, add_mask=add_mask, head_major=True, **kw
    )


def inputs(rng, B, H, Hkv, L, S, E, Ev, dtype):
    # query is a transposed view of a (B, L, H, E) array: used through its strides.
    query = rng.standard_normal((B, L, H, E)).astype(dtype).transpose(0, 2, 1, 3)
    key = rng.standard_normal((B, Hkv, S, E)).astype(dtype)
    value = rng.standard_normal((B, Hkv, S, Ev)).astype(dtype)
    return query, key, value


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("L,S", [(7, 19), (19, 7), (13, 13), (1, 9)])
def test_causal_is_top_left(rng, L, S, dtype):
    query, key, value = inputs(rng, 2, 4, 4, L, S, 40, 24, dtype)
    out = flashattn.scaled_dot_product_attention(query, key, value, is_causal=True)
    assert out.shape == (2, 4, L, 24) and out.dtype == dtype
    ref = torch_semantics(query, key, value, is_causal=True)
    base = torch_semantics(query, key, value, is_causal=True, compute=np.float32, low=dtype)
    compare({"o": out}, ref, base, dtype, ["o"])
    if L != S:  # differs from flash-attn's bottom-right causal
        bottom_right = flashattn.flash_attn_func(
            *(x.transpose(0, 2, 1, 3) for x in (query, key, value)), causal=True
        )
        assert not np.allclose(out, bottom_right.transpose(0, 2, 1, 3), equal_nan=True)


MASK_SHAPES = [(11, 17), (1, 1, 11, 17), (2, 1, 1, 17), (3, 11, 1), (17,)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", MASK_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_masks_broadcast(rng, mask_shape, kind, dtype):
    query, key, value = inputs(rng, 2, 3, 3, 11, 17, 24, 24, dtype)
    if kind == "bool":
        mask = rng.random(mask_shape) < 0.7
    else:
        mask = np.where(rng.random(mask_shape) < 0.2, -np.inf, rng.standard_normal(mask_shape)).astype(
            np.float64
        )
    out = flashattn.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=0.2)
    ref = torch_semantics(query, key, value, attn_mask=mask, scale=0.2)
    base = torch_semantics(query, key, value, attn_mask=mask, scale=0.2, compute=np.float32, low=dtype)
    compare({"o": out}, ref, base, dtype, ["o"])


def test_fully_masked_row_is_zero(rng):
    query, key, value = inputs(rng, 1, 2, 2, 3, 5, 8, 8, np.float32)
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False
    out = flashattn.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    assert np.all(out[:, :, 1] == 0) and np.all(np.isfinite(out))


@pytest.mark.parametrize("is_causal", [False, True])
def test_enable_gqa_repeats_kv_heads_interleaved(rng, is_causal):
    query, key, value = inputs(rng, 2, 6, 2, 9, 12, 32, 32, np.float32)
    out = flashattn.scaled_dot_product_attention(query, key, value, is_causal=is_causal, enable_gqa=True)
    # torch 2.5: key.repeat_interleave(H // Hkv, dim=-3)
    repeated = [np.repeat(x, 3, axis=1) for x in (key, value)]
    expected = flashattn.scaled_dot_product_attention(query, *repeated, is_causal=is_causal)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="enable_gqa"):
        flashattn.scaled_dot_product_attention(query, key, value)


def test_dropout_uses_seed(rng):
    query, key, value = inputs(rng, 1, 2, 2, 8, 8, 16, 16, np.float32)
    a = flashattn.scaled_dot_product_attention(query, key, value, dropout_p=0.4, seed=7)
    b = flashattn.scaled_dot_product_attention(query, key, value, dropout_p=0.4, seed=7)
    c = flashattn.scaled_dot_product_attention(query, key, value, dropout_p=0.4, seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_mask_with_is_causal_is_rejected_as_in_pytorch(rng):
    query, key, value = inputs(rng, 1, 1, 1, 4, 4, 8, 8, np.float32)
    with pytest.raises(ValueError, match="attn_mask"):
        flashattn.scaled_dot_product_attention(
            query, key, value, attn_mask=np.ones((4, 4), bool), is_causal=True
        )
