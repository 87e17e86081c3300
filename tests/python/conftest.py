"""pytest set-up for the Python package's tests: each file is marked `numpy` or `torch` (test_torch_*.py), so
that CTest runs the two halves as separate tests (tests/python.cmake), and `rng` gives each test its own
seeded generator."""

import os
import zlib
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reference.py


def pytest_configure(config):
    config.addinivalue_line("markers", "numpy: tests of the NumPy API")
    config.addinivalue_line("markers", "torch: tests of flashattn.torch (need python3-torch)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        part = "torch" if os.path.basename(str(item.fspath)).startswith("test_torch") else "numpy"
        item.add_marker(getattr(pytest.mark, part))


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))
