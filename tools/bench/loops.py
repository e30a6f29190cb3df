"""Loops whose body breaks: graphs compiled and time of the first and of a steady call.

Cases (CPU or GPU, float32):

  decode   greedy decoding with a 4-layer GPT (tools/bench/models.py's, d_model 64), one token
           per step, stopping on `if nxt.item() == eos: break` (a graph break every step)
  logging  a training loop over a Linear model that keeps a running loss (`total +=
           loss.item()`) and prints `round(loss.item(), 4)` every other step

For framejit (`jit`, backend "eager", so the frontend is what is measured) and torch.compile
(backend "eager"): graphs compiled over the first call, seconds of the first call, and the
median seconds of later calls, beside eager's. Target: graphs compiled do not grow with the
number of steps (a few, not one per step), steady calls no slower than eager's.

    python tools/bench/loops.py [--steps N] [--repeats N] [--json results.json]

torch.compile is used here only as the point of comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import framejit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (tools/bench/models.py)

Maker = Callable[[], tuple[Callable[..., Any], tuple]]  # a case: (function, its arguments)


def decode(model: Any, ids: torch.Tensor, steps: int, eos: int) -> torch.Tensor:
    for _ in range(steps):
        nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
        if nxt.item() == eos:
            break
    return ids


def train_and_log(model: Any, opt: Any, x: torch.Tensor, y: torch.Tensor, steps: int) -> float:
    total = 0.0
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 2 == 0:
            print(step, round(loss.item(), 4))
        total += loss.item()
    return total


def _cases(steps: int) -> dict[str, Maker]:
    def decode_case() -> tuple[Callable[..., Any], tuple]:
        torch.manual_seed(0)
        shape = models.GPTShape(layers=4, d_model=64, heads=4, vocab=128, max_seq=steps + 8)
        model = models.GPT(shape).eval()
        return decode, (model, torch.randint(0, 128, (1, 4)), steps, -1)

    def logging_case() -> tuple[Callable[..., Any], tuple]:
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return train_and_log, (model, opt, torch.randn(32, 16), torch.randn(32, 1), steps)

    return {"decode": decode_case, "logging": logging_case}


class _Counter:
    """A backend that counts the graphs it is given and runs them as they are."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        return gm.forward


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the logging case prints
        fn()
    return time.perf_counter() - start


def _measure(label: str, make: Maker, repeats: int) -> dict:
    fn, args = make()
    graphs: Callable[[], int] = lambda: 0  # noqa: E731
    if label == "framejit":
        counter = _Counter()
        fn = framejit.jit(fn, backend=counter)
        graphs = lambda: counter.graphs  # noqa: E731
    elif label == "torch.compile":
        import torch._dynamo

        torch._dynamo.reset()
        stats = torch._dynamo.utils.counters["stats"]
        before = stats["unique_graphs"]
        fn = torch.compile(fn, backend="eager")
        graphs = lambda: stats["unique_graphs"] - before  # noqa: E731
    first = _timed(lambda: fn(*args))
    compiled = graphs()
    steady = statistics.median(_timed(lambda: fn(*args)) for _ in range(repeats))
    return {"graphs": compiled, "first_s": first, "steady_s": steady}


def run_case(name: str, make: Maker, repeats: int, labels: tuple) -> dict:
    result: dict[str, Any] = {"case": name}
    with torch.set_grad_enabled(name != "decode"):  # decoding under no_grad, training with grad
        for label in labels:
            result[label] = _measure(label, make, repeats)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"loops whose body breaks, {args.steps} steps; torch {torch.__version__}")
    print("case      impl            graphs   first call s   steady call ms")
    results = []
    labels = ("eager", "framejit") + (() if args.no_compile else ("torch.compile",))
    for name, make in _cases(args.steps).items():
        result = run_case(name, make, args.repeats, labels)
        for label in labels:
            r = result[label]
            print(
                f"{name:9} {label:14} {r['graphs']:7d} {r['first_s']:14.2f} "
                f"{r['steady_s'] * 1e3:16.1f}"
            )
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
