"""The C API from Python through ctypes alone, no binding: one causal grouped-query forward call on the shared
library, checked against NumPy, and one failing call (status, message, output untouched).
Usage: python3 ctypes_forward.py LIBFLASHATTN_SO EXPECTED_VERSION"""

import ctypes as C
import sys

import numpy as np

library_path, expected_version = sys.argv[1], sys.argv[2]
lib = C.CDLL(library_path)


class Strides(C.Structure):
    _fields_ = [("batch", C.c_int64), ("seq", C.c_int64), ("head", C.c_int64)]


class Mask(C.Structure):
    _fields_ = [("kind", C.c_int), ("data", C.c_void_p)] + [
        (name, C.c_int64) for name in ("stride_batch", "stride_head", "stride_row", "stride_col")
    ]


class BlockMask(C.Structure):
    _fields_ = (
        [(name, C.c_int64) for name in ("block_size_q", "block_size_k", "heads")]
        + [("kv_num_blocks", C.POINTER(C.c_int32)), ("kv_indices", C.POINTER(C.c_int32)), ("kv_width", C.c_int64)]
        + [("full_kv_num_blocks", C.POINTER(C.c_int32)), ("full_kv_indices", C.POINTER(C.c_int32))]
        + [("full_kv_width", C.c_int64)]
    )


class KeySelection(C.Structure):
    _fields_ = [("indices", C.POINTER(C.c_int32)), ("count", C.c_int64)]


class Tiling(C.Structure):
    _fields_ = [(name, C.c_int64) for name in ("fast_memory_bytes", "block_rows", "block_cols")]


class ScoreSettings(C.Structure):
    _fields_ = [("has_scale", C.c_bool), ("scale", C.c_float), ("causal", C.c_bool)] + [
        ("window_left", C.c_int64), ("window_right", C.c_int64), ("softcap", C.c_float),
        ("alibi_slopes", C.POINTER(C.c_float)), ("alibi_batch_stride", C.c_int64),
        ("sinks", C.POINTER(C.c_float)),
    ]


class BlockPosition(C.Structure):
    _fields_ = [(name, C.c_int64) for name in ("query_start", "key_start", "total_seqlen_q", "total_seqlen_k")]


# flashattn_attention_params, field by field as include/flashattn/c_api.h declares it.
class AttentionParams(C.Structure):
    _fields_ = (
        [(name, C.c_void_p) for name in ("q", "k", "v", "o")]
        + [("lse", C.POINTER(C.c_float))]
        + [(name, Strides) for name in ("q_strides", "k_strides", "v_strides", "o_strides")]
        + [(name, C.c_int64) for name in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim")]
        + [("head_dim_v", C.c_int64), ("dtype", C.c_int)]
        + [("score", ScoreSettings), ("mask", Mask), ("block_mask", BlockMask)]
        + [("document_ids", C.POINTER(C.c_int32)), ("document_ids_batch_stride", C.c_int64)]
        + [("key_indices", KeySelection)]
        + [("dropout_p", C.c_float), ("dropout_seed", C.c_uint64), ("dropout_offset", C.c_uint64)]
        + [("block_position", BlockPosition)]
        + [("tiling", Tiling), ("num_threads", C.c_int)]
    )


lib.flashattn_version.restype = C.c_char_p
lib.flashattn_last_error.restype = C.c_char_p
lib.flashattn_attention_params_init.argtypes = [C.POINTER(AttentionParams)]
lib.flashattn_attention_params_set_contiguous_strides.argtypes = [C.POINTER(AttentionParams)]
lib.flashattn_forward.argtypes = [C.POINTER(AttentionParams), C.c_int]
lib.flashattn_forward.restype = C.c_int
FUSED, INVALID_ARGUMENT = 0, 1

assert lib.flashattn_version().decode() == expected_version, lib.flashattn_version()

batch, n_q, n_k, heads_q, heads_kv, d = 2, 97, 113, 4, 2, 59
rng = np.random.default_rng(0)
q = rng.standard_normal((batch, n_q, heads_q, d), dtype=np.float32)
k = rng.standard_normal((batch, n_k, heads_kv, d), dtype=np.float32)
v = rng.standard_normal((batch, n_k, heads_kv, d), dtype=np.float32)
o = np.full((batch, n_q, heads_q, d), 7.0, dtype=np.float32)
lse = np.zeros((batch, heads_q, n_q), dtype=np.float32)

params = AttentionParams()
lib.flashattn_attention_params_init(C.byref(params))
params.q, params.k, params.v, params.o = (x.ctypes.data for x in (q, k, v, o))
params.lse = lse.ctypes.data_as(C.POINTER(C.c_float))
params.batch, params.seqlen_q, params.seqlen_k = batch, n_q, n_k
params.heads_q, params.heads_kv, params.head_dim = heads_q, heads_kv, d
params.score.causal = True
lib.flashattn_attention_params_set_contiguous_strides(C.byref(params))

# A failing call first: heads_q not a multiple of heads_kv.
params.heads_kv = 3
status = lib.flashattn_forward(C.byref(params), FUSED)
message = lib.flashattn_last_error().decode()
assert status == INVALID_ARGUMENT and "heads_q" in message, (status, message)
assert (o == 7.0).all(), "a failed call wrote O"
params.heads_kv = heads_kv

status = lib.flashattn_forward(C.byref(params), FUSED)
assert status == 0, lib.flashattn_last_error()

# NumPy: causal aligned bottom-right, query head h reads K/V head h // (heads_q // heads_kv).
group = heads_q // heads_kv
k_rep, v_rep = (np.repeat(x.astype(np.float64), group, axis=2) for x in (k, v))
scores = np.einsum("bihc,bjhc->bhij", q.astype(np.float64), k_rep) / np.sqrt(d)
visible = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + n_k - n_q
scores = np.where(visible, scores, -np.inf)
expected_lse = np.log(np.exp(scores - scores.max(-1, keepdims=True)).sum(-1)) + scores.max(-1)
expected = np.einsum("bhij,bjhc->bihc", np.exp(scores - expected_lse[..., None]), v_rep)
error, lse_error = np.abs(o - expected).max(), np.abs(lse - expected_lse).max()
assert error < 1e-5 and lse_error < 1e-4, (error, lse_error)
print(f"ctypes: flashattn_forward on {library_path} matches NumPy (max error {error:.2e}, LSE {lse_error:.2e})")
