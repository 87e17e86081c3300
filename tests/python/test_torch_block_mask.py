"""flashattn.torch with block masks and document ids: loss.backward() through flash_attn_func uses the forward
call's mask, against PyTorch's autograd of a float64 implementation with the same elements masked densely;
flash_attn_backward gives the same gradients; create_block_mask takes a tensor of document ids."""

import numpy as np
import pytest
import torch

import flashattn.torch as fat
from test_block_mask import dense_keep, random_block_mask


def torch_attention(q, k, v, keep):
    """float64 attention over the bool mask keep (batch, heads_q, nq, nk), rows without keys 0; (b, s, h, d)."""
    q, k, v = (x.transpose(1, 2).double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(~keep, float("-inf"))
    m = s.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(s - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(total > 0, total, torch.ones_like(total))  # a row without keys: 0, and no NaN gradient
    return (p @ v).transpose(1, 2)


def grads(fn, inputs, dout):
    xs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*xs)
    out.backward(dout)
    return [out.detach()] + [x.grad for x in xs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_autograd_uses_the_block_mask(dtype, rng):
    batch, nq, nk, hq, hkv, d = 2, 45, 53, 4, 2, 32
    torch.manual_seed(5)
    q, k, v = torch.randn(batch, nq, hq, d), torch.randn(batch, nk, hkv, d), torch.randn(batch, nk, hkv, d)
    dout = torch.randn(batch, nq, hq, d)
    mask, cls = random_block_mask(rng, batch, hq, nq, nk, 16, 8)
    docs = torch.from_numpy(np.sort(rng.integers(0, 3, size=(batch, nk)), axis=1).astype(np.int32))
    keep = torch.from_numpy(dense_keep(cls, 16, 8, hq, nq, nk, causal=True, docs=docs.numpy()))
    low = [x.to(dtype) for x in (q, k, v)]
    sparse = lambda q, k, v: fat.flash_attn_func(q, k, v, causal=True, block_mask=mask, document_ids=docs)  # noqa
    ours = grads(sparse, low, dout.to(dtype))
    ref = grads(lambda q, k, v: torch_attention(q, k, v, keep), low, dout.double())
    tolerance = 2e-5 if dtype == torch.float32 else 3e-2
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
        torch.testing.assert_close(a.double(), b.double(), atol=tolerance, rtol=tolerance, msg=name)
    out, lse, _ = fat.flash_attn_func(*low, causal=True, block_mask=mask, document_ids=docs, return_attn_probs=True)
    direct = fat.flash_attn_backward(dout.to(dtype), *low, out, lse, causal=True, block_mask=mask, document_ids=docs)
    for name, a, b in zip(("dq", "dk", "dv"), direct, ours[1:]):
        assert torch.equal(a, b), name


def test_create_block_mask_takes_tensors():
    docs = torch.tensor([[0] * 30 + [1] * 34], dtype=torch.int32)
    mask = fat.create_block_mask(64, 64, block_size=(16, 32), causal=True, document_ids=docs)
    assert mask.kv_num_blocks.shape == (1, 1, 4) and mask.BLOCK_SIZE == (16, 32)
    q = torch.randn(1, 64, 2, 16)
    dense = fat.flash_attn_func(q, q, q, causal=True, document_ids=docs)
    sparse = fat.flash_attn_func(q, q, q, causal=True, document_ids=docs, block_mask=mask)
    torch.testing.assert_close(sparse, dense, atol=1e-6, rtol=1e-6)
