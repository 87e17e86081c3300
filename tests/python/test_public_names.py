"""flashattn's public surface: dir(flashattn) holds the public functions only (besides dunder names and the
package's modules); its helpers live in private modules. And flashattn._core takes every argument after
the arrays by keyword only (all of them, in a function without arrays)."""

import re

import flashattn
import flashattn._core
from public_names import check_public_module


def test_flashattn_holds_only_public_functions():
    check_public_module(flashattn)


def test_helper_modules_are_private():
    modules = [name for name in dir(flashattn) if not name.startswith("__") and name not in flashattn.__all__]
    assert modules, "flashattn imports no module of its own"
    # The public modules are the package itself and flashattn.torch (which only exists once imported).
    assert all(name.startswith("_") or name == "torch" for name in modules), modules


def test_core_functions_take_their_options_by_keyword():
    functions = [f for f in vars(flashattn._core).values() if callable(f) and not isinstance(f, type)]
    assert functions
    for function in functions:
        signature = function.__doc__.splitlines()[0]
        if re.fullmatch(r"\w+\((\*, .*)?\) -> .*", signature):
            continue  # no arrays: no argument, or every one by keyword
        arrays, star, _ = signature.partition(", *, ")
        assert star, f"_core.{function.__name__} has positional options: {signature}"
        assert re.fullmatch(r"\w+\((\w+: handle, )*\w+: handle", arrays), signature
