"""Small models for the training tests and tools/bench/training.py: an MLP, a CNN with BatchNorm
(train mode), a GPT-style transformer and a model with an in-place op."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.fc1(x))
        x = F.gelu(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(16, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class InPlace(nn.Module):
    """Uses in-place ops on intermediates (`mul_`, `add_`, `relu_`), as eager allows them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        h.mul_(2.0).add_(1.0)
        h.relu_()
        return self.fc2(h)


def batch(name: str, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets for `name`; the loss is `loss(name, output, target)`."""
    if name == "cnn":
        return torch.randn(size, 1, 16, 16), torch.randint(0, 10, (size,))
    if name == "gpt":
        idx = torch.randint(0, 64, (size, 12))
        return idx, torch.randint(0, 64, (size, 12))
    return torch.randn(size, 16), torch.randn(size, 4)


def loss(name: str, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if name in ("cnn", "gpt"):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))
    return F.mse_loss(out, target)


MODELS = {"mlp": MLP, "cnn": CNN, "gpt": GPT, "inplace": InPlace}
