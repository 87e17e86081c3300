"""flashattn.distributed and flashattn.distributed.torch expose their public functions only (and dunder
names and the package's own modules), each defined there with a docstring."""

import inspect
import types

import flashattn.distributed
import flashattn.distributed.torch

PUBLIC = {
    flashattn.distributed: {
        "ring_flash_attn_func",
        "ring_flash_attn_backward",
        "decode_with_kvcache",
        "shard_indices",
        "last_ring_timings",
    },
    flashattn.distributed.torch: {"ring_flash_attn_func", "decode_with_kvcache"},
}


def test_public_modules_hold_only_their_functions():
    for module, names in PUBLIC.items():
        assert set(module.__all__) == names
        for name in dir(module):
            value = getattr(module, name)
            own_module = isinstance(value, types.ModuleType) and value.__name__.startswith("flashattn.")
            assert name in names or (name.startswith("__") and name.endswith("__")) or own_module, name
        for name in names:
            function = getattr(module, name)
            assert inspect.isfunction(function) and function.__module__ == module.__name__, name
            assert function.__doc__, name
