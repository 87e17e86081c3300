"""The working memory calling threads keep between calls: flashattn's functions set the limit, report what is
kept, and release it."""

import numpy as np
import pytest

import flashattn


def call(rng):
    q = rng.standard_normal((1, 64, 2, 32)).astype(np.float32)
    flashattn.flash_attn_func(q, q, q)


def test_working_memory_is_kept_up_to_the_limit_and_released(rng):
    default = flashattn.working_memory_limit()
    assert default == 64 << 20
    try:
        flashattn.release_working_memory()
        assert flashattn.retained_working_memory() == 0
        call(rng)
        kept = flashattn.retained_working_memory()
        assert 0 < kept <= default
        flashattn.set_working_memory_limit(0)
        assert flashattn.working_memory_limit() == 0
        assert flashattn.retained_working_memory() == 0
        call(rng)
        assert flashattn.retained_working_memory() == 0
        with pytest.raises(flashattn.Error, match="bytes_per_thread"):
            flashattn.set_working_memory_limit(-1)
        with pytest.raises(TypeError):
            flashattn.set_working_memory_limit(1.5)
    finally:
        flashattn.set_working_memory_limit(default)
        flashattn.release_working_memory()
