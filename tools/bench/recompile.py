"""Dynamic shapes: total time and compile count for calls with sizes 1..32.

The transformer block stack of compile_time.py (4 layers, d_model 64, 4 heads) is called with
sequence lengths 1, 2, ..., 32 (batch 2), then once more with every size (all warm):
framejit.jit vs torch.compile, both with the same backend (default "eager": the frontend, guards
and recompile policy are what is measured; "aot_eager" adds the AOT stage), both with their
default dynamic-shape policy (automatic: specialize first, make a dimension symbolic once it
changes). Reported in one run: graphs compiled by each, total seconds of the 64 calls (median of
--repeats fresh starts), and the ratio framejit / torch.compile. Targets: no more compiles than
torch.compile, ratio <= 1.0.

    python tools/bench/recompile.py [--backend eager|aot_eager] [--repeats N]

torch.compile is used here only as the point of comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Any

import torch

import framejit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_time import Stack  # noqa: E402 - the same transformer stack, 4 layers here

SIZES = list(range(1, 33))


def run(fn: Any, inputs: list[torch.Tensor]) -> float:
    start = time.perf_counter()
    with torch.no_grad():
        for x in inputs:
            fn(x)
        for x in inputs:  # every size again: all warm now
            fn(x)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="eager", choices=["eager", "aot_eager"])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch._dynamo

    torch.manual_seed(0)
    model = Stack(layers=4).eval()
    inputs = [torch.randn(2, t, 64) for t in SIZES]
    with torch.no_grad():
        expected = [model(x) for x in inputs]

    fj_counts: list[int] = []
    tc_counts: list[int] = []

    def counting(inner: Any, counts: list[int]) -> Any:
        counts.append(0)

        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            counts[-1] += 1
            return inner(gm, example_inputs)

        return backend

    def framejit_run() -> tuple[float, Any]:
        framejit.reset()
        backend = counting(framejit.backend.lookup_backend(args.backend), fj_counts)
        fn = framejit.jit(model, backend=backend)
        return run(fn, inputs), fn

    def torch_run() -> tuple[float, Any]:
        torch._dynamo.reset()
        backend = counting(torch._dynamo.lookup_backend(args.backend), tc_counts)
        fn = torch.compile(model, backend=backend)
        return run(fn, inputs), fn

    fj_times, tc_times = [], []
    for _ in range(args.repeats):
        seconds, fn = framejit_run()
        fj_times.append(seconds)
        with torch.no_grad():
            for x, want in zip(inputs, expected):
                torch.testing.assert_close(fn(x), want, rtol=1e-4, atol=1e-5)
        seconds, fn = torch_run()
        tc_times.append(seconds)

    fj, tc = statistics.median(fj_times), statistics.median(tc_times)
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"model: 4-layer transformer stack, batch 2, sequence lengths {SIZES[0]}..{SIZES[-1]}")
    print(f"backend: {args.backend} (both), {len(SIZES) * 2} calls, median of {args.repeats}")
    print(f"{'':14}{'graphs compiled':>18}{'total seconds':>16}")
    print(f"{'framejit':14}{fj_counts[-1]:>18}{fj:>16.3f}")
    print(f"{'torch.compile':14}{tc_counts[-1]:>18}{tc:>16.3f}")
    print(
        f"ratio framejit / torch.compile: {fj / tc:.2f} (target <= 1.0); compiles: "
        f"{fj_counts[-1]} vs {tc_counts[-1]} (target: no more)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
