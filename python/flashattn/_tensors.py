"""torch.Tensor to NumPy and back for flashattn.torch: tensors reach flashattn._core as NumPy views of their
memory (bfloat16 as int16), and its new arrays come back as tensors without copies. Imports torch, so only
flashattn.torch imports it."""

import torch

from . import _arguments
from ._core import Error


def torch_seed():
    """A dropout seed drawn from torch's default generator (torch.manual_seed reproduces it): one
    torch.empty((), dtype=torch.int64).random_(-2**63, None) draw, taken as an unsigned 64-bit integer."""
    return int(torch.empty((), dtype=torch.int64).random_(-(2**63), None)) % (1 << 64)


def array(tensor, name):
    """A NumPy view of a CPU tensor (bfloat16 as int16), sharing its memory; None stays None."""
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise Error(f"{name} must be on the CPU, got device {tensor.device}")
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    try:
        return tensor.numpy()
    except TypeError:
        raise TypeError(f"{name} must have dtype float32, float16 or bfloat16, got {tensor.dtype}") from None


def arrays(**tensors):
    """array() of each keyword's tensor, named by its keyword, in order."""
    return [array(tensor, name) for name, tensor in tensors.items()]


def side_array(tensor, name):
    """A small side input (slopes, tables, indices) as NumPy, bfloat16 converted to float32; anything but a
    tensor is returned as it is."""
    if isinstance(tensor, torch.Tensor):
        tensor = tensor.detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return array(tensor, name)
    return tensor


def convert(call, arrays=(), side_arrays=()):
    """Replaces the named tensors of a public function's call (its bound arguments) by their NumPy forms:
    array() of each of `arrays`, side_array() of each of `side_arrays`."""
    for name in arrays:
        setattr(call, name, array(getattr(call, name), name))
    for name in side_arrays:
        setattr(call, name, side_array(getattr(call, name), name))


def tensor(ndarray, bf16=False):
    """A tensor sharing the memory of a NumPy array (an int16 one viewed as bfloat16 when bf16); None stays
    None."""
    if ndarray is None:
        return None
    result = torch.from_numpy(ndarray)
    return result.view(torch.bfloat16) if bf16 else result


def grad_array(grad, name):
    """An incoming gradient as NumPy; autograd may hand in broadcast views, whose last dimension is made
    contiguous here (a copy)."""
    if grad.stride(-1) != 1 and grad.size(-1) > 1:
        grad = grad.contiguous()
    return array(grad, name)


def is_bf16(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16


def check_same_dtype(q, **tensors):
    """TypeError naming the first tensor whose dtype differs from q's (bfloat16 would otherwise reach the
    library as an int16 array and be reported as int16)."""
    for name, t in tensors.items():
        if isinstance(q, torch.Tensor) and isinstance(t, torch.Tensor) and t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has dtype {q.dtype}; they must agree")


def sdpa_mask(call):
    """A scaled_dot_product_attention call's attn_mask tensor as a NumPy array broadcast to (batch, heads, L,
    S), after the checks of the mask and the ranks; bool stays bool, other dtypes become float32."""
    query, key, attn_mask = call.query, call.key, call.attn_mask
    _arguments.reject_mask_with_causal(attn_mask, call.is_causal)
    for name, x in (("query", query), ("key", key)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise Error(f"{name} must be a 4-dimensional tensor (batch, heads, seqlen, dim)")
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor, got {type(attn_mask).__name__}")
    attn_mask = attn_mask.detach()
    if attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.float()
    shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    return _arguments.broadcast_mask(attn_mask.numpy(), shape)


def merge_partials(outs, lses):
    """merge_attention_states' tensor partials checked and stacked into the float32 arrays _core.merge
    takes, with outs[0] as NumPy (the result's dtype) and whether that dtype is bfloat16."""
    outs, lses = list(outs), list(lses)
    if not outs or len(outs) != len(lses):
        raise Error(
            f"outs and lses must be non-empty lists of the same length, got {len(outs)} and {len(lses)}"
        )
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor) or o.dtype != outs[0].dtype:
            raise TypeError(f"outs[{i}] must be a tensor of outs[0]'s dtype {outs[0].dtype}")
    with torch.no_grad():
        o_partials = torch.stack([o.float() for o in outs]).contiguous().numpy()
        lse_partials = torch.stack([lse.float() for lse in lses]).contiguous().numpy()
    return o_partials, lse_partials, array(outs[0], "outs"), outs[0].dtype == torch.bfloat16
