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

import operator

import torch

from . import _core, _int32, _kvcache, _modifiers, _sdpa_mask, _seed

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_backward",
    "flash_attn_varlen_backward",
    "flash_attn_with_kvcache",
    "merge_attention_states",
    "scaled_dot_product_attention",
]


def _array(tensor, name):
    """A NumPy view of a CPU tensor (bfloat16 as int16), sharing its memory; None stays None."""
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU, got device {tensor.device}")
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    try:
        return tensor.numpy()
    except TypeError:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16, got {tensor.dtype}") from None


def _side_array(tensor, name):
    """A small side input (slopes, tables, indices) as NumPy, bfloat16 converted to float32."""
    if isinstance(tensor, torch.Tensor):
        tensor = tensor.detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return _array(tensor, name)
    return tensor


def _tensor(array, bf16):
    if array is None:
        return None
    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if bf16 else tensor


def _grad_array(grad, name):
    """An incoming gradient as NumPy; autograd may hand in broadcast views, whose last dimension is made
    contiguous here (a copy)."""
    if grad.stride(-1) != 1 and grad.size(-1) > 1:
        grad = grad.contiguous()
    return _array(grad, name)


def _is_bf16(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16


def _backward(dout, q, k, v, out, lse, modifiers, bf16):
    """The library's backward pass on tensors (dout as NumPy already): new (dq, dk, dv) tensors."""
    grads = _core.backward(
        dout,
        _array(q, "q"),
        _array(k, "k"),
        _array(v, "v"),
        _array(out, "out"),
        _array(lse, "softmax_lse"),
        modifiers,
        bf16=bf16,
    )
    return tuple(_tensor(g, bf16) for g in grads)


def _varlen_backward(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_q, max_k, modifiers, bf16):
    """The library's varlen backward pass on tensors (dout and cu_seqlens as NumPy already)."""
    grads = _core.varlen_backward(
        dout,
        _array(q, "q"),
        _array(k, "k"),
        _array(v, "v"),
        _array(out, "out"),
        _array(lse, "softmax_lse"),
        cu_seqlens_q,
        cu_seqlens_k,
        max_q,
        max_k,
        modifiers,
        bf16=bf16,
    )
    return tuple(_tensor(g, bf16) for g in grads)


def _same_dtype(q, **tensors):
    """TypeError naming the first tensor whose dtype differs from q's (bfloat16 would otherwise reach the
    library as an int16 array and be reported as int16)."""
    for name, t in tensors.items():
        if isinstance(q, torch.Tensor) and isinstance(t, torch.Tensor) and t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has dtype {q.dtype}; they must agree")


class FlashAttnFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, modifiers, return_dropout_mask):
        bf16 = _is_bf16(q)
        out, lse, keep = _core.forward(
            _array(q, "q"),
            _array(k, "k"),
            _array(v, "v"),
            modifiers,
            return_lse=True,
            return_dropout_mask=return_dropout_mask,
            bf16=bf16,
        )
        out, lse = _tensor(out, bf16), torch.from_numpy(lse)
        keep = torch.from_numpy(keep) if keep is not None else torch.empty(0, dtype=torch.bool)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.modifiers, ctx.bf16 = modifiers, bf16
        ctx.mark_non_differentiable(lse, keep)
        return out, lse, keep

    @staticmethod
    def backward(ctx, dout, _dlse, _dkeep):
        q, k, v, out, lse = ctx.saved_tensors
        return _backward(_grad_array(dout, "dout"), q, k, v, out, lse, ctx.modifiers, ctx.bf16) + (None, None)


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    seed=None,
):
    """flashattn.flash_attn_func for tensors, differentiable in q, k and v (see its docstring). The dropout
    seed (drawn when None) is kept for the backward pass."""
    del deterministic
    m = _modifiers(
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        _side_array(alibi_slopes, "alibi_slopes"),
        _seed(seed, dropout_p),
    )
    out, lse, keep = FlashAttnFunc.apply(q, k, v, m, bool(return_attn_probs))
    if not return_attn_probs:
        return out
    return out, lse, (keep if m.dropout_p > 0 else None)


class FlashAttnVarlenFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, modifiers):
        bf16 = _is_bf16(q)
        out, lse, _ = _core.varlen_forward(
            _array(q, "q"),
            _array(k, "k"),
            _array(v, "v"),
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            modifiers,
            bf16=bf16,
        )
        out, lse = _tensor(out, bf16), torch.from_numpy(lse)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.rest = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, modifiers)
        ctx.bf16 = bf16
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        grads = _varlen_backward(_grad_array(dout, "dout"), q, k, v, out, lse, *ctx.rest, ctx.bf16)
        return grads + (None,) * 5


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    seed=None,
):
    """flashattn.flash_attn_varlen_func for tensors, differentiable in q, k and v. With return_attn_probs=True
    it returns (out, softmax_lse, None): the per-sequence dropout masks are returned by the NumPy function
    only."""
    del deterministic
    m = _modifiers(
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        _side_array(alibi_slopes, "alibi_slopes"),
        _seed(seed, dropout_p),
    )
    out, lse = FlashAttnVarlenFunc.apply(
        q,
        k,
        v,
        _int32(_side_array(cu_seqlens_q, "cu_seqlens_q"), "cu_seqlens_q", 1),
        _int32(_side_array(cu_seqlens_k, "cu_seqlens_k"), "cu_seqlens_k", 1),
        int(max_seqlen_q),
        int(max_seqlen_k),
        m,
    )
    return (out, lse, None) if return_attn_probs else out


def flash_attn_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    *,
    seed=None,
):
    """flashattn.flash_attn_backward for tensors: the gradients (dq, dk, dv) of flash_attn_func for the
    incoming gradient dout, as new tensors of q's dtype (float32, float16 or bfloat16) and of the shapes of
    q, k, v. out and softmax_lse as flash_attn_func(..., return_attn_probs=True) returned them, every keyword
    as given to it (the seed is required when dropout_p > 0). Like the NumPy function: the tensors are used
    without copies when their last dimension is contiguous, else ValueError. Not recorded by autograd."""
    del deterministic
    _same_dtype(q, k=k, v=v, out=out, dout=dout)
    m = _modifiers(
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        _side_array(alibi_slopes, "alibi_slopes"),
        _seed(seed, dropout_p, required=True),
    )
    return _backward(_array(dout, "dout"), q, k, v, out, softmax_lse, m, _is_bf16(q))


def flash_attn_varlen_backward(
    dout,
    q,
    k,
    v,
    out,
    softmax_lse,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    *,
    seed=None,
):
    """flashattn.flash_attn_varlen_backward for tensors: the gradients (dq, dk, dv) of
    flash_attn_varlen_func, as new tensors of q's dtype. out and softmax_lse (heads_q, total_q) as
    flash_attn_varlen_func(..., return_attn_probs=True) returned them, the forward call's seed when
    dropout_p > 0. Not recorded by autograd."""
    del deterministic
    _same_dtype(q, k=k, v=v, out=out, dout=dout)
    m = _modifiers(
        dropout_p,
        softmax_scale,
        causal,
        window_size,
        softcap,
        _side_array(alibi_slopes, "alibi_slopes"),
        _seed(seed, dropout_p, required=True),
    )
    return _varlen_backward(
        _array(dout, "dout"),
        q,
        k,
        v,
        out,
        softmax_lse,
        _int32(_side_array(cu_seqlens_q, "cu_seqlens_q"), "cu_seqlens_q", 1),
        _int32(_side_array(cu_seqlens_k, "cu_seqlens_k"), "cu_seqlens_k", 1),
        operator.index(max_seqlen_q),
        operator.index(max_seqlen_k),
        m,
        _is_bf16(q),
    )


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """flashattn.flash_attn_with_kvcache for tensors: k_cache and v_cache are updated in place; no
    gradient."""
    bf16 = _is_bf16(q)
    if isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = _side_array(cache_seqlens, "cache_seqlens")
    with torch.no_grad():
        result = _kvcache(
            _array(q, "q"),
            _array(k_cache, "k_cache"),
            _array(v_cache, "v_cache"),
            _array(k, "k"),
            _array(v, "v"),
            _side_array(rotary_cos, "rotary_cos"),
            _side_array(rotary_sin, "rotary_sin"),
            cache_seqlens,
            _side_array(block_table, "block_table"),
            softmax_scale,
            causal,
            window_size,
            softcap,
            rotary_interleaved,
            _side_array(alibi_slopes, "alibi_slopes"),
            num_splits,
            bf16,
        )
    out, lse = _tensor(result[0], bf16), result[1]
    return (out, torch.from_numpy(lse)) if return_softmax_lse else out


def merge_attention_states(outs, lses):
    """flashattn.merge_attention_states for tensors (no gradient): returns (out, lse)."""
    outs, lses = list(outs), list(lses)
    if not outs or len(outs) != len(lses):
        raise ValueError(
            f"outs and lses must be non-empty lists of the same length, got {len(outs)} and {len(lses)}"
        )
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor) or o.dtype != outs[0].dtype:
            raise TypeError(f"outs[{i}] must be a tensor of outs[0]'s dtype {outs[0].dtype}")
    bf16 = outs[0].dtype == torch.bfloat16
    with torch.no_grad():
        o_partials = torch.stack([o.float() for o in outs]).contiguous().numpy()
        lse_partials = torch.stack([lse.float() for lse in lses]).contiguous().numpy()
    out, lse = _core.merge(o_partials, lse_partials, _array(outs[0], "outs"), bf16=bf16)
    return _tensor(out, bf16), torch.from_numpy(lse)


class ScaledDotProductAttentionFunc(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, mask, dropout_p, is_causal, scale, enable_gqa, seed):
        bf16 = _is_bf16(query)
        out, lse = _core.sdpa_forward(
            _array(query, "query"),
            _array(key, "key"),
            _array(value, "value"),
            mask,
            dropout_p,
            is_causal,
            scale,
            enable_gqa,
            seed,
            bf16=bf16,
        )
        out, lse = _tensor(out, bf16), torch.from_numpy(lse)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.rest = (mask, dropout_p, is_causal, scale, enable_gqa, seed)
        ctx.bf16 = bf16
        return out

    @staticmethod
    def backward(ctx, dout):
        query, key, value, out, lse = ctx.saved_tensors
        dq, dk, dv = _core.sdpa_backward(
            _grad_array(dout, "dout"),
            _array(query, "query"),
            _array(key, "key"),
            _array(value, "value"),
            _array(out, "out"),
            _array(lse, "lse"),
            *ctx.rest,
            bf16=ctx.bf16,
        )
        return (_tensor(dq, ctx.bf16), _tensor(dk, ctx.bf16), _tensor(dv, ctx.bf16)) + (None,) * 6


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    *,
    seed=None,
):
    """flashattn.scaled_dot_product_attention (PyTorch's semantics) for tensors, differentiable in query, key
    and value; attn_mask is a bool or float tensor broadcastable to (batch, heads, L, S)."""
    if attn_mask is not None and is_causal:
        raise ValueError(
            "attn_mask and is_causal cannot both be set (PyTorch's rule); fold the causal mask "
            "into attn_mask"
        )
    for name, x in (("query", query), ("key", key)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a 4-dimensional tensor (batch, heads, seqlen, dim)")
    mask = None
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor, got {type(attn_mask).__name__}")
        attn_mask = attn_mask.detach()
        if attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.float()
        mask = _sdpa_mask(attn_mask.numpy(), (query.shape[0], query.shape[1], query.shape[2], key.shape[2]))
    return ScaledDotProductAttentionFunc.apply(
        query,
        key,
        value,
        mask,
        float(dropout_p),
        bool(is_causal),
        None if scale is None else float(scale),
        bool(enable_gqa),
        _seed(seed, dropout_p),
    )
