"""flashattn.torch with attention sinks: loss.backward() through flash_attn_func and flash_attn_varlen_func
reaches a `sinks` tensor, against PyTorch's autograd of a plain implementation (float64); float32 and
bfloat16 tensors within twice the same-precision computation's error; flash_attn_backward returns dsinks."""

import pytest
import torch

import flashattn.torch as fat
from reference import visible


def torch_sink_attention(q, k, v, sinks, compute, causal=False):
    """softmax over the scores and one sink logit per head (no value), with autograd; (b, s, h, d)."""
    q, k, v = (x.transpose(1, 2).to(compute) for x in (q, k, v))
    b, Hq, Nq, d = q.shape
    Nk, group = k.shape[2], Hq // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    S = (q @ k.transpose(-1, -2)) * d**-0.5
    S = S.masked_fill(~torch.from_numpy(visible(Nq, Nk, causal)), float("-inf"))
    s = sinks.to(compute).reshape(1, Hq, 1, 1).expand(b, Hq, Nq, 1)
    P = torch.softmax(torch.cat([S, s], dim=-1), dim=-1)[..., :Nk]  # the sink's column dropped: no value
    return (P @ v).transpose(1, 2)


def grads(fn, inputs, dout):
    xs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*xs)
    out.backward(dout)
    return [out.detach()] + [x.grad for x in xs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_gradient_reaches_sinks(dtype, causal):
    torch.manual_seed(3)
    q, k, v = torch.randn(2, 21, 4, 40), torch.randn(2, 17, 2, 40), torch.randn(2, 17, 2, 40)
    sinks, dout = torch.tensor([0.5, -1.0, 2.0, 0.0]), torch.randn(2, 21, 4, 40)
    low = [x.to(dtype) for x in (q, k, v)]
    ours = grads(lambda q, k, v, s: fat.flash_attn_func(q, k, v, causal=causal, sinks=s), low + [sinks], dout.to(dtype))
    ref = grads(lambda q, k, v, s: torch_sink_attention(q, k, v, s, torch.float64, causal), low + [sinks], dout.double())
    assert ours[4].dtype == torch.float32 and ours[4].shape == (4,)
    for name, a, r in zip(["o", "dq", "dk", "dv", "dsinks"], ours, ref):
        error = (a.double() - r.double()).abs().max() / r.double().abs().max().clamp_min(1e-12)
        assert error < (2e-5 if dtype == torch.float32 else 3e-2), name


def test_flash_attn_backward_returns_dsinks():
    torch.manual_seed(5)
    q, k, v = torch.randn(1, 9, 2, 16), torch.randn(1, 9, 2, 16), torch.randn(1, 9, 2, 16)
    sinks, dout = torch.tensor([0.25, -0.75]), torch.randn(1, 9, 2, 16)
    out, lse, _ = fat.flash_attn_func(q, k, v, sinks=sinks, return_attn_probs=True)
    dq, dk, dv, dsinks = fat.flash_attn_backward(dout, q, k, v, out, lse, sinks=sinks)
    ref = grads(lambda q, k, v, s: torch_sink_attention(q, k, v, s, torch.float64), [q, k, v, sinks], dout.double())
    torch.testing.assert_close(dsinks.double(), ref[4].double(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dq.double(), ref[1].double(), rtol=1e-4, atol=1e-5)


def test_varlen_gradient_reaches_sinks():
    torch.manual_seed(9)
    cu_q, cu_k = torch.tensor([0, 4, 11], dtype=torch.int32), torch.tensor([0, 6, 9], dtype=torch.int32)
    q, k, v = torch.randn(11, 2, 16), torch.randn(9, 1, 16), torch.randn(9, 1, 16)
    sinks, dout = torch.tensor([1.0, -0.5]), torch.randn(11, 2, 16)
    ours = grads(
        lambda q, k, v, s: fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 6, causal=True, sinks=s),
        [q, k, v, sinks],
        dout,
    )

    def reference(q, k, v, s):
        outs = [
            torch_sink_attention(q[None, a:b], k[None, c:e], v[None, c:e], s, torch.float64, causal=True)[0]
            for a, b, c, e in [(0, 4, 0, 6), (4, 11, 6, 9)]
        ]
        return torch.cat(outs)

    ref = grads(reference, [q, k, v, sinks], dout.double())
    for name, a, r in zip(["o", "dq", "dk", "dv", "dsinks"], ours, ref):
        torch.testing.assert_close(a.double(), r.double(), rtol=1e-4, atol=1e-5, msg=name)
