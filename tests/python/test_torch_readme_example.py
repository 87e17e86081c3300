"""The README's PyTorch example: its fenced block is python/examples/train_attention_layer.py verbatim, and
running it trains the attention layer (the loss falls). Fails, not skips, without torch
(test_torch_autograd.py says why)."""

import os
import re
import subprocess
import sys

import torch  # noqa: F401  (the example needs it: fail here, at collection, when it is missing)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLE = os.path.join(ROOT, "python", "examples", "train_attention_layer.py")


def test_readme_shows_the_example_verbatim():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = re.search(
        r"<!-- python-example:begin -->\n```python\n(.*?)```\n<!-- python-example:end -->", readme, re.DOTALL
    )
    assert block, "README.md has no python-example block"
    assert block.group(1) == open(EXAMPLE, encoding="utf-8").read()


def test_example_trains_the_layer():
    run = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, check=True, timeout=300)
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", run.stdout)]
    assert len(losses) == 5, run.stdout
    assert all(b < a for a, b in zip(losses, losses[1:])), run.stdout
    assert losses[-1] < 0.7 * losses[0], run.stdout
