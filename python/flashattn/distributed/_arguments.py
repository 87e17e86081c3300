"""The keyword arguments of the distributed calls, checked and converted on each rank (inside the collective
check, see _agreement.py), for NumPy arrays and torch tensors alike: both have .shape and .dtype."""

import operator
import zlib
from typing import NamedTuple

import numpy as np

from .. import _arguments as _kernel_arguments
from .._core import Error
from . import _layout


class Modifiers(NamedTuple):
    """flash_attn_func's keywords, checked. alibi_slopes, sinks: float32 NumPy arrays or None; seed: None
    until the ranks agree on one."""

    softmax_scale: object
    causal: bool
    window: tuple
    softcap: float
    alibi_slopes: object
    dropout_p: float
    seed: object
    sinks: object = None

    @property
    def band(self):
        return _layout.Band.of(self.causal, self.window)

    def keywords(self):
        """The keywords of flashattn's single-process functions."""
        return dict(
            dropout_p=self.dropout_p,
            softmax_scale=self.softmax_scale,
            causal=self.causal,
            window_size=self.window,
            softcap=self.softcap,
            alibi_slopes=self.alibi_slopes,
            sinks=self.sinks,
        )


def check_seed(value, dropout_p=0.0, required=False):
    """A given seed as an int in [0, 2**64), or None (required: the forward call's seed when dropout_p > 0):
    None lets the ranks agree on one drawn by rank 0."""
    if value is None and not (required and dropout_p > 0):
        return None
    return _kernel_arguments.dropout_seed(value, dropout_p, required)


def check_timeout(seconds):
    seconds = float(seconds)
    if not seconds > 0:
        raise Error(f"timeout must be a positive number of seconds, got {seconds}")
    return seconds


def slopes_of(alibi_slopes, batch, heads_q):
    """alibi_slopes (a NumPy array, tensor or sequence) as a C-contiguous float32 NumPy array, or None."""
    if alibi_slopes is None:
        return None
    if hasattr(alibi_slopes, "detach"):  # a torch.Tensor
        alibi_slopes = alibi_slopes.detach().float().numpy()
    array = _kernel_arguments.float32(alibi_slopes, "alibi_slopes")
    if array.shape not in ((heads_q,), (batch, heads_q)):
        raise Error(
            f"alibi_slopes must have shape (heads_q,) = ({heads_q},) or (batch, heads_q) = ({batch}, "
            f"{heads_q}), got {array.shape}"
        )
    return array


def sinks_of(sinks, heads_q):
    """The attention sinks (a NumPy array, tensor or sequence) as a C-contiguous float32 (heads_q,) NumPy
    array of finite or -inf values (the library's rule, checked here so that the rank that has a bad value
    is the one named), or None."""
    if sinks is None:
        return None
    if hasattr(sinks, "detach"):  # a torch.Tensor
        sinks = sinks.detach().float().numpy()
    array = _kernel_arguments.sinks(sinks)
    if array.shape != (heads_q,):
        raise Error(f"sinks must have shape (heads_q,) = ({heads_q},), got {array.shape}")
    bad = np.flatnonzero(np.isnan(array) | (array == np.inf))
    if bad.size:
        raise Error(f"sinks must be finite or -inf, got {array[bad[0]]} at head {bad[0]}")
    return array


def digest(array):
    """An array's shape, dtype and a checksum of its values: what ranks compare instead of the values."""
    array = np.ascontiguousarray(array)
    return f"shape {array.shape}, {array.dtype}, crc32 {zlib.crc32(array.tobytes()):#010x}"


MODIFIERS = ("dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes", "seed", "sinks")


def modifier_keywords(arguments):
    """The keywords shared by the ring functions, picked from a call's arguments (its locals())."""
    return {name: arguments[name] for name in MODIFIERS}


def modifiers(batch, heads_q, *, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, seed,
              sinks=None):
    dropout_p = float(dropout_p)
    return Modifiers(
        softmax_scale=None if softmax_scale is None else float(softmax_scale),
        causal=bool(causal),
        window=_kernel_arguments.window(window_size),
        softcap=float(softcap),
        alibi_slopes=slopes_of(alibi_slopes, batch, heads_q),
        dropout_p=dropout_p,
        seed=check_seed(seed),
        sinks=sinks_of(sinks, heads_q),
    )


class Packing(NamedTuple):
    """decode_with_kvcache's queries: packed ones (cu_seqlens_q int32 (batch + 1,) and max_seqlen_q) or, with
    cu_seqlens_q None, (batch, seqlen_q, heads_q, head_dim) ones."""

    cu_seqlens_q: object
    max_seqlen_q: int
    batch: int
    heads_q: int

    @property
    def packed(self):
        return self.cu_seqlens_q is not None

    def describe(self):
        """What the ranks must agree on (the params of _agreement.agree)."""
        if not self.packed:
            return dict(cu_seqlens_q=None, max_seqlen_q=None)
        return dict(cu_seqlens_q=digest(self.cu_seqlens_q), max_seqlen_q=self.max_seqlen_q)


def packing(q, cu_seqlens_q, max_seqlen_q):
    """The Packing of a decode call's q (a NumPy array or tensor) and its cu_seqlens_q (an integer array or tensor,
    or None): packed q is (total_q, heads_q, head_dim) as in flash_attn_varlen_func; max_seqlen_q None means the
    longest sequence's rows."""
    if cu_seqlens_q is None:
        if max_seqlen_q is not None:
            raise Error("max_seqlen_q applies to packed queries: give cu_seqlens_q too")
        if len(q.shape) != 4:
            raise Error(f"q must have 4 dimensions (batch, seqlen_q, heads_q, head_dim), got shape {tuple(q.shape)}")
        return Packing(None, 0, q.shape[0], q.shape[2])
    if len(q.shape) != 3:
        raise Error(
            f"q must have 3 dimensions (total_q, heads_q, head_dim) with cu_seqlens_q, got shape {tuple(q.shape)}"
        )
    if hasattr(cu_seqlens_q, "detach"):  # a torch.Tensor
        cu_seqlens_q = cu_seqlens_q.detach().cpu().numpy()
    cu = _kernel_arguments.int32(cu_seqlens_q, "cu_seqlens_q", 1)
    if cu.size == 0:
        raise Error("cu_seqlens_q must have batch + 1 entries, got none")
    if max_seqlen_q is None:
        max_seqlen_q = int(np.diff(cu).max(initial=0))
    return Packing(cu, operator.index(max_seqlen_q), cu.size - 1, q.shape[1])


def check_shards(q, k, v):
    """q (batch, L, Hq, d), k (batch, L, Hkv, d), v (batch, L, Hkv, dv): one L, Hkv dividing Hq."""
    if tuple(k.shape[:2]) != tuple(q.shape[:2]) or k.shape[3] != q.shape[3]:
        raise Error(
            f"k (batch, seqlen_local, heads_kv, head_dim) = {tuple(k.shape)} must match q's batch, "
            f"seqlen_local and head_dim: q has shape {tuple(q.shape)}"
        )
    if tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise Error(
            f"v (batch, seqlen_local, heads_kv, head_dim_v) = {tuple(v.shape)} must match k's first three "
            f"dimensions {tuple(k.shape[:3])}"
        )
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] != 0:
        raise Error(f"heads_kv = {k.shape[2]} must divide heads_q = {q.shape[2]}")


def check_outputs(q, v, out, dout, lse):
    """The forward call's out (batch, L, Hq, dv) and softmax_lse (batch, Hq, L), and dout like out."""
    expected = tuple(q.shape[:3]) + (v.shape[3],)
    for name, x in (("out", out), ("dout", dout)):
        if tuple(x.shape) != expected:
            raise Error(f"{name} must have shape (batch, seqlen_local, heads_q, head_dim_v) = {expected}, "
                             f"got {tuple(x.shape)}")
    expected = (q.shape[0], q.shape[2], q.shape[1])
    if tuple(lse.shape) != expected:
        raise Error(f"softmax_lse must have shape (batch, heads_q, seqlen_local) = {expected}, got "
                         f"{tuple(lse.shape)}")


def describe(q, k, v, layout, m, **more):
    """What the ranks of a ring call must agree on (compared by _agreement.agree)."""
    return dict(
        layout=_layout.check_layout(layout),
        dtype=str(q.dtype),
        batch=q.shape[0],
        heads_q=q.shape[2],
        heads_kv=k.shape[2],
        head_dim=q.shape[3],
        head_dim_v=v.shape[3],
        causal=m.causal,
        window_size=m.window,
        softcap=m.softcap,
        softmax_scale=m.softmax_scale,
        alibi_slopes=None if m.alibi_slopes is None else digest(m.alibi_slopes),
        sinks=None if m.sinks is None else digest(m.sinks),
        dropout_p=m.dropout_p,
        seed=m.seed,
        **more,
    )
