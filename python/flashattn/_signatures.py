"""The public functions' parameter lists, written once for flashattn and flashattn.torch, and the decorator
that gives a function one of them.

A public function is written as ``def flash_attn_func(call)`` under ``@takes(FLASH_ATTN_FUNC)``: its callers
see flash-attn's or PyTorch's parameters (names, order, defaults; help() and inspect.signature show them),
and the function receives the call's arguments bound to them, defaults filled in, as one object with an
attribute per parameter (``call.q``, ``call.dropout_p``). The keywords several functions share are listed
once, so that a keyword is added to every function that takes it in one place."""

import functools
import inspect
import types

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


def _signature(required, optional=None, keyword_only=None):
    """required: the names without a default; optional: {name: default} of the parameters that may also be
    given by position; keyword_only: {name: default} of those after the ``*``."""
    parameters = [inspect.Parameter(name, _POSITIONAL) for name in required]
    parameters += [inspect.Parameter(n, _POSITIONAL, default=d) for n, d in (optional or {}).items()]
    parameters += [inspect.Parameter(n, _KEYWORD_ONLY, default=d) for n, d in (keyword_only or {}).items()]
    return inspect.Signature(parameters)


# The scores' scale, band and cap, in flash-attn's order, with its defaults.
_SCORES = {"softmax_scale": None, "causal": False, "window_size": (-1, -1), "softcap": 0.0}
# The keywords of flash_attn_func, flash_attn_varlen_func and their backward functions after the arrays;
# deterministic is accepted for compatibility (every pass is deterministic).
_MODIFIERS = {"dropout_p": 0.0, **_SCORES, "alibi_slopes": None, "deterministic": False}
_FORWARD_KEYWORDS = _MODIFIERS | {"return_attn_probs": False}
_SEED = {"seed": None}
_FORWARD_ARRAYS = ("q", "k", "v")
_BACKWARD_ARRAYS = ("dout", "q", "k", "v", "out", "softmax_lse")
_PACKED_SEQUENCES = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")

FLASH_ATTN_FUNC = _signature(_FORWARD_ARRAYS, _FORWARD_KEYWORDS, _SEED)
FLASH_ATTN_VARLEN_FUNC = _signature((*_FORWARD_ARRAYS, *_PACKED_SEQUENCES), _FORWARD_KEYWORDS, _SEED)
FLASH_ATTN_BACKWARD = _signature(_BACKWARD_ARRAYS, _MODIFIERS, _SEED)
FLASH_ATTN_VARLEN_BACKWARD = _signature((*_BACKWARD_ARRAYS, *_PACKED_SEQUENCES), _MODIFIERS, _SEED)
FLASH_ATTN_WITH_KVCACHE = _signature(
    ("q", "k_cache", "v_cache"),
    {
        "k": None,
        "v": None,
        "rotary_cos": None,
        "rotary_sin": None,
        "cache_seqlens": None,
        "block_table": None,
        **_SCORES,
        "rotary_interleaved": True,
        "alibi_slopes": None,
        "num_splits": 0,
        "return_softmax_lse": False,
    },
)
SCALED_DOT_PRODUCT_ATTENTION = _signature(
    ("query", "key", "value"),
    {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False},
    _SEED,
)


def takes(signature):
    """Decorator: the public function of `signature` that runs the decorated function(call) on the call's
    bound arguments. Arguments that do not fit the signature are a TypeError naming the function."""

    def decorate(function):
        @functools.wraps(function)
        def public(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as error:
                raise TypeError(f"{function.__name__}(): {error}") from None
            bound.apply_defaults()
            return function(types.SimpleNamespace(**bound.arguments))

        public.__signature__ = signature
        return public

    return decorate
