"""flashattn.torch over quantized KV caches: quantize_kv of a tensor gives the NumPy function's values and
scales, and flash_attn_with_kvcache over int8, FP8 E4M3 and FP8 E5M2 tensors (uint8 for FP8, with cache_dtype)
gives the NumPy function's output bit for bit and appends into the tensors in place."""

import numpy as np
import pytest
import torch

import flashattn
import flashattn.torch as fat


@pytest.mark.parametrize("dtype", ["int8", "fp8_e4m3", "fp8_e5m2"])
def test_quantized_cache_tensors_match_the_numpy_api(dtype):
    torch.manual_seed(5)
    k_float, v_float = torch.randn(2, 24, 2, 32), torch.randn(2, 24, 2, 32)
    q, k, v = torch.randn(2, 1, 4, 32), torch.randn(2, 1, 2, 32), torch.randn(2, 1, 2, 32)
    k_values, k_scale = fat.quantize_kv(k_float, dtype)
    v_values, v_scale = fat.quantize_kv(v_float, dtype)
    np_k_values, np_k_scale = flashattn.quantize_kv(k_float.numpy(), dtype)
    assert k_values.dtype == (torch.int8 if dtype == "int8" else torch.uint8)
    assert np.array_equal(k_values.numpy(), np_k_values) and np.array_equal(k_scale.numpy(), np_k_scale)
    cache_dtype = dtype if dtype.startswith("fp8") else None
    arrays = [x.numpy().copy() for x in (k_values, v_values, k_scale, v_scale)]
    call = dict(cache_seqlens=np.array([20, 7]), causal=True, cache_dtype=cache_dtype)
    out = fat.flash_attn_with_kvcache(q, k_values, v_values, k, v, k_scale=k_scale, v_scale=v_scale,
                                      cache_seqlens=torch.tensor([20, 7]), causal=True, cache_dtype=cache_dtype)
    expected = flashattn.flash_attn_with_kvcache(q.numpy(), arrays[0], arrays[1], k.numpy(), v.numpy(),
                                                 k_scale=arrays[2], v_scale=arrays[3], **call)
    assert np.array_equal(out.numpy(), expected)
    assert np.array_equal(k_values.numpy(), arrays[0])  # the same append, in place
    assert np.array_equal(k_scale.numpy(), arrays[2])
