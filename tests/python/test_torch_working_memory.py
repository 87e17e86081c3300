"""flashattn.torch's working memory functions act on the one limit flashattn's do."""

import flashattn
import flashattn.torch


def test_working_memory_limit_is_flashattns():
    default = flashattn.working_memory_limit()
    try:
        flashattn.torch.set_working_memory_limit(1 << 20)
        assert flashattn.working_memory_limit() == flashattn.torch.working_memory_limit() == 1 << 20
        flashattn.torch.release_working_memory()
        assert flashattn.torch.retained_working_memory() == flashattn.retained_working_memory() == 0
    finally:
        flashattn.set_working_memory_limit(default)
