"""flashattn.torch's autograd Functions, and the library's backward pass on tensors that both their
backward methods (loss.backward()) and flashattn.torch's flash_attn_backward functions run. Imports torch,
so only flashattn.torch imports it."""

import torch

from . import _arguments, _block_mask, _core, _tensors


def backward(dout, q, k, v, out, lse, *, modifiers, bf16, sequences=None):
    """The library's backward pass on tensors (dout as NumPy already): new (dq, dk, dv) tensors, and the
    float32 dsinks when the modifiers have sinks. sequences: for a varlen call, the keywords of
    flashattn._arguments.packed_sequences."""
    arrays = _tensors.arrays(q=q, k=k, v=v, out=out, softmax_lse=lse)
    if sequences is None:
        grads = _core.backward(dout, *arrays, modifiers=modifiers, bf16=bf16)
    else:
        grads = _core.varlen_backward(dout, *arrays, **sequences, modifiers=modifiers, bf16=bf16)
    return tuple(_tensors.tensor(g, bf16) for g in grads[:3]) + tuple(_tensors.tensor(g) for g in grads[3:])


def sink_dtype(sinks):
    """The dtype of a differentiable sinks tensor, or None (no sinks, or not a tensor)."""
    return sinks.dtype if isinstance(sinks, torch.Tensor) else None


def sink_gradient(grads, dtype):
    """The gradient autograd hands to the sinks tensor (of its dtype), or None."""
    return grads[3].to(dtype) if dtype is not None else None


def direct_backward(call, varlen=False):
    """A flash_attn_backward (or, varlen, flash_attn_varlen_backward) call on tensors, its bound arguments:
    the gradients as new tensors of q's dtype, outside autograd."""
    _tensors.check_same_dtype(call.q, k=call.k, v=call.v, out=call.out, dout=call.dout)
    packed = ("cu_seqlens_q", "cu_seqlens_k") if varlen else ()
    _tensors.convert(call, side_arrays=("alibi_slopes", "sinks", *packed))
    modifiers = _arguments.modifiers(call, seed_required=True)
    if not varlen:
        _block_mask.apply(call, modifiers)
    dout = _tensors.array(call.dout, "dout")
    sequences = _arguments.packed_sequences(call) if varlen else None
    arrays = (call.q, call.k, call.v, call.out, call.softmax_lse)
    return backward(dout, *arrays, modifiers=modifiers, bf16=_tensors.is_bf16(call.q), sequences=sequences)


def selected_keys_forward(call, m, probs):
    """flashattn.torch.flash_attn_func over selected keys (its bound arguments, the side arrays as NumPy; m its
    modifiers): outside autograd, there being no backward pass to record, so refused when autograd would record
    it."""
    recorded = [name for name in ("q", "k", "v") if getattr(getattr(call, name), "requires_grad", False)]
    if recorded and torch.is_grad_enabled():
        raise _core.Error(
            f"key_indices (attention over selected keys) has no backward pass, but {', '.join(recorded)} "
            "requires grad: call it under torch.no_grad() or torch.inference_mode()"
        )
    bf16 = _tensors.is_bf16(call.q)
    out, lse, _ = _core.forward(
        *_tensors.arrays(q=call.q, k=call.k, v=call.v), modifiers=m, return_lse=True, return_dropout_mask=False,
        bf16=bf16, key_indices=_arguments.key_indices(call.key_indices, 4),
    )
    out = _tensors.tensor(out, bf16)
    return (out, _tensors.tensor(lse), None) if probs else out


class FlashAttnFunc(torch.autograd.Function):
    """sinks: the tensor whose float32 copy modifiers.sinks holds (differentiable), or None."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, modifiers, return_dropout_mask):
        bf16 = _tensors.is_bf16(q)
        out, lse, keep = _core.forward(
            *_tensors.arrays(q=q, k=k, v=v),
            modifiers=modifiers,
            return_lse=True,
            return_dropout_mask=return_dropout_mask,
            bf16=bf16,
        )
        out, lse = _tensors.tensor(out, bf16), _tensors.tensor(lse)
        keep = _tensors.tensor(keep) if keep is not None else torch.empty(0, dtype=torch.bool)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.modifiers, ctx.bf16, ctx.sinks_dtype = modifiers, bf16, sink_dtype(sinks)
        ctx.mark_non_differentiable(lse, keep)
        return out, lse, keep

    @staticmethod
    def backward(ctx, dout, _dlse, _dkeep):
        q, k, v, out, lse = ctx.saved_tensors
        grads = backward(
            _tensors.grad_array(dout, "dout"), q, k, v, out, lse, modifiers=ctx.modifiers, bf16=ctx.bf16
        )
        return grads[:3] + (sink_gradient(grads, ctx.sinks_dtype), None, None)


class FlashAttnVarlenFunc(torch.autograd.Function):
    """The third output: the per-sequence dropout keep masks (a list of bool tensors, outside autograd) when
    return_dropout_mask and dropout_p > 0, else None."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, sequences, modifiers, return_dropout_mask):
        bf16 = _tensors.is_bf16(q)
        out, lse, keep = _core.varlen_forward(
            *_tensors.arrays(q=q, k=k, v=v),
            **sequences,
            modifiers=modifiers,
            return_dropout_mask=return_dropout_mask,
            bf16=bf16,
        )
        out, lse = _tensors.tensor(out, bf16), _tensors.tensor(lse)
        masks = None if keep is None else [_tensors.tensor(mask) for mask in keep]
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.sequences, ctx.modifiers, ctx.bf16 = sequences, modifiers, bf16
        ctx.sinks_dtype = sink_dtype(sinks)
        ctx.mark_non_differentiable(lse)
        return out, lse, masks

    @staticmethod
    def backward(ctx, dout, _dlse, _dmasks):
        q, k, v, out, lse = ctx.saved_tensors
        grads = backward(
            _tensors.grad_array(dout, "dout"),
            q,
            k,
            v,
            out,
            lse,
            modifiers=ctx.modifiers,
            bf16=ctx.bf16,
            sequences=ctx.sequences,
        )
        return grads[:3] + (sink_gradient(grads, ctx.sinks_dtype), None, None, None)


class ScaledDotProductAttentionFunc(torch.autograd.Function):
    """options: the keywords of flashattn._arguments.sdpa_options (the mask broadcast to NumPy already)."""

    @staticmethod
    def forward(ctx, query, key, value, options):
        bf16 = _tensors.is_bf16(query)
        arrays = _tensors.arrays(query=query, key=key, value=value)
        out, lse = _core.sdpa_forward(*arrays, **options, bf16=bf16)
        out, lse = _tensors.tensor(out, bf16), _tensors.tensor(lse)
        ctx.save_for_backward(query, key, value, out, lse)
        ctx.options, ctx.bf16 = options, bf16
        return out

    @staticmethod
    def backward(ctx, dout):
        query, key, value, out, lse = ctx.saved_tensors
        grads = _core.sdpa_backward(
            _tensors.grad_array(dout, "dout"),
            *_tensors.arrays(query=query, key=key, value=value, out=out, lse=lse),
            **ctx.options,
            bf16=ctx.bf16,
        )
        return tuple(_tensors.tensor(g, ctx.bf16) for g in grads) + (None,)
