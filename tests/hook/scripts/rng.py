"""Explicit torch.Generator objects passed to functions that take tensors, randperm-based
shuffles, dropout between generator draws, manual_seed inside a function, bernoulli masks."""

import torch
import torch.nn as nn


def augment(x, gen):
    noise = torch.randn(x.shape, generator=gen) * 0.1
    perm = torch.randperm(x.shape[0], generator=gen)
    return (x + noise)[perm], perm


def mask_tokens(ids, p, gen):
    m = torch.bernoulli(torch.full(ids.shape, p), generator=gen).bool()
    return ids.masked_fill(m, 0), m.sum()


def reseeded(x):
    torch.manual_seed(123)
    return x + torch.rand_like(x)


class Drop(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.Dropout(0.5)

    def forward(self, x, gen):
        a = self.d(x)
        b = torch.rand(x.shape, generator=gen)
        c = self.d(x)
        return a + b + c


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(7)
    x = torch.arange(12.0).reshape(4, 3)
    for _ in range(2):
        y, perm = augment(x, gen)
        print(perm.tolist(), f"{y.sum().item():.4f}")
    ids = torch.arange(1, 11)
    for p in (0.2, 0.5):
        out, n = mask_tokens(ids, p, gen)
        print(out.tolist(), n.item())
    print([f"{v:.4f}" for v in reseeded(torch.zeros(3)).tolist()])
    print(f"{torch.rand(1).item():.4f}")
    d = Drop()
    print([f"{d(torch.ones(5), gen).sum().item():.4f}" for _ in range(3)])
    print(f"{torch.rand(1).item():.4f}", f"{torch.rand(1, generator=gen).item():.4f}")


if __name__ == "__main__":
    main()
