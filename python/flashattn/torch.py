"""flashattn's functions for CPU ``torch.Tensor`` s, differentiable through ``torch.autograd.Function`` s.

The same functions and keywords as the NumPy API (``help(flashattn)``), on float32, float16 and bfloat16
tensors on the CPU. Tensors are passed to the library without copies (through ``Tensor.numpy()``, bfloat16
as an int16 view) when their last dimension is contiguous; outputs and gradients are new tensors.
``loss.backward()`` runs the library's backward pass, which recomputes the attention matrix from the saved
inputs, output and log-sum-exp (and the dropout mask from the saved seed). ``flash_attn_backward`` and
``flash_attn_varlen_backward`` call that backward pass directly, as the NumPy functions of the same names do.
``flash_attn_with_kvcache`` and ``merge_attention_states`` have no gradient, as in flash-attn. No gradient
flows to ``alibi_slopes`` or ``attn_mask``.
"""

from . import _arguments, _autograd, _core, _kvcache, _signatures, _tensors

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_backward",
    "flash_attn_varlen_backward",
    "flash_attn_with_kvcache",
    "merge_attention_states",
    "scaled_dot_product_attention",
]


@_signatures.takes(_signatures.FLASH_ATTN_FUNC)
def flash_attn_func(call):
    """flashattn.flash_attn_func for tensors, differentiable in q, k and v (see its docstring). The dropout
    seed (drawn when None) is kept for the backward pass."""
    _tensors.convert(call, side_arrays=("alibi_slopes",))
    m = _arguments.modifiers(call)
    out, lse, keep = _autograd.FlashAttnFunc.apply(call.q, call.k, call.v, m, bool(call.return_attn_probs))
    if not call.return_attn_probs:
        return out
    return out, lse, (keep if m.dropout_p > 0 else None)


@_signatures.takes(_signatures.FLASH_ATTN_VARLEN_FUNC)
def flash_attn_varlen_func(call):
    """flashattn.flash_attn_varlen_func for tensors, differentiable in q, k and v. With return_attn_probs=True
    it returns (out, softmax_lse, None): the per-sequence dropout masks are returned by the NumPy function
    only."""
    _tensors.convert(call, side_arrays=("alibi_slopes", "cu_seqlens_q", "cu_seqlens_k"))
    m = _arguments.modifiers(call)
    sequences = _arguments.packed_sequences(call)
    out, lse = _autograd.FlashAttnVarlenFunc.apply(call.q, call.k, call.v, sequences, m)
    return (out, lse, None) if call.return_attn_probs else out


@_signatures.takes(_signatures.FLASH_ATTN_BACKWARD)
def flash_attn_backward(call):
    """flashattn.flash_attn_backward for tensors: the gradients (dq, dk, dv) of flash_attn_func for the
    incoming gradient dout, as new tensors of q's dtype (float32, float16 or bfloat16) and of the shapes of
    q, k, v. out and softmax_lse as flash_attn_func(..., return_attn_probs=True) returned them, every keyword
    as given to it (the seed is required when dropout_p > 0). Like the NumPy function: the tensors are used
    without copies when their last dimension is contiguous, else ValueError. Not recorded by autograd."""
    return _autograd.direct_backward(call)


@_signatures.takes(_signatures.FLASH_ATTN_VARLEN_BACKWARD)
def flash_attn_varlen_backward(call):
    """flashattn.flash_attn_varlen_backward for tensors: the gradients (dq, dk, dv) of
    flash_attn_varlen_func, as new tensors of q's dtype. out and softmax_lse (heads_q, total_q) as
    flash_attn_varlen_func(..., return_attn_probs=True) returned them, the forward call's seed when
    dropout_p > 0. Not recorded by autograd."""
    return _autograd.direct_backward(call, varlen=True)


@_signatures.takes(_signatures.FLASH_ATTN_WITH_KVCACHE)
def flash_attn_with_kvcache(call):
    """flashattn.flash_attn_with_kvcache for tensors: k_cache and v_cache are updated in place; no
    gradient."""
    bf16 = _tensors.is_bf16(call.q)
    _tensors.convert(
        call,
        arrays=("q", "k_cache", "v_cache", "k", "v"),
        side_arrays=("rotary_cos", "rotary_sin", "cache_seqlens", "block_table", "alibi_slopes"),
    )
    out, lse = _kvcache.kvcache(call, bf16=bf16)
    out = _tensors.tensor(out, bf16)
    return (out, _tensors.tensor(lse)) if call.return_softmax_lse else out


def merge_attention_states(outs, lses):
    """flashattn.merge_attention_states for tensors (no gradient): returns (out, lse)."""
    o_partials, lse_partials, like, bf16 = _tensors.merge_partials(outs, lses)
    out, lse = _core.merge(o_partials, lse_partials, like=like, bf16=bf16)
    return _tensors.tensor(out, bf16), _tensors.tensor(lse)


@_signatures.takes(_signatures.SCALED_DOT_PRODUCT_ATTENTION)
def scaled_dot_product_attention(call):
    """flashattn.scaled_dot_product_attention (PyTorch's semantics) for tensors, differentiable in query, key
    and value; attn_mask is a bool or float tensor broadcastable to (batch, heads, L, S)."""
    options = _arguments.sdpa_options(call, _tensors.sdpa_mask(call))
    return _autograd.ScaledDotProductAttentionFunc.apply(call.query, call.key, call.value, options)
