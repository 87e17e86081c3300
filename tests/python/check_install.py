"""Run by run_install.cmake in isolated mode (python3 -I check_install.py SITE BUILD_DIR): imports the
flashattn package installed into the staged site-packages directory SITE, checks that it is that copy that
was imported (not the build tree's, not one already installed elsewhere) and makes one small call through
each module against a NumPy computation of softmax(q kᵀ/√d) v."""

import os
import site
import sys

staged, build_dir = sys.argv[1], sys.argv[2]
assert not any(p.startswith(build_dir) for p in sys.path), f"the build tree is on sys.path: {sys.path}"
# As the interpreter treats its own site-packages (.pth files included), but ahead of them: a copy that
# `bash scripts/demo.sh` installed into the system site-packages must not shadow the staged one.
before = list(sys.path)
site.addsitedir(staged)
sys.path[:] = [p for p in sys.path if p not in before] + before

import numpy as np  # noqa: E402

import flashattn  # noqa: E402
import flashattn.torch as fat  # noqa: E402
import torch  # noqa: E402

for module in (flashattn, flashattn._core, fat):
    assert module.__file__.startswith(staged + "/flashattn/"), f"{module.__name__} from {module.__file__}"

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 5, 2, 8)).astype(np.float32) for _ in range(3))
out = flashattn.flash_attn_func(q, k, v)
scores = np.einsum("bihc,bjhc->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8)
p = np.exp(scores - scores.max(axis=-1, keepdims=True))
expected = np.einsum("bhij,bjhc->bihc", p / p.sum(axis=-1, keepdims=True), v.astype(np.float64))
error = np.abs(out - expected).max()
assert error < 1e-5, f"flash_attn_func differs from NumPy by {error}"
tensors = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
out_t = fat.flash_attn_func(*tensors)
out_t.sum().backward()
assert torch.equal(out_t.detach(), torch.from_numpy(out)) and tensors[0].grad.shape == (1, 5, 2, 8)
if os.path.exists(os.path.join(os.path.dirname(flashattn.__file__), "distributed")):
    from mpi4py import MPI

    import flashattn.distributed as fd

    assert fd.__file__.startswith(staged + "/flashattn/"), f"flashattn.distributed from {fd.__file__}"
    assert np.abs(fd.ring_flash_attn_func(q, k, v, comm=MPI.COMM_SELF) - out).max() < 1e-6
print(f"flashattn imported from {flashattn.__file__}; one call each through NumPy and torch: ok")
