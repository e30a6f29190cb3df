"""Small whole models written the way people write them, each run under no_grad and with grad.

With grad enabled only the forward outputs (and `requires_grad` on them) are compared.
"""

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from harness import Corpus, call, ints, rand
from torch import nn

corpus = Corpus()


class MLP(nn.Module):
    def __init__(self, sizes=(16, 32, 32, 4), dropout=0.1) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.dropout(F.relu(layer(x)))
        return self.layers[-1](x)


@corpus.builder(lambda: (rand(8, 16),), grad_modes=True)
def mlp():
    return MLP().eval()


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(16 * 4 * 4, classes)

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


@corpus.builder(lambda: (rand(2, 1, 16, 16),), grad_modes=True)
def small_cnn():
    return SmallCNN().eval()


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


def _randomize_batch_norm_stats(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


@corpus.builder(lambda: (rand(2, 4, 8, 8),), grad_modes=True)
def resnet_basic_block():
    return _randomize_batch_norm_stats(BasicBlock(4, 4))


@corpus.builder(lambda: (rand(2, 4, 8, 8),), grad_modes=True)
def resnet_basic_block_downsample():
    return _randomize_batch_norm_stats(BasicBlock(4, 8, stride=2))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


@corpus.builder(lambda: (rand(2, 5, 16),), grad_modes=True)
def rms_norm():
    return RMSNorm(16)


def precompute_rope(head_dim: int, seq_len: int, theta: float = 10000.0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(seq_len).float()
    freqs = torch.outer(t, inv_freq)
    return torch.cos(freqs), torch.sin(freqs)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    cos = torch.cat([cos, cos], dim=-1)[None, None, :, :]
    sin = torch.cat([sin, sin], dim=-1)[None, None, :, :]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@corpus.program(lambda: (rand(2, 2, 6, 8), rand(2, 2, 6, 8)))
def rotary_embedding(q, k):
    cos, sin = precompute_rope(q.shape[-1], q.shape[-2])
    return apply_rotary(q, k, cos, sin)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False, max_len: int = 16) -> None:
        super().__init__()
        assert dim % heads == 0
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.causal = causal
        if causal:
            mask = torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len)
            self.register_buffer("mask", mask)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.out(F.gelu(self.fc(x))))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 4, causal: bool = False) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, causal=causal)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


@corpus.builder(lambda: (rand(2, 6, 16),), grad_modes=True)
def transformer_block():
    return TransformerBlock().eval()


@dataclass
class GPTConfig:
    vocab_size: int = 32
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16


class TinyGPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(
            [
                TransformerBlock(config.n_embd, config.n_head, causal=True)
                for _ in range(config.n_layer)
            ]
        )
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        _, t = idx.size()
        assert t <= self.config.block_size, (
            f"sequence of {t} is longer than {self.config.block_size}"
        )
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss


@corpus.builder(lambda: (ints(32, 2, 8),), grad_modes=True)
def tiny_gpt_generate_step():
    return TinyGPT(GPTConfig()).eval()


@corpus.builder(lambda: call(ints(32, 2, 8), targets=ints(32, 2, 8)), grad_modes=True)
def tiny_gpt_with_loss():
    return TinyGPT(GPTConfig()).eval()


class LlamaAttention(nn.Module):
    """Attention with RMSNorm, rotary embeddings and F.scaled_dot_product_attention."""

    def __init__(self, dim: int = 16, heads: int = 2, seq_len: int = 8) -> None:
        super().__init__()
        self.heads = heads
        self.norm = RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        cos, sin = precompute_rope(dim // heads, seq_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        h = self.norm(x)
        q, k, v = self.wq(h), self.wk(h), self.wv(h)
        q, k, v = [t.view(bsz, seqlen, self.heads, -1).transpose(1, 2) for t in (q, k, v)]
        q, k = apply_rotary(q, k, self.cos[:seqlen], self.sin[:seqlen])
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).reshape(bsz, seqlen, -1)
        return x + self.wo(out)


@corpus.builder(lambda: (rand(2, 8, 16),), grad_modes=True)
def llama_style_attention():
    return LlamaAttention()


class TwoTower(nn.Module):
    """Two encoders, a similarity matrix, and a contrastive loss, returned as a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Sequential(nn.Linear(10, 16), nn.GELU(), nn.Linear(16, 8))
        self.right = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 8))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, a, b):
        za = F.normalize(self.left(a), dim=-1)
        zb = F.normalize(self.right(b), dim=-1)
        logits = self.logit_scale.exp() * za @ zb.t()
        labels = torch.arange(a.shape[0])
        loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
        return {"loss": loss, "logits": logits}


@corpus.builder(lambda: (rand(4, 10), rand(4, 6)), grad_modes=True)
def contrastive_two_tower():
    return TwoTower()


class GRUCellByHand(nn.Module):
    """A recurrent cell unrolled over a fixed number of steps."""

    def __init__(self, din: int = 4, dh: int = 8) -> None:
        super().__init__()
        self.x2h = nn.Linear(din, 3 * dh)
        self.h2h = nn.Linear(dh, 3 * dh)
        self.dh = dh

    def forward(self, xs):
        h = xs.new_zeros(xs.shape[0], self.dh)
        outputs = []
        for t in range(xs.shape[1]):
            xr, xz, xn = self.x2h(xs[:, t]).chunk(3, dim=-1)
            hr, hz, hn = self.h2h(h).chunk(3, dim=-1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1 - z) * n + z * h
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


@corpus.builder(lambda: (rand(2, 5, 4),), grad_modes=True)
def gru_unrolled():
    return GRUCellByHand()


@pytest.mark.parametrize("case", corpus.params())
def test_models(case):
    case.run()
