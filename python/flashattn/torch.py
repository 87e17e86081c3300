"""flashattn's functions for CPU ``torch.Tensor`` s, differentiable through ``torch.autograd.Function`` s.

The same functions and keywords as the NumPy API (``help(flashattn)``), on float32, float16 and bfloat16
tensors on the CPU. Tensors are passed to the library without copies (through ``Tensor.numpy()``, bfloat16
as an int16 view) when their last dimension is contiguous; outputs and gradients are new tensors.
``loss.backward()`` runs the library's backward pass, which recomputes the attention matrix from the saved
inputs, output and log-sum-exp (and the dropout mask from the saved seed). ``flash_attn_backward`` and
``flash_attn_varlen_backward`` call that backward pass directly, as the NumPy functions of the same names do.
``flash_attn_with_kvcache`` and ``merge_attention_states`` have no gradient, as in flash-attn. No gradient
flows to ``alibi_slopes`` or ``attn_mask``.

With ``dropout_p > 0`` and ``seed=None`` the dropout seed comes from torch's default generator, as
flash-attn takes it from PyTorch's: each such call makes one ``torch.empty((), dtype=torch.int64).random_(
-2**63, None)`` draw, so ``torch.manual_seed`` reproduces its masks. Invalid shapes and values raise
``Error`` (``flashattn.Error``), a ValueError and a RuntimeError.
"""

from . import _arguments, _autograd, _block_mask, _core, _kvcache, _tensors
from ._block_mask import BlockMask
from ._core import Error

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_backward",
    "flash_attn_varlen_backward",
    "flash_attn_with_kvcache",
    "quantize_kv",
    "lightning_indexer",
    "merge_attention_states",
    "scaled_dot_product_attention",
    "BlockMask",
    "create_block_mask",
    "set_working_memory_limit",
    "working_memory_limit",
    "release_working_memory",
    "retained_working_memory",
    "Error",
]


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *, seed=None,
        sinks=None, block_mask=None, document_ids=None, key_indices=None):
    """flashattn.flash_attn_func for tensors, differentiable in q, k, v and a sinks tensor (see its
    docstring). With dropout_p > 0 and seed None the seed is drawn from torch's default generator, as
    flash-attn does (torch.manual_seed reproduces the mask); it is kept for the backward pass. With
    key_indices (selected keys) it is inference only: no tensor may require a gradient while autograd records."""
    call = _arguments.call_of(locals())
    _tensors.convert(call, side_arrays=("alibi_slopes", "sinks", "key_indices"))
    m = _arguments.modifiers(call, draw_seed=_tensors.torch_seed)
    _block_mask.apply(call, m)  # kept in m for the backward pass
    probs = bool(call.return_attn_probs)
    if call.key_indices is not None:
        return _autograd.selected_keys_forward(call, m, probs)
    out, lse, keep = _autograd.FlashAttnFunc.apply(call.q, call.k, call.v, sinks, m, probs)
    if not call.return_attn_probs:
        return out
    return out, lse, (keep if m.dropout_p > 0 else None)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
        softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
        deterministic=False, return_attn_probs=False, block_table=None, *, seed=None, sinks=None, seqused_k=None,
        k_scale=None, v_scale=None, cache_dtype=None, key_indices=None):
    """flashattn.flash_attn_varlen_func for tensors, differentiable in q, k, v and sinks; the dropout seed as
    in flash_attn_func. With return_attn_probs=True it returns (out, softmax_lse, masks), masks as the
    NumPy function returns them: a list of one bool tensor (heads_q, seqlen_q_b, seqlen_k_b) per sequence,
    True where P was kept, or None when dropout_p is 0. With block_table, k and v are paged KV caches read
    as the NumPy function reads them (no gradient, as flash_attn_with_kvcache)."""
    call = _arguments.call_of(locals())
    if call.block_table is not None:  # paged caches: no gradient, as flash_attn_with_kvcache
        bf16 = _tensors.is_bf16(call.q)
        _tensors.convert(
            call,
            arrays=("q", "k", "v", "k_scale", "v_scale"),
            side_arrays=(
                "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "alibi_slopes", "sinks", "key_indices"
            ),
        )
        out, lse = _kvcache.varlen_kvcache(call, bf16=bf16)
        out = _tensors.tensor(out, bf16)
        return (out, _tensors.tensor(lse), None) if call.return_attn_probs else out
    _arguments.reject_cache_keywords(call)
    _tensors.convert(call, side_arrays=("alibi_slopes", "sinks", "cu_seqlens_q", "cu_seqlens_k"))
    m = _arguments.modifiers(call, draw_seed=_tensors.torch_seed)
    sequences = _arguments.packed_sequences(call)
    probs = bool(call.return_attn_probs)
    out, lse, masks = _autograd.FlashAttnVarlenFunc.apply(call.q, call.k, call.v, sinks, sequences, m, probs)
    return (out, lse, masks) if probs else out


def flash_attn_backward(dout, q, k, v, out, softmax_lse, dropout_p=0.0, softmax_scale=None, causal=False,
        window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, *, seed=None, sinks=None,
        block_mask=None, document_ids=None):
    """flashattn.flash_attn_backward for tensors: the gradients (dq, dk, dv) of flash_attn_func for the
    incoming gradient dout, as new tensors of q's dtype (float32, float16 or bfloat16) and of the shapes of
    q, k, v, and dsinks (float32 (heads_q,)) when sinks are given. out and softmax_lse as
    flash_attn_func(..., return_attn_probs=True) returned them, every keyword as given to it (the seed is required when dropout_p > 0). Like the NumPy function: the tensors are used
    without copies when their last dimension is contiguous, else Error. Not recorded by autograd."""
    call = _arguments.call_of(locals())
    return _autograd.direct_backward(call)


def flash_attn_varlen_backward(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
        max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
        alibi_slopes=None, deterministic=False, *, seed=None, sinks=None):
    """flashattn.flash_attn_varlen_backward for tensors: the gradients (dq, dk, dv) of
    flash_attn_varlen_func, as new tensors of q's dtype. out and softmax_lse (heads_q, total_q) as
    flash_attn_varlen_func(..., return_attn_probs=True) returned them, the forward call's seed when
    dropout_p > 0. Not recorded by autograd."""
    call = _arguments.call_of(locals())
    return _autograd.direct_backward(call, varlen=True)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
        cache_seqlens=None, block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
        rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, k_scale=None,
        v_scale=None, cache_dtype=None, *, sinks=None, head_dim_v=None, quantize_query_int8=False,
        quantize_probs_u8=False, key_indices=None, block_mask=None, document_ids=None):
    """flashattn.flash_attn_with_kvcache for tensors: k_cache and v_cache (and per-token k_scale and v_scale)
    are updated in place; no gradient. Quantized caches are int8 or uint8 tensors."""
    call = _arguments.call_of(locals())
    bf16 = _tensors.is_bf16(call.q)
    _tensors.convert(
        call,
        arrays=("q", "k_cache", "v_cache", "k", "v", "k_scale", "v_scale"),
        side_arrays=(
            "rotary_cos", "rotary_sin", "cache_seqlens", "block_table", "alibi_slopes", "sinks", "key_indices",
            "document_ids",
        ),
    )
    out, lse = _kvcache.kvcache(call, bf16=bf16)
    out = _tensors.tensor(out, bf16)
    return (out, _tensors.tensor(lse)) if call.return_softmax_lse else out


def create_block_mask(seqlen_q, seqlen_k, *, batch=1, heads=1, block_size=128, causal=False, window_size=(-1, -1),
        document_ids=None):
    """flashattn.create_block_mask; document_ids may be an integer tensor. The BlockMask holds NumPy int32
    lists, which flash_attn_func and its backward read directly."""
    return _block_mask.create_block_mask(seqlen_q, seqlen_k, batch=batch, heads=heads, block_size=block_size,
                                         causal=causal, window_size=window_size, document_ids=document_ids)


def quantize_kv(x, dtype="int8", group_size=None, granularity=None):
    """flashattn.quantize_kv for a tensor (float32, float16 or bfloat16): returns (values, scales) tensors."""
    call = _arguments.call_of(locals())
    bf16 = _tensors.is_bf16(call.x)
    _tensors.convert(call, arrays=("x",))
    values, scales = _kvcache.quantize_kv(call, bf16=bf16)
    return _tensors.tensor(values), _tensors.tensor(scales)


def lightning_indexer(q_index, k_index, weights, top_k, *, cache_seqlens=None, block_table=None, causal=True,
        k_scale=None, cache_dtype=None, return_scores=False):
    """flashattn.lightning_indexer for tensors (q_index and k_index float32, float16 or bfloat16; k_index int8
    or uint8 when quantized): returns key_indices (batch, seqlen_q, 1, top_k) int32, and the scores with
    return_scores=True. No gradient."""
    call = _arguments.call_of(locals())
    bf16 = _tensors.is_bf16(call.q_index) or _tensors.is_bf16(call.k_index)
    _tensors.convert(call, arrays=("q_index", "k_index", "k_scale"),
                     side_arrays=("weights", "cache_seqlens", "block_table"))
    key_indices, scores = _kvcache.lightning_indexer(call, bf16=bf16)
    return (_tensors.tensor(key_indices), _tensors.tensor(scores)) if call.return_scores else _tensors.tensor(key_indices)


def merge_attention_states(outs, lses):
    """flashattn.merge_attention_states for tensors (no gradient): returns (out, lse)."""
    o_partials, lse_partials, like, bf16 = _tensors.merge_partials(outs, lses)
    out, lse = _core.merge(o_partials, lse_partials, like=like, bf16=bf16)
    return _tensors.tensor(out, bf16), _tensors.tensor(lse)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
        scale=None, enable_gqa=False, *, seed=None):
    """flashattn.scaled_dot_product_attention (PyTorch's semantics) for tensors, differentiable in query, key
    and value; attn_mask is a bool or float tensor broadcastable to (batch, heads, L, S). With dropout_p > 0
    and seed None the seed is drawn from torch's default generator, as in flash_attn_func."""
    call = _arguments.call_of(locals())
    options = _arguments.sdpa_options(call, _tensors.sdpa_mask(call), draw_seed=_tensors.torch_seed)
    return _autograd.ScaledDotProductAttentionFunc.apply(call.query, call.key, call.value, options)


def set_working_memory_limit(bytes_per_thread):
    """flashattn.set_working_memory_limit: the bytes of working memory each calling thread keeps between
    calls, one limit for flashattn and flashattn.torch alike; 0 keeps nothing."""
    _core.set_working_memory_limit(bytes_per_thread=_arguments.byte_count(bytes_per_thread, "bytes_per_thread"))


def working_memory_limit():
    """flashattn.working_memory_limit: the bytes each calling thread may keep between calls."""
    return _core.working_memory_limit()


def release_working_memory():
    """flashattn.release_working_memory: frees the working memory every thread keeps between calls."""
    _core.release_working_memory()


def retained_working_memory():
    """flashattn.retained_working_memory: the bytes of working memory all threads keep now, together."""
    return _core.retained_working_memory()
