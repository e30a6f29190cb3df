"""Guard check time per call of a compiled model: the host time every cache hit pays first.

For a 12-layer MLP (Linear + GELU, 24 parameters) and the 12-layer GPT of models.py (148
parameters), compiled with the `eager` backend, one call compiles the entry; then its guard
function is timed alone on the same arguments (min over --repeats rounds of --calls checks)
in three forms:

    folded   the C++ accelerator with a module's guards, the values read from it and its
             submodules folded into one module_check call (guards/compile.py, the default)
    grouped  one module_check call per module, every other guard a Python line (how guards
             were compiled before the folding; made by hiding the build's MODULE_FACTS)
    python   every guard a Python line (config.cpp_guards = False: no extension)

Also printed: the guard count and the lines of the generated function. No target: the figures
go in the README (Guards and soundness) with the machine they were measured on.

    python tools/bench/guards.py [--calls N] [--repeats N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import torch
from framejit.guards import compile as guard_compile
from framejit.guards import guard as guard_module

import framejit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402 - tools/bench/models.py: the GPT the other benchmarks use


def mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    layers: list[torch.nn.Module] = []
    for _ in range(12):
        layers += [torch.nn.Linear(256, 256), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).eval(), torch.randn(8, 256)


def gpt() -> tuple[torch.nn.Module, torch.Tensor]:
    shape = models.GPTShape(layers=12, d_model=64, heads=4, vocab=128, max_seq=64)
    return models.GPT(shape).eval(), torch.randint(0, 128, (1, 8))


MODELS = {"mlp12": mlp, "gpt12": gpt}


class _NoFacts:
    """The extension as a build without module facts shows it (MODULE_FACTS hidden)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        if name == "MODULE_FACTS":
            raise AttributeError(name)
        return getattr(self._real, name)


def guard_time(make: Any, form: str, calls: int, repeats: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model, x = make()
    real = guard_compile._tensor_check
    before = framejit.config.cpp_guards
    framejit.config.cpp_guards = form != "python"
    if form == "grouped":
        guard_compile._tensor_check = _NoFacts(real)
    try:
        framejit.reset()
        jitted = framejit.jit(model, backend="eager")
        with torch.no_grad():
            jitted(x)
        entry = jitted.__dict__["_jit_forward"].__func__._cache.entries[0]
        guards = entry.guards
        forward = type(model).forward
        torch.set_grad_enabled(False)
        assert guards.check(forward, model, x), guards.why_failed(forward, model, x)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                guards.check(forward, model, x)
            best = min(best, (time.perf_counter() - start) / calls)
        torch.set_grad_enabled(True)
        lines = sum(1 for ln in guards.source.splitlines() if ln.lstrip().startswith("if not"))
        return {"us": best * 1e6, "guards": len(guards.guards), "checks": lines}
    finally:
        guard_compile._tensor_check = real
        framejit.config.cpp_guards = before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default="")
    a = parser.parse_args()
    if a.calls < 1 or a.repeats < 1:
        parser.error("--calls and --repeats must be >= 1")
    torch.set_num_threads(1)
    forms = ["folded", "grouped", "python"]
    if guard_module._tensor_check is None:  # no extension: only the Python lines
        forms = ["python"]
    results: dict[str, dict[str, Any]] = {}
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"{'model':8s} {'form':8s} {'µs/check':>9s} {'guards':>7s} {'checks':>7s}")
    for name, make in MODELS.items():
        for form in forms:
            r = guard_time(make, form, a.calls, a.repeats)
            results[f"{name}/{form}"] = r
            print(f"{name:8s} {form:8s} {r['us']:9.2f} {r['guards']:7d} {r['checks']:7d}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
