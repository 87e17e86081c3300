"""flashattn.torch's public surface: dir(flashattn.torch) holds the public functions only (besides dunder
names and the package's modules): no torch, no autograd Functions, no helper, nothing imported from the
NumPy module's internals."""

import flashattn.torch
from public_names import check_public_module


def test_flashattn_torch_holds_only_public_functions():
    check_public_module(flashattn.torch)


def test_flashattn_torch_uses_only_private_modules():
    modules = [name for name in dir(flashattn.torch) if not name.startswith("__")]
    modules = [name for name in modules if name not in flashattn.torch.__all__]
    assert modules and all(name.startswith("_") for name in modules), modules
