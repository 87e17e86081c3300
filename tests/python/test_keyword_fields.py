"""Each parameter of flashattn's functions reaches the C++ field it sets, and nothing else
(keyword_fields.py: the table, and the echo of the parameters that checks it)."""

import pytest

import flashattn
import keyword_fields


@pytest.mark.parametrize("name", sorted(keyword_fields.SPECS))
def test_every_parameter_reaches_its_field(name, rng):
    keyword_fields.check(flashattn, name, keyword_fields.NumpyArrays(rng))


def test_every_function_has_a_table():
    keyword_fields.check_every_function_listed(flashattn)
