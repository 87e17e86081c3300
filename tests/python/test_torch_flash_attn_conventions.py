"""flashattn.torch as a drop-in for flash-attn, checked as flash-attn's own tests would check it: the dropout
seed drawn from torch's default generator (torch.manual_seed reproduces a call's masks, the generator
advances by exactly the one documented draw and only with dropout, loss.backward() regenerates the forward
pass's mask), the varlen function's per-sequence masks returned as tensors, the kv-cache's rotary positions
of the queries, and invalid arguments raising an Error that `except RuntimeError` catches; outputs and
gradients against a float64 torch reference with the returned masks, drop rates within binomial bounds."""

import numpy as np
import pytest
import torch

import flashattn
import flashattn.torch as fat
from reference import assert_drop_rate


def torch_draw(state_seed):
    """The dropout seed a call with seed=None draws right after torch.manual_seed(state_seed), and what
    torch.rand(4) gives after that draw (the generator's state once the call returns)."""
    torch.manual_seed(state_seed)
    seed = int(torch.empty((), dtype=torch.int64).random_(-(2**63), None)) % 2**64
    return seed, torch.rand(4)


def dropped_attention(q, k, v, keep, p, causal=False):
    """(softmax(q kᵀ/√d) ∘ keep / (1 − p)) v in float64 with autograd; (batch, seqlen, heads, dim) tensors of
    equal head counts, keep (batch, heads, Nq, Nk), causal aligned bottom-right."""
    qh, kh, vh = (x.double().transpose(1, 2) for x in (q, k, v))
    S = qh @ kh.transpose(-1, -2) / qh.shape[-1] ** 0.5
    if causal:
        Nq, Nk = S.shape[-2:]
        S = S.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool).tril(Nk - Nq), float("-inf"))
    P = torch.softmax(S, dim=-1).nan_to_num(0.0)
    return ((P * keep / (1.0 - p)) @ vh).transpose(1, 2)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def assert_close(ours, ref, tolerance):
    error = (ours.double() - ref.double()).abs().max().item() if ours.numel() else 0.0
    assert error < tolerance, f"off by {error}"


def test_manual_seed_reproduces_dropout_and_backward_regenerates_the_mask():
    torch.manual_seed(0)
    q, k, v, dout = (torch.randn(2, 29, 3, 16) for _ in range(4))
    seed, after = torch_draw(42)
    torch.manual_seed(42)
    xs = leaves(q, k, v)
    out, lse, keep = fat.flash_attn_func(*xs, dropout_p=0.3, causal=True, return_attn_probs=True)
    assert torch.equal(torch.rand(4), after)  # advanced by exactly the one documented draw
    out.backward(dout)

    # The drawn seed given explicitly: the same mask and output.
    explicit = fat.flash_attn_func(q, k, v, dropout_p=0.3, causal=True, return_attn_probs=True, seed=seed)
    assert torch.equal(explicit[2], keep) and torch.equal(explicit[0], out.detach())
    torch.manual_seed(42)
    assert torch.equal(fat.flash_attn_func(q, k, v, dropout_p=0.3, causal=True), out.detach())
    # The next call draws the next seed: another mask.
    _, _, other = fat.flash_attn_func(q, k, v, dropout_p=0.3, causal=True, return_attn_probs=True)
    assert not torch.equal(other, keep)

    # loss.backward() used the forward pass's mask: the reference with the returned mask.
    refs = leaves(q, k, v)
    ref = dropped_attention(*refs, keep, 0.3, causal=True)
    ref.backward(dout.double())
    assert_close(out.detach(), ref.detach(), 1e-5)
    for ours, theirs in zip(xs, refs):
        assert_close(ours.grad, theirs.grad, 1e-4)
    assert_drop_rate(keep, 0.3)


def test_calls_without_a_drawn_seed_leave_torchs_generator_alone():
    q = torch.randn(1, 8, 2, 16)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    torch.manual_seed(9)
    expected = torch.rand(4)
    torch.manual_seed(9)
    fat.flash_attn_func(q, q, q)
    fat.flash_attn_func(q, q, q, dropout_p=0.2, seed=3)
    fat.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 5, 5)
    fat.scaled_dot_product_attention(*(q.transpose(1, 2) for _ in range(3)))
    assert torch.equal(torch.rand(4), expected)


def test_sdpa_draws_its_seed_from_torch():
    query, key, value = (torch.randn(1, 2, 9, 16) for _ in range(3))
    seed, after = torch_draw(5)
    torch.manual_seed(5)
    out = fat.scaled_dot_product_attention(query, key, value, dropout_p=0.3)
    assert torch.equal(torch.rand(4), after)
    assert torch.equal(out, fat.scaled_dot_product_attention(query, key, value, dropout_p=0.3, seed=seed))


def test_varlen_returns_the_per_sequence_masks_as_tensors():
    torch.manual_seed(1)
    lengths_q, lengths_k = [4, 0, 9], [6, 2, 9]
    cu_q = torch.tensor([0] + lengths_q).cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lengths_k).cumsum(0).to(torch.int32)
    q, dout = torch.randn(13, 2, 16), torch.randn(13, 2, 16)
    k, v = torch.randn(17, 2, 16), torch.randn(17, 2, 16)
    args = (cu_q, cu_k, 9, 9)
    seed, after = torch_draw(3)
    torch.manual_seed(3)
    xs = leaves(q, k, v)
    out, lse, masks = fat.flash_attn_varlen_func(*xs, *args, dropout_p=0.25, causal=True, return_attn_probs=True)
    assert torch.equal(torch.rand(4), after)
    out.backward(dout)
    assert isinstance(masks, list) and [m.shape for m in masks] == [(2, a, b) for a, b in zip(lengths_q, lengths_k)]
    assert all(isinstance(m, torch.Tensor) and m.dtype == torch.bool for m in masks)
    # What the NumPy function returns for the drawn seed.
    _, _, expected = flashattn.flash_attn_varlen_func(
        *(x.numpy() for x in (q, k, v)), *(a.numpy() if torch.is_tensor(a) else a for a in args),
        dropout_p=0.25, causal=True, return_attn_probs=True, seed=seed,
    )
    for mask, numpy_mask in zip(masks, expected):
        np.testing.assert_array_equal(mask.numpy(), numpy_mask)
    assert_drop_rate(masks, 0.25)
    # Each sequence against the reference with its returned mask, gradients through loss.backward().
    refs = leaves(q, k, v)
    for s, mask in enumerate(masks):
        rq, rk = slice(cu_q[s], cu_q[s + 1]), slice(cu_k[s], cu_k[s + 1])
        ref = dropped_attention(refs[0][None, rq], refs[1][None, rk], refs[2][None, rk], mask[None], 0.25, True)
        ref.backward(dout[None, rq].double())
        assert_close(out.detach()[rq], ref.detach()[0], 1e-5)
    for ours, theirs in zip(xs, refs):
        assert_close(ours.grad, theirs.grad, 1e-4)
    without = fat.flash_attn_varlen_func(q, k, v, *args, causal=True, return_attn_probs=True)
    assert without[2] is None


def rotate(x, cos, sin, positions):
    """GPT-NeoX rotary embedding of x (n, heads, d) at `positions` (n,), in float64."""
    x = x.double().clone()
    half = cos.shape[1]
    c, s = cos[positions].double()[:, None], sin[positions].double()[:, None]
    x0, x1 = x[..., :half].clone(), x[..., half : 2 * half].clone()
    x[..., :half], x[..., half : 2 * half] = x0 * c - x1 * s, x0 * s + x1 * c
    return x


@pytest.mark.parametrize("mods", [{}, {"causal": True}, {"window_size": (40, 0)}], ids=["plain", "causal", "local"])
def test_kvcache_rotates_the_queries_as_flash_attn_does(mods):
    """flash-attn rotates the new queries at cache_seqlens + i when causal or local, else all of them at
    cache_seqlens; the new keys at cache_seqlens + i in every case."""
    torch.manual_seed(2)
    b, Nq, H, d, capacity = 2, 3, 2, 16, 12
    seqlens = torch.tensor([4, 7], dtype=torch.int32)
    k_cache, v_cache = torch.randn(b, capacity, H, d), torch.randn(b, capacity, H, d)
    q, k, v = torch.randn(b, Nq, H, d), torch.randn(b, Nq, H, d), torch.randn(b, Nq, H, d)
    angles = torch.arange(capacity, dtype=torch.float64)[:, None] * 0.3 ** torch.arange(d // 2)[None]
    cos, sin = angles.cos().float(), angles.sin().float()
    out = fat.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens,
        rotary_interleaved=False, **mods,
    )
    consecutive = bool(mods)
    for s in range(b):
        Nk = int(seqlens[s]) + Nq
        new = int(seqlens[s]) + torch.arange(Nq)
        q_positions = new if consecutive else torch.full((Nq,), int(seqlens[s]))
        assert_close(k_cache[s, new], rotate(k[s], cos, sin, new), 1e-6)
        keys, values = k_cache[s, None, :Nk], v_cache[s, None, :Nk]
        qs = rotate(q[s], cos, sin, q_positions)[None]
        scores = torch.einsum("bihd,bjhd->bhij", qs, keys.double()) / d**0.5
        i, j = torch.arange(Nq)[:, None] + Nk - Nq, torch.arange(Nk)[None]
        visible = torch.ones(Nq, Nk, dtype=torch.bool)
        if mods.get("causal") or "window_size" in mods:
            visible &= j <= i
        if "window_size" in mods:
            visible &= j >= i - mods["window_size"][0]
        P = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        assert_close(out[s, None], torch.einsum("bhij,bjhd->bihd", P, values.double()), 2e-5)


def test_invalid_arguments_raise_an_error_that_runtime_error_catches():
    """Where flash-attn's checks raise RuntimeError: a block table too short for cache_seqlens (the library's
    check), shapes that disagree (the bindings' check), a bad value (the Python layer's check)."""
    assert fat.Error is flashattn.Error
    q, cache = torch.randn(1, 1, 2, 16), torch.randn(4, 4, 2, 16)
    short = torch.tensor([[0, 1]], dtype=torch.int32)  # 2 pages of 4 slots: 8 keys, not 9
    calls = [
        lambda: fat.flash_attn_with_kvcache(q, cache, cache.clone(), cache_seqlens=9, block_table=short),
        lambda: fat.flash_attn_func(q, torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8)),
        lambda: fat.flash_attn_func(q, q, q, dropout_p=0.1, seed=-1),
    ]
    for call in calls:
        with pytest.raises(RuntimeError) as caught:
            call()
        assert isinstance(caught.value, fat.Error) and isinstance(caught.value, ValueError)
