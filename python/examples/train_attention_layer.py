# One transformer attention layer (pre-norm, grouped-query, causal) trained for a few steps through
# flashattn.torch: the forward and backward passes of attention run in flashattn.
import torch

import flashattn.torch as fat


class SelfAttention(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm = torch.nn.LayerNorm(dim)
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * kv_heads * self.head_dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):  # x: (batch, seqlen, dim)
        b, n, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, n, self.heads, self.head_dim)
        k, v = self.kv(h).view(b, n, 2, self.kv_heads, self.head_dim).unbind(2)  # strided views, no copies
        o = fat.flash_attn_func(q, k, v, causal=True)  # (batch, seqlen, heads, head_dim)
        return x + self.out(o.reshape(b, n, -1))


torch.manual_seed(0)
layer = SelfAttention(dim=64, heads=4, kv_heads=2)
optimizer = torch.optim.Adam(layer.parameters(), lr=3e-3)
x = torch.randn(8, 32, 64)
target = x.cumsum(dim=1) / torch.arange(1, 33).view(1, -1, 1)  # mean of the tokens so far: needs attention
for step in range(40):
    loss = torch.nn.functional.mse_loss(layer(x), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0 or step == 39:
        print(f"step {step:2d}  loss {loss.item():.4f}")
