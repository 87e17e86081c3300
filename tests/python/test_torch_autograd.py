"""flashattn.torch: forward and loss.backward() against PyTorch's own softmax(q kᵀ·scale) v with autograd in
float64 (the reference), within twice the error of the same computation in the tensors' precision (float32,
or float16/bfloat16 products accumulated in float32 with every intermediate rounded), for float32,
float16 and bfloat16 tensors; flash_attn_backward and flash_attn_varlen_backward called directly; varlen,
scaled_dot_product_attention (top-left causal, masks, GQA), kv-cache and merge.

torch is imported unconditionally: scripts/install-deps.sh installs python3-torch, so a machine without it
is a broken set-up and these tests fail (a collection error) instead of being skipped."""

import numpy as np
import pytest
import torch

import flashattn.torch as fat
from reference import assert_within_baseline, max_error, score_bias, split_modifiers

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_attention(q, k, v, compute, low=None, scale=None, softcap=0.0, head_major=False, **masks):
    """softmax(q kᵀ·scale → softcap, + bias, masked) v with autograd, the bias and mask those of
    reference.score_bias for `masks` (causal, window, alibi, bool_mask, add_mask); (b, s, h, d) unless
    head_major. `low`: round every intermediate to that dtype (the same-precision baseline)."""
    rnd = (lambda x: x) if low is None or low == compute else (lambda x: x.to(low).to(compute))
    if not head_major:
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    q, k, v = (x.to(compute) for x in (q, k, v))
    b, Hq, Nq, d = q.shape
    Nk = k.shape[2]
    group = Hq // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = d**-0.5 if scale is None else scale
    S = rnd(scale * q @ k.transpose(-1, -2))
    if softcap > 0:
        S = softcap * torch.tanh(S / softcap)
    # The terms in float64 (exact: float32 slopes times small distances), rounded once to `compute`.
    terms, mask = score_bias((b, Hq, Nq, Nk), np.float64, **masks)
    for term in terms:
        S = S + torch.from_numpy(term).to(compute)
    S = S.masked_fill(~torch.from_numpy(mask), float("-inf"))
    P = torch.softmax(S, dim=-1).nan_to_num(0.0)  # a row that sees no key: 0
    O = rnd(rnd(P) @ v)
    return O if head_major else O.transpose(1, 2)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def run(fn, inputs, dout):
    xs = leaves(*inputs)
    out = fn(*xs)
    out.backward(dout)
    return [out.detach()] + [x.grad for x in xs]


def check(ours, ref, base, dtype):
    for name, a, r, b in zip(["o", "dq", "dk", "dv"], ours, ref, base):
        assert a.dtype == dtype, name
        np_dtype = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: "bfloat16"}[dtype]
        assert_within_baseline(name, a.double().numpy(), r.double().numpy(), b.double().numpy(), np_dtype)


def split_mods(mods, b, Hq):
    """The keyword arguments for flashattn.torch and for torch_attention."""
    return split_modifiers(mods, lambda: torch.rand(b, Hq) * 0.3)


SHAPES = [(2, 97, 113, 4, 2, 59), (1, 113, 1, 2, 1, 40)]
MODS = {
    "plain": {},
    "causal": {"causal": True},
    "all": {"causal": True, "window_size": (30, 2), "softcap": 4.0, "alibi": True, "softmax_scale": 0.2},
}


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("mods", MODS.values(), ids=MODS.keys())
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flash_attn_func_autograd(shape, mods, dtype):
    torch.manual_seed(sum(shape))
    b, Nq, Nk, Hq, Hkv, d = shape
    q, k, v = torch.randn(b, Nq, Hq, d), torch.randn(b, Nk, Hkv, d), torch.randn(b, Nk, Hkv, d)
    dout = torch.randn(b, Nq, Hq, d)
    kwargs, ref_kw = split_mods(mods, b, Hq)
    low = [x.to(dtype) for x in (q, k, v)]
    ours = run(lambda q, k, v: fat.flash_attn_func(q, k, v, **kwargs), low, dout.to(dtype))
    ref = run(lambda q, k, v: torch_attention(q, k, v, torch.float64, **ref_kw), low, dout.double())
    base = run(
        lambda q, k, v: torch_attention(q, k, v, torch.float32, low=dtype, **ref_kw), low, dout.float()
    )
    check(ours, ref, base, dtype)


def assert_equal(ours, theirs):
    for name, a, b in zip(["o", "dq", "dk", "dv"], ours, theirs):
        assert a.dtype == b.dtype and torch.equal(a, b), name


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("mods", MODS.values(), ids=MODS.keys())
def test_flash_attn_backward_matches_torch_autograd(mods, dtype):
    """flash_attn_backward on the forward call's out and softmax_lse: against PyTorch's float64 autograd
    gradients of the same loss (within twice the same-precision baseline's error), and bit for bit what
    loss.backward() through flash_attn_func gives."""
    torch.manual_seed(7)
    b, Nq, Nk, Hq, Hkv, d = 2, 97, 113, 4, 2, 59
    q, k, v = torch.randn(b, Nq, Hq, d), torch.randn(b, Nk, Hkv, d), torch.randn(b, Nk, Hkv, d)
    dout = torch.randn(b, Nq, Hq, d)
    kwargs, ref_kw = split_mods(mods, b, Hq)
    low = [x.to(dtype) for x in (q, k, v)]
    out, lse, _ = fat.flash_attn_func(*low, return_attn_probs=True, **kwargs)
    dq, dk, dv = fat.flash_attn_backward(dout.to(dtype), *low, out, lse, **kwargs)
    for grad, x in zip((dq, dk, dv), low):
        assert grad.shape == x.shape and not grad.requires_grad
    ref = run(lambda q, k, v: torch_attention(q, k, v, torch.float64, **ref_kw), low, dout.double())
    base = run(
        lambda q, k, v: torch_attention(q, k, v, torch.float32, low=dtype, **ref_kw), low, dout.float()
    )
    check([out, dq, dk, dv], ref, base, dtype)
    autograd = run(lambda q, k, v: fat.flash_attn_func(q, k, v, **kwargs), low, dout.to(dtype))
    assert_equal([out, dq, dk, dv], autograd)


def test_flash_attn_backward_with_dropout_takes_the_forward_seed():
    torch.manual_seed(4)
    q, k, v, dout = (torch.randn(1, 23, 2, 16) for _ in range(4))
    out, lse, keep = fat.flash_attn_func(q, k, v, dropout_p=0.25, return_attn_probs=True, seed=99)
    grads = fat.flash_attn_backward(dout, q, k, v, out, lse, dropout_p=0.25, seed=99)
    autograd = run(lambda q, k, v: fat.flash_attn_func(q, k, v, dropout_p=0.25, seed=99), [q, k, v], dout)
    assert_equal([out, *grads], autograd)
    # The reference with the returned mask: P ∘ keep / (1 − p).
    xs = leaves(q, k, v)
    qh, kh, vh = (x.double().transpose(1, 2) for x in xs)
    P = torch.softmax(qh @ kh.transpose(-1, -2) / 4.0, dim=-1)
    ((P * keep / 0.75) @ vh).transpose(1, 2).backward(dout.double())
    for ours, x in zip(grads, xs):
        assert max_error(ours.numpy(), x.grad.numpy()) < 1e-4
    other = fat.flash_attn_backward(dout, q, k, v, out, lse, dropout_p=0.25, seed=100)
    assert not torch.equal(other[1], grads[1])  # another seed, another mask
    with pytest.raises(ValueError, match=r"^seed must be given when dropout_p > 0 .*, got None$"):
        fat.flash_attn_backward(dout, q, k, v, out, lse, dropout_p=0.25)


def packed_sequences(seed, dtype):
    """Three sequences packed along the token axis (query lengths 4, 0, 9, key lengths 6, 2, 9; 4 query heads
    over 2 K/V heads, head dim 24): cu_seqlens_q, cu_seqlens_k, [q, k, v] of `dtype`, dout (float32)."""
    torch.manual_seed(seed)
    lengths_q, lengths_k = [4, 0, 9], [6, 2, 9]
    cu_q = torch.tensor([0] + lengths_q).cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lengths_k).cumsum(0).to(torch.int32)
    q, k, v = torch.randn(13, 4, 24), torch.randn(17, 2, 24), torch.randn(17, 2, 24)
    dout = torch.randn(13, 4, 24)
    return cu_q, cu_k, [x.to(dtype) for x in (q, k, v)], dout


def check_each_sequence(ours, cu_q, cu_k, low, dout, dtype, **ref_kw):
    """ours: the packed [out, dq, dk, dv]; each sequence's rows of them against torch_attention (keywords
    ref_kw) over that sequence alone, within twice the same-precision baseline's error."""
    for s in range(len(cu_q) - 1):
        rq, rk = slice(cu_q[s], cu_q[s + 1]), slice(cu_k[s], cu_k[s + 1])
        args = [low[0][rq][None], low[1][rk][None], low[2][rk][None]]
        ref = run(
            lambda q, k, v: torch_attention(q, k, v, torch.float64, **ref_kw), args, dout[rq][None].double()
        )
        base = run(
            lambda q, k, v: torch_attention(q, k, v, torch.float32, low=dtype, **ref_kw),
            args,
            dout[rq][None].float(),
        )
        rows = (rq, rq, rk, rk)
        check([x[r][None] for x, r in zip(ours, rows)], ref, base, dtype)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_flash_attn_varlen_backward_matches_torch_autograd(dtype):
    cu_q, cu_k, low, dout = packed_sequences(5, dtype)
    kw = {"causal": True, "window_size": (5, 1)}
    out, lse, _ = fat.flash_attn_varlen_func(*low, cu_q, cu_k, 9, 9, return_attn_probs=True, **kw)
    assert lse.shape == (4, 13)
    dq, dk, dv = fat.flash_attn_varlen_backward(dout.to(dtype), *low, out, lse, cu_q, cu_k, 9, 9, **kw)
    autograd = run(
        lambda q, k, v: fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, **kw), low, dout.to(dtype)
    )
    assert_equal([out, dq, dk, dv], autograd)
    check_each_sequence([out, dq, dk, dv], cu_q, cu_k, low, dout, dtype, causal=True, window=(5, 1))


def test_backward_functions_reject_what_the_numpy_api_rejects():
    q, k, v, dout = (torch.randn(1, 5, 2, 8, dtype=torch.bfloat16) for _ in range(4))
    out, lse, _ = fat.flash_attn_func(q, k, v, return_attn_probs=True)
    with pytest.raises(TypeError, match=r"^dout has dtype torch\.float32 but q has dtype torch\.bfloat16"):
        fat.flash_attn_backward(dout.float(), q, k, v, out, lse)
    strided = torch.randn(1, 5, 2, 16, dtype=torch.bfloat16)[..., ::2]
    with pytest.raises(ValueError, match=r"^dout must have a contiguous last dimension .*, got stride 2"):
        fat.flash_attn_backward(strided, q, k, v, out, lse)
    with pytest.raises(ValueError, match=r"^softmax_lse must have shape .* = \(1, 2, 5\), got \(1, 5, 2\)$"):
        fat.flash_attn_backward(dout, q, k, v, out, lse.transpose(1, 2).contiguous())
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^seed must be given when dropout_p > 0"):
        fat.flash_attn_varlen_backward(dout[0], q[0], k[0], v[0], out[0], lse[0], cu, cu, 5, 5, dropout_p=0.1)


def test_return_attn_probs_and_dropout_gradients():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 23, 2, 16, requires_grad=True) for _ in range(3))
    out, lse, keep = fat.flash_attn_func(q, k, v, dropout_p=0.25, return_attn_probs=True, seed=99)
    assert lse.shape == (1, 2, 23) and lse.dtype == torch.float32 and not lse.requires_grad
    assert keep.dtype == torch.bool and keep.shape == (1, 2, 23, 23)
    out.sum().backward()  # the incoming gradient is an expanded (zero-stride) tensor
    # The reference with the returned mask: P ∘ keep / (1 − p).
    xs = leaves(q, k, v)
    qh, kh, vh = (x.double().transpose(1, 2) for x in xs)
    P = torch.softmax(qh @ kh.transpose(-1, -2) / 4.0, dim=-1)
    ref = ((P * keep / 0.75) @ vh).transpose(1, 2)
    ref.sum().backward()
    assert max_error(out.detach().numpy(), ref.detach().numpy()) < 1e-5
    for ours, theirs in zip((q, k, v), xs):
        assert max_error(ours.grad.numpy(), theirs.grad.numpy()) < 1e-4


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_varlen_autograd_matches_per_sequence_calls(dtype):
    cu_q, cu_k, low, dout = packed_sequences(1, dtype)
    ours = run(
        lambda q, k, v: fat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, causal=True),
        low,
        dout.to(dtype),
    )
    check_each_sequence(ours, cu_q, cu_k, low, dout, dtype, causal=True)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("L,S,mask", [(7, 19, None), (19, 7, None), (11, 11, "bool"), (9, 14, "float")])
def test_sdpa_autograd_pytorch_semantics(L, S, mask, dtype):
    torch.manual_seed(L * S)
    B, H, Hkv, E = 2, 4, 2, 32
    query, key, value = torch.randn(B, H, L, E), torch.randn(B, Hkv, S, E), torch.randn(B, Hkv, S, E)
    dout = torch.randn(B, H, L, E)
    kwargs, ref_kw = {"enable_gqa": True}, {}
    if mask == "bool":
        kwargs["attn_mask"] = ref_kw["bool_mask"] = torch.rand(B, 1, L, S) < 0.7
    elif mask == "float":
        kwargs["attn_mask"] = ref_kw["add_mask"] = torch.randn(L, S)
    else:
        kwargs["is_causal"] = True  # top-left: query i sees keys j <= i
        ref_kw["bool_mask"] = torch.ones(L, S, dtype=torch.bool).tril()
    low = [x.to(dtype) for x in (query, key, value)]
    ours = run(lambda q, k, v: fat.scaled_dot_product_attention(q, k, v, **kwargs), low, dout.to(dtype))
    ref = run(
        lambda q, k, v: torch_attention(q, k, v, torch.float64, head_major=True, **ref_kw), low, dout.double()
    )
    base = run(
        lambda q, k, v: torch_attention(q, k, v, torch.float32, low=dtype, head_major=True, **ref_kw),
        low,
        dout.float(),
    )
    check(ours, ref, base, dtype)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_kvcache_appends_into_the_tensor_in_place(dtype):
    torch.manual_seed(2)
    k_cache, v_cache = torch.randn(2, 10, 1, 16).to(dtype), torch.randn(2, 10, 1, 16).to(dtype)
    before = k_cache.clone()
    q, k, v = (
        torch.randn(2, 1, 2, 16).to(dtype),
        torch.randn(2, 1, 1, 16).to(dtype),
        torch.randn(2, 1, 1, 16).to(dtype),
    )
    seqlens = torch.tensor([3, 9], dtype=torch.int32)
    out, lse = fat.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=seqlens, return_softmax_lse=True
    )
    assert out.dtype == dtype and lse.shape == (2, 2, 1)
    assert torch.equal(k_cache[0, 3], k[0, 0]) and torch.equal(k_cache[1, 9], k[1, 0])
    assert torch.equal(v_cache[0, 3], v[0, 0])
    untouched = torch.ones(2, 10, dtype=torch.bool)
    untouched[0, 3] = untouched[1, 9] = False
    assert torch.equal(k_cache[untouched], before[untouched])
    expected = fat.flash_attn_func(q[:1], k_cache[:1, :4], v_cache[:1, :4])
    assert (out[:1].float() - expected.float()).abs().max() <= (2e-2 if dtype != torch.float32 else 1e-5)


def test_merge_attention_states_bfloat16():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 6, 2, 16).to(torch.bfloat16) for _ in range(3))
    parts = [
        fat.flash_attn_func(q, k[:, a:b], v[:, a:b], return_attn_probs=True)[:2] for a, b in ((0, 2), (2, 6))
    ]
    out, lse = fat.merge_attention_states([p[0] for p in parts], [p[1] for p in parts])
    full, full_lse, _ = fat.flash_attn_func(q, k, v, return_attn_probs=True)
    assert out.dtype == torch.bfloat16
    assert (out.float() - full.float()).abs().max() < 2e-2
    assert (lse - full_lse).abs().max() < 1e-3


def test_errors_name_the_argument():
    """Each message names the argument and the value it got, from its start (re.search with ^)."""
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"^q must have dtype float32 or float16.*, got float64$"):
        fat.flash_attn_func(q, q, q)
    with pytest.raises(ValueError, match=r"^dropout_p must be in \[0, 1\), got 2$"):
        fat.flash_attn_func(q.float(), q.float(), q.float(), dropout_p=2.0)
    with pytest.raises(TypeError, match=r"^k must be a torch\.Tensor, got list$"):
        fat.flash_attn_func(q.float(), [1.0], q.float())
    with pytest.raises(TypeError, match=r"^v has dtype float16 but q has dtype float32; they must agree$"):
        fat.flash_attn_func(q.float(), q.float(), q.half())
    with pytest.raises(ValueError, match=r"^window_left must be >= -1, got -3$"):
        fat.flash_attn_func(q.float(), q.float(), q.float(), window_size=(-3, 0))


def test_failed_kvcache_call_leaves_the_cache_tensors_unchanged():
    k_cache, v_cache = torch.randn(2, 6, 1, 8), torch.randn(2, 6, 1, 8)
    before = k_cache.clone(), v_cache.clone()
    q, k, v = torch.randn(2, 1, 1, 8), torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8)
    # Sequence 0 fits, sequence 1 (5 + 2 > 6) does not: nothing is written, not even sequence 0's keys.
    with pytest.raises(ValueError, match=r"cache_seqlens\[1\]"):
        fat.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=torch.tensor([0, 5]))
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])
