"""`python -m framejit demo`: compile a small model, check it against eager, show what was captured.

The model is a two-block pre-norm transformer encoder (LayerNorm, attention written with matmul
and softmax, GELU MLP, residuals) run in inference mode on the CPU. The demo

1. compiles it with `framejit.jit` and checks the output equals eager
   (`torch.testing.assert_close`),
2. prints what `framejit.explain` reports: graphs, ops, graph breaks and the guards,
3. times eager and framejit per call (median over interleaved rounds) and prints the ratio.

It takes a few seconds on a laptop CPU. Output is plain text (no colour) when stdout is not a
terminal.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import framejit
from framejit.backend import lookup_backend
from framejit.testing import CompileCounter

DIM, HEADS, HIDDEN, BLOCKS = 64, 4, 256, 2
BATCH, TOKENS = 2, 16
GUARDS_SHOWN = 12


class Block(nn.Module):
    """Pre-norm transformer encoder block: self-attention then an MLP, each with a residual."""

    def __init__(self, dim: int = DIM, heads: int = HEADS, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyEncoder(nn.Module):
    def __init__(self, blocks: int = BLOCKS, dim: int = DIM) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(blocks)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class _StripTrailingSpace:
    """A text stream that drops the spaces rich pads lines with (for files and pipes)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(re.sub(r"[ \t]+(?=\n)", "", text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"


def _console() -> Any:
    from rich.console import Console

    # Not a terminal (a pipe, a file, CI): no colour, a fixed width so lines do not wrap at 80
    # columns, no trailing spaces. Markup and emoji codes are off: guards contain "[...]".
    if sys.stdout.isatty():
        return Console(file=sys.stdout, markup=False, emoji=False, highlight=False)
    return Console(
        file=_StripTrailingSpace(sys.stdout),
        markup=False,
        emoji=False,
        highlight=False,
        width=120,
        no_color=True,
        force_terminal=False,
    )


def _table(*columns: tuple[str, str]) -> Any:
    """A borderless table with a dashed rule under the header (plain ASCII, as in a man page)."""
    from rich.box import Box
    from rich.table import Table

    rule = Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)
    table = Table(box=rule, show_edge=False, pad_edge=False, show_header=True)
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    return table


def _time_calls(
    impls: dict[str, Callable[[], Any]], rounds: int, round_s: float, budget_s: float
) -> tuple[dict[str, float], int]:
    """Median microseconds per call of each implementation over interleaved rounds, and the
    number of rounds run: at most `rounds`, fewer (but at least 3) if `budget_s` runs out, so
    a busy machine does not make the demo drag on."""

    def per_call(fn: Callable[[], Any], n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n

    for fn in impls.values():
        per_call(fn, 5)  # warm-up
    slowest = max(per_call(fn, 5) for fn in impls.values())
    number = max(3, int(round_s / max(slowest, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in impls}
    names = list(impls)
    deadline = time.perf_counter() + budget_s
    done = 0
    while done < rounds and (done < 3 or time.perf_counter() < deadline):
        # Rotate the order each round so neither implementation always runs first.
        for name in names[done % len(names) :] + names[: done % len(names)]:
            samples[name].append(per_call(impls[name], number) * 1e6)
        done += 1
    return {name: statistics.median(v) for name, v in samples.items()}, done


def _short_origin(origin: str) -> str:
    """Drop the site-packages (or framejit checkout) prefix from a guard's origin path."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in origin:
            return origin.split(marker, 1)[1]
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    return origin.replace(here, "framejit" + os.sep)


def run_demo(backend: str = "eager", all_guards: bool = False, rounds: int = 15) -> int:
    """Run the demo, print the report to stdout; 0 if framejit matched eager, else 1."""
    from rich.text import Text

    console = _console()
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    x = torch.randn(BATCH, TOKENS, DIM)
    nparams = sum(p.numel() for p in model.parameters())

    counter = CompileCounter()
    real_backend = lookup_backend(backend)

    def counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        counter(gm, example_inputs)
        return real_backend(gm, example_inputs)

    compiled = framejit.jit(model, backend=counting_backend)

    console.print(Text("framejit demo", style="bold"))
    console.print(
        f"model: {BLOCKS}-block transformer encoder (dim {DIM}, {HEADS} heads, MLP {HIDDEN}, "
        f"{nparams:,} parameters), eval mode, torch.no_grad()"
    )
    console.print(
        f"input: float32 tensor of shape {tuple(x.shape)} on cpu; "
        f"backend: {backend}; torch {torch.__version__}; "
        f"{torch.get_num_threads()} threads"
    )
    if framejit.config.disable:
        console.print(
            "note: FRAMEJIT_DISABLE=1 is set, so framejit.jit returned the model "
            "unchanged; the timings below compare eager with itself"
        )
    console.print()

    with torch.no_grad():
        expected = model(x)
        start = time.perf_counter()
        actual = compiled(x)  # compiles
        first_call_ms = (time.perf_counter() - start) * 1e3
        try:
            torch.testing.assert_close(actual, expected)
        except AssertionError as exc:
            console.print(Text("FAILED: framejit's output differs from eager", style="bold red"))
            console.print(str(exc))
            return 1
        max_diff = (actual - expected).abs().max().item()
        report = framejit.explain(model, x)

    console.print(Text("Correctness", style="bold"))
    console.print(
        f"output matches eager (torch.testing.assert_close); max abs difference {max_diff:.3g}"
    )
    console.print()

    console.print(Text("Capture (framejit.explain)", style="bold"))
    capture = _table(("item", "left"), ("value", "right"))
    capture.add_row("graphs", str(report.graph_count))
    capture.add_row("graph breaks", str(report.graph_break_count))
    capture.add_row("ops per graph", ", ".join(map(str, report.ops_per_graph)) or "-")
    capture.add_row("guards", str(len(report.guards)))
    capture.add_row("first call (trace + compile + run)", f"{first_call_ms:.1f} ms")
    console.print(capture)
    console.print()
    for reason in report.break_reasons:
        console.print(f"graph break: {reason}")

    shown = list(enumerate(report.guards))
    if not all_guards:
        # The first few, and the ones on the input (tensor guards run last, so are not among them).
        shown = [
            (i, g) for i, g in shown if i < GUARDS_SHOWN or g.startswith("check_tensor(L['x']")
        ]
    console.print(
        Text(f"Guards ({len(report.guards)}; checked on every call, cheapest first)", style="bold")
    )
    guards = _table(("#", "right"), ("guard", "left"), ("from", "left"))
    previous = -1
    for i, line in shown:
        if i != previous + 1:
            guards.add_row("...", f"({i - previous - 1} more)", "")
        text, _, origin = line.partition("    # ")
        guards.add_row(str(i), text.strip(), _short_origin(origin.strip()))
        previous = i
    if previous + 1 < len(report.guards):
        guards.add_row("...", f"({len(report.guards) - previous - 1} more)", "")
    console.print(guards)
    if len(shown) < len(report.guards):
        console.print("(--all-guards lists every guard)")
    console.print()

    with torch.no_grad():
        medians, done = _time_calls(
            {"eager": lambda: model(x), "framejit": lambda: compiled(x)},
            rounds=rounds,
            round_s=0.03,
            budget_s=2.0,
        )
    console.print(
        Text(f"Timing (median of {done} interleaved rounds, microseconds per call)", style="bold")
    )
    timing = _table(("", "left"), ("us per call", "right"), ("speed-up vs eager", "right"))
    eager_us = medians["eager"]
    for name, us in medians.items():
        timing.add_row(name, f"{us:.1f}", f"{eager_us / us:.2f}x")
    console.print(timing)
    console.print()
    console.print(
        f"graphs compiled during the whole run: {counter.frame_count} "
        f"({counter.op_count} ops); a cache hit reruns the compiled graph after "
        f"checking the guards"
    )
    return 0
