"""Each parameter of flashattn.torch's functions reaches the C++ field it sets, and nothing else
(keyword_fields.py), with tensors passed to the library without copies."""

import pytest
import torch

import flashattn.torch
import keyword_fields


class TorchArrays:
    torch = True

    def __init__(self, seed):
        self.generator = torch.Generator().manual_seed(seed)

    def float32(self, *shape):
        return torch.randn(shape, generator=self.generator)

    def int8(self, *shape):
        return torch.randint(-127, 128, shape, generator=self.generator, dtype=torch.int8)

    def uint8(self, *shape):
        return torch.randint(0, 120, shape, generator=self.generator, dtype=torch.uint8)

    def bool(self, *shape):
        return torch.rand(shape, generator=self.generator) < 0.5

    def int32(self, values):
        return torch.tensor(values, dtype=torch.int32)

    @staticmethod
    def address(tensor):
        return tensor.data_ptr()


@pytest.mark.parametrize("name", sorted(keyword_fields.SPECS))
def test_every_parameter_reaches_its_field(name):
    keyword_fields.check(flashattn.torch, name, TorchArrays(len(name)))


def test_every_function_has_a_table():
    keyword_fields.check_every_function_listed(flashattn.torch)
