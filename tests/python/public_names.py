"""What test_public_names.py and test_torch_public_names.py check of a public module of the package."""

import inspect
import types

# flash-attn's functions and PyTorch's scaled_dot_product_attention: flashattn and flashattn.torch both
# offer exactly these.
PUBLIC_FUNCTIONS = {
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "flash_attn_backward",
    "flash_attn_varlen_backward",
    "merge_attention_states",
    "scaled_dot_product_attention",
}


def is_package_module(module, name):
    """Whether module.name is one of the package's own modules (flashattn._core, flashattn.torch, ...)."""
    value = getattr(module, name)
    return isinstance(value, types.ModuleType) and value.__name__ == f"flashattn.{name}"


def check_public_module(module):
    """dir(module) holds the public functions, dunder names and the package's modules, nothing else: no
    imported third-party module (numpy, torch, os, operator), no helper, no class. The public functions are
    defined in the module itself and listed in __all__."""
    assert set(module.__all__) == PUBLIC_FUNCTIONS
    assert len(module.__all__) == len(PUBLIC_FUNCTIONS)
    others = [
        name
        for name in dir(module)
        if not (name.startswith("__") and name.endswith("__"))
        and name not in PUBLIC_FUNCTIONS
        and not is_package_module(module, name)
    ]
    assert others == [], f"{module.__name__} exposes names that are not public functions: {others}"
    for name in PUBLIC_FUNCTIONS:
        function = getattr(module, name)
        assert inspect.isfunction(function) and function.__module__ == module.__name__, name
        assert function.__doc__, f"{module.__name__}.{name} has no docstring"
    namespace = {}
    exec(f"from {module.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC_FUNCTIONS
