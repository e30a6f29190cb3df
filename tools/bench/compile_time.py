"""Frontend compile time: the first call of a 12-layer transformer block stack, backend "eager".

framejit.jit vs torch.compile, both with backend="eager" so that only the frontend (bytecode
translation, guards, code generation) is measured, in one run, as a ratio. Target <= 1.0.
The model is a stack of 12 pre-norm transformer blocks (d_model 64, 4 heads) on CPU; each
measurement is a fresh process state for both compilers (reset before each timed first call),
repeated and reported as the median.

    python tools/bench/compile_time.py [--repeats N]

torch.compile is used here only as the point of comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import torch
from torch import nn

import framejit


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class Stack(nn.Module):
    def __init__(self, layers: int = 12) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def first_call(make, x: torch.Tensor) -> float:
    fn = make()
    start = time.perf_counter()
    with torch.no_grad():
        fn(x)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    import torch._dynamo

    torch.manual_seed(0)
    model = Stack().eval()
    x = torch.randn(2, 16, 64)

    def fj():
        framejit.reset()
        return framejit.jit(model, backend="eager")

    def tc():
        torch._dynamo.reset()
        return torch.compile(model, backend="eager")

    first_call(fj, x), first_call(tc, x)  # import-time and first-use costs out of the way
    fj_s = [first_call(fj, x) for _ in range(args.repeats)]
    tc_s = [first_call(tc, x) for _ in range(args.repeats)]
    a, b = statistics.median(fj_s), statistics.median(tc_s)
    graphs = framejit.explain(model, x)
    print("frontend compile time, first call of a 12-layer transformer stack, backend='eager'")
    print(
        f"machine: {platform.processor() or platform.machine()}, python "
        f"{platform.python_version()}, torch {torch.__version__}; median of {args.repeats}"
    )
    print(
        f"framejit       {a * 1e3:8.1f} ms   ({graphs.graph_count} graph, "
        f"{sum(graphs.ops_per_graph)} ops, {graphs.graph_break_count} breaks)"
    )
    print(f"torch.compile  {b * 1e3:8.1f} ms")
    ratio = a / b
    print(f"ratio framejit / torch.compile = {ratio:.2f}  ({'PASS' if ratio <= 1.0 else 'FAIL'})")
    return 0 if ratio <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
