"""What test_public_names.py and test_torch_public_names.py check of a public module of the package."""

import inspect
import os
import re
import types

import flashattn._core


def documented_signatures():
    """The functions of docs/python.md's "Functions" table, flash-attn's and PyTorch's
    scaled_dot_product_attention, each with its documented parameter list: flashattn and flashattn.torch both
    offer exactly these. A list the table abbreviates ("<same keywords>", "...") is None."""
    path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "python.md")
    with open(path, encoding="utf-8") as docs:
        section = docs.read().split("\n## Functions\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)(\(.*?\))` \|", section, re.MULTILINE)
    signatures = {name: None if "<" in params or "..." in params else params for name, params in rows}
    assert rows and len(signatures) == len(rows), f"docs/python.md's Functions table lists {rows}"
    return signatures


DOCUMENTED_SIGNATURES = documented_signatures()
PUBLIC_FUNCTIONS = set(DOCUMENTED_SIGNATURES)
# The public classes: the exception of every invalid shape or value (docs/python.md, "Errors"), and
# FlexAttention's BlockMask (docs/sparse_attention.md).
PUBLIC_NAMES = PUBLIC_FUNCTIONS | {"Error", "BlockMask"}


def is_package_module(module, name):
    """Whether module.name is one of the package's own modules (flashattn._core, flashattn.torch, ...)."""
    value = getattr(module, name)
    return isinstance(value, types.ModuleType) and value.__name__ == f"flashattn.{name}"


def check_public_module(module):
    """dir(module) holds the public functions, Error, dunder names and the package's modules, nothing else:
    no imported third-party module (numpy, torch, os, operator), no helper, no other class. The public
    functions are defined in the module itself; they and Error are listed in __all__. Error is
    flashattn._core's, a subclass of ValueError and of RuntimeError."""
    assert set(module.__all__) == PUBLIC_NAMES
    assert len(module.__all__) == len(PUBLIC_NAMES)
    others = [
        name
        for name in dir(module)
        if not (name.startswith("__") and name.endswith("__"))
        and name not in PUBLIC_NAMES
        and not is_package_module(module, name)
    ]
    assert others == [], f"{module.__name__} exposes names that are not public functions: {others}"
    error = module.Error
    assert error is flashattn._core.Error and issubclass(error, ValueError) and issubclass(error, RuntimeError)
    assert error.__doc__
    for name in PUBLIC_FUNCTIONS:
        function = getattr(module, name)
        assert inspect.isfunction(function) and function.__module__ == module.__name__, name
        assert function.__doc__, f"{module.__name__}.{name} has no docstring"
        documented = DOCUMENTED_SIGNATURES[name]
        if documented is not None:
            assert str(inspect.signature(function)) == documented, f"{module.__name__}.{name}"
    namespace = {}
    exec(f"from {module.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC_NAMES
