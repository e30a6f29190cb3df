"""Optimizer step: `opt.step()` of SGD with momentum (or Adam, `--optimizer adam`), eager vs
framejit (step captured) vs torch.compile, on one model's parameters.

The model is `--layers` Linear(`--width`, `--width`) layers (2 parameter tensors each). Every
parameter has a gradient (set once, kept: no `zero_grad`), and each timed call is one
`opt.step()`:

  eager          the optimizer's own step (torch picks its foreach path on CUDA, its for-loop
                 path on the CPU)
  framejit       `framejit.jit(step)` with `config.capture_optimizer_steps = True`: the step
                 traced into one graph from its second call (the first creates the momentum
                 buffers), backend `triton` on CUDA and `aot_eager` on the CPU (`--backend`)
  torch.compile  `torch.compile(step)` (default mode), the usual recipe for a fused step

Each variant steps its own copy of the model and optimizer; after the timed calls the three
copies' parameters are compared (framejit's must equal eager's exactly on the CPU; on CUDA
within float32 rounding, as fused kernels may contract multiply-adds).

Printed: median milliseconds per step (CUDA events on CUDA, wall time on the CPU) and the
ratios eager / framejit (> 1: faster than eager) and framejit / torch.compile. This decides
whether step capture (off by default; see README "Compiled optimizer steps") should be on
for the Triton backend.

    python tools/bench/optimizer.py [--layers 50] [--width 1024] [--repeats 30] [--backend B]
                                    [--optimizer sgd|adam] [--no-torch-compile]
                                    [--json results.json]

Exit status 0 (a measurement, no target yet). torch.compile is used here only as the baseline.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from models import _time_ms  # noqa: E402 - the same timing as the model benchmarks

import framejit  # noqa: E402


def _setup(layers: int, width: int, device: torch.device, kind: str) -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    model = model.to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    if kind == "adam":
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=50)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--backend", default=None, help="framejit backend (default: by device)")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    backend = args.backend or ("triton" if device.type == "cuda" else "aot_eager")

    models = {}
    results: dict[str, float] = {}
    model, opt = _setup(args.layers, args.width, device, args.optimizer)
    models["eager"] = model
    results["eager"] = _time_ms(opt.step, args.repeats, device)

    framejit.config.capture_optimizer_steps = True
    model, opt = _setup(args.layers, args.width, device, args.optimizer)
    models["framejit"] = model

    def step() -> None:
        opt.step()

    jitted = framejit.jit(step, backend=backend)
    results["framejit"] = _time_ms(jitted, args.repeats, device)
    # graphs and breaks, on a copy
    _, probe_opt = _setup(args.layers, args.width, device, args.optimizer)
    probe_opt.step()  # the first step creates the state (a break)
    explained = framejit.explain(probe_opt.step)
    graphs, breaks = explained.graph_count, len(explained.break_reasons)

    if not args.no_torch_compile:
        model_tc, opt_tc = _setup(args.layers, args.width, device, args.optimizer)
        models["torch.compile"] = model_tc

        def step_tc() -> None:
            opt_tc.step()

        results["torch.compile"] = _time_ms(torch.compile(step_tc), args.repeats, device)

    # every copy took the same number of steps: 3 warm-up + repeats
    reference = list(models["eager"].parameters())
    for name, m in models.items():
        for p, q in zip(m.parameters(), reference):
            if device.type == "cpu" and name == "framejit" and backend != "triton":
                assert torch.equal(p, q), "framejit's step differs from eager's"
            else:
                torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    n = 2 * args.layers
    title = "Adam" if args.optimizer == "adam" else "SGD(momentum)"
    print(
        f"{title} step, {n} parameter tensors of {args.width}x{args.width} and "
        f"{args.width}; {device.type}"
        + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else "")
        + f", framejit backend {backend!r} ({graphs} graph(s), {breaks} break(s) after the first"
        f" step); median of {args.repeats}"
    )
    for name, ms in results.items():
        print(f"  {name:14s} {ms:8.3f} ms")
    print(f"  eager / framejit = {results['eager'] / results['framejit']:.2f}")
    if "torch.compile" in results:
        print(f"  framejit / torch.compile = {results['framejit'] / results['torch.compile']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"device": device.type, "backend": backend, **results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
