"""Per-call overhead on a cache hit: eager vs framejit vs torch.compile, all with backend="eager".

The cases do almost no kernel work, so what is left is the cost of getting into the compiled code
(guards, argument handling, the transformed code, the graph's Python):

  a. `x + 1` on a 1-element tensor
  b. the sum of 10 one-element tensor arguments
  c. `nn.Sequential` of 50 `Linear(4, 4)` on a (1, 4) input, under torch.no_grad() and with
     grad enabled
  d. `y = x + 1; print(...); return y * 2`: one graph break in the middle (the print goes to a
     sink that discards it, so its own cost is the same for all three)

Targets (each must be <= 1.0):
  a, b, d: framejit overhead / torch.compile overhead, where overhead = compiled - eager time
  c:    framejit time per call / torch.compile time per call

Timing: after warm-up (compilation included), each round times a tight loop of calls for each
of eager, framejit and torch.compile in turn (interleaved, so machine noise hits all three
alike), with the garbage collector off as in `timeit`; the reported figure is the median over
rounds of the per-call time.

    python tools/bench/overhead.py [--repeats N] [--json results.json]

Exit status: 0 when every target passes, 1 otherwise.

torch.compile is used here only as the point of comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

import framejit

IMPLS = ("eager", "framejit", "torch.compile")


@dataclass
class Measurement:
    case: str
    description: str
    us: dict[str, float]  # median microseconds per call, by implementation
    rounds_us: dict[str, list[float]] = field(default_factory=dict)
    metric: str = ""  # what the ratio compares
    ratio: float | None = None
    target: float = 1.0
    passed: bool | None = None
    framejit_graphs: int = 0  # graphs in the framejit cache entry that ran (1 = captured)
    framejit_entries: int = 0  # cache entries after timing (1 = no recompiles)
    spread: float = 0.0  # largest (p75 - p25) / median over the implementations: timing noise


def machine_info() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    try:
        load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        load = "?"
    try:
        from framejit.guards.guard import cpp_tensor_guards

        cpp = "yes" if cpp_tensor_guards() else "no"
    except ImportError:  # a framejit without the C++ TENSOR_MATCH
        cpp = "no"
    return {
        "framejit_cpp_tensor_guards": cpp,
        "load_average": load,
        "cpu": cpu,
        "cpu_count": str(os.cpu_count()),
        "torch_threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "framejit": getattr(framejit, "__version__", "?"),
        "platform": platform.platform(),
    }


def _loop_time(fn: Callable[..., Any], args: tuple[Any, ...], number: int) -> float:
    """Seconds per call over `number` calls of fn(*args)."""
    start = time.perf_counter()
    for _ in range(number):
        fn(*args)
    return (time.perf_counter() - start) / number


def _calibrate(fns: list[Callable[..., Any]], args: tuple[Any, ...], round_s: float) -> int:
    """Calls per round so that the slowest implementation takes about `round_s` per round."""
    per_call = max(_loop_time(fn, args, 50) for fn in fns)
    return max(20, int(round_s / max(per_call, 1e-9)))


def measure(
    impls: dict[str, Callable[..., Any]],
    args: tuple[Any, ...],
    repeats: int,
    round_s: float,
) -> tuple[dict[str, float], dict[str, list[float]]]:
    fns = list(impls.values())
    for fn in fns:  # warm-up beyond the compile: caches, allocator, branch predictors
        _loop_time(fn, args, 200)
    number = _calibrate(fns, args, round_s)
    rounds: dict[str, list[float]] = {name: [] for name in impls}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(repeats):
            # Rotate the order every round so no implementation always runs first.
            names = list(impls)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                rounds[name].append(_loop_time(impls[name], args, number) * 1e6)
    finally:
        if gc_was_enabled:
            gc.enable()
    return {name: statistics.median(v) for name, v in rounds.items()}, rounds


def _iqr(values: list[float]) -> float:
    if len(values) < 4:
        return max(values) - min(values)
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def _framejit_entries(jitted: Any) -> list[Any] | None:
    """The cache entries behind a framejit.jit result; None if its internals have moved."""
    try:
        if isinstance(jitted, framejit.JitModule):
            jitted = jitted.__dict__["_jit_forward"]
        return list(getattr(jitted, "__func__", jitted).cache.entries)
    except (AttributeError, KeyError):
        return None


def _check_and_count(jitted: Any, eager_out: Any, jit_out: Any, tc_out: Any) -> tuple[int, int]:
    """Outputs must equal eager's; returns (graphs in the latest entry, entries), -1 = unknown."""
    torch.testing.assert_close(jit_out, eager_out)
    torch.testing.assert_close(tc_out, eager_out)
    entries = _framejit_entries(jitted)
    if entries is None:
        return -1, -1
    graphs = len(entries[0].graphs) if entries else 0
    return graphs, len(entries)


def _add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _sum10(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):  # type: ignore[no-untyped-def]
    return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9


class _Sink:
    """A file that discards what is printed to it."""

    def write(self, text: str) -> int:
        return len(text)


_SINK = _Sink()


def _with_break(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    print("between the graphs", file=_SINK)
    return y * 2


def _run_case(
    case: str,
    description: str,
    fn: Any,
    args: tuple[Any, ...],
    repeats: int,
    round_s: float,
    metric: str,
) -> Measurement:
    framejit.reset()
    torch._dynamo.reset()  # each case starts from empty caches in both compilers
    jitted = framejit.jit(fn, backend="eager")
    compiled = torch.compile(fn, backend="eager")
    eager_out = fn(*args)
    jit_out = jitted(*args)  # compiles
    tc_out = compiled(*args)  # compiles
    graphs, _ = _check_and_count(jitted, eager_out, jit_out, tc_out)
    if case == "d":
        graphs = len(framejit.explain(fn, *args).graphs)
    us, rounds = measure(
        {"eager": fn, "framejit": jitted, "torch.compile": compiled}, args, repeats, round_s
    )
    _, entries = _check_and_count(jitted, eager_out, jitted(*args), compiled(*args))
    m = Measurement(
        case, description, us, rounds, metric, framejit_graphs=graphs, framejit_entries=entries
    )
    if metric == "overhead":
        fj = us["framejit"] - us["eager"]
        tc = us["torch.compile"] - us["eager"]
        # Overhead at or below eager beats any positive torch.compile overhead.
        m.ratio = fj / tc if tc > 0 else (0.0 if fj <= 0 else float("inf"))
    else:
        m.ratio = us["framejit"] / us["torch.compile"]
    m.passed = m.ratio <= m.target
    m.spread = max(_iqr(v) / statistics.median(v) for v in rounds.values())
    return m


def run(repeats: int, round_s: float) -> list[Measurement]:
    import torch._dynamo  # noqa: F401 - for torch._dynamo.reset() between cases

    results = []
    x = torch.ones(1)
    results.append(
        _run_case("a", "x + 1, 1-element tensor", _add_one, (x,), repeats, round_s, "overhead")
    )
    xs = tuple(torch.full((1,), float(i)) for i in range(10))
    results.append(
        _run_case("b", "sum of 10 1-element tensor args", _sum10, xs, repeats, round_s, "overhead")
    )
    torch.manual_seed(0)
    seq = nn.Sequential(*[nn.Linear(4, 4) for _ in range(50)])
    inp = torch.randn(1, 4)
    with torch.no_grad():
        results.append(
            _run_case(
                "c/no_grad",
                "Sequential(50 x Linear(4,4)), (1,4), no_grad",
                seq,
                (inp,),
                repeats,
                round_s,
                "time",
            )
        )
    results.append(
        _run_case(
            "c/grad",
            "Sequential(50 x Linear(4,4)), (1,4), grad on",
            seq,
            (inp,),
            repeats,
            round_s,
            "time",
        )
    )
    results.append(
        _run_case(
            "d",
            "x + 1; print(); y * 2: one graph break",
            _with_break,
            (x,),
            repeats,
            round_s,
            "overhead",
        )
    )
    return results


def render(results: list[Measurement], info: dict[str, str], repeats: int) -> str:
    lines = [
        "framejit cache-hit overhead benchmark (backend='eager' for framejit and torch.compile)",
        f"machine: {info['cpu']} ({info['cpu_count']} CPUs, torch threads "
        f"{info['torch_threads']}); python {info['python']}; torch {info['torch']}; "
        f"framejit {info['framejit']} (C++ tensor guards: "
        f"{info['framejit_cpp_tensor_guards']}); load average {info['load_average']}",
        f"median of {repeats} rounds, microseconds per call; ovh = time - eager time; "
        f"noise = IQR / median",
        "",
    ]
    head = (
        f"{'case':<10} {'eager':>9} {'framejit':>9} {'t.compile':>9} {'fj ovh':>8} "
        f"{'tc ovh':>8}  {'ratio':<22} {'noise':>6}  result"
    )
    lines += [head, "-" * len(head)]
    for m in results:
        e, f, t = m.us["eager"], m.us["framejit"], m.us["torch.compile"]
        what = "overhead fj/tc" if m.metric == "overhead" else "time fj/tc"
        ratio = f"{what} {m.ratio:.2f}"
        verdict = "PASS" if m.passed else "FAIL"
        lines.append(
            f"{m.case:<10} {e:>9.2f} {f:>9.2f} {t:>9.2f} {f - e:>8.2f} {t - e:>8.2f}  "
            f"{ratio:<22} {m.spread:>6.1%}  {verdict}"
        )
    lines.append("")
    for m in results:
        notes = []
        if m.framejit_graphs < 0:
            notes.append("framejit cache not inspectable")
        elif m.framejit_graphs != (2 if m.case == "d" else 1):
            notes.append(f"framejit captured {m.framejit_graphs} graphs")
        if m.framejit_entries > 1:
            notes.append(f"framejit has {m.framejit_entries} cache entries (recompiled)")
        lines.append(f"{m.case:<10} {m.description}" + (f"  [{'; '.join(notes)}]" if notes else ""))
    lines.append("")
    noisy = [m.case for m in results if m.spread > 0.05]
    if noisy:
        lines.append(
            f"note: timings of {', '.join(noisy)} vary by more than 5% between rounds; "
            "the machine is busy, rerun for firmer numbers"
        )
    failed = [m.case for m in results if not m.passed]
    lines.append("all targets PASS" if not failed else f"FAIL: {', '.join(failed)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=15,
        help="timed rounds per implementation (default 15); the median is reported",
    )
    p.add_argument(
        "--round-ms",
        type=float,
        default=40.0,
        help="target length of one round of the slowest implementation, in ms (default 40)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    info = machine_info()
    results = run(args.repeats, args.round_ms / 1e3)
    print(render(results, info, args.repeats))
    if args.json:
        payload = {
            "machine": info,
            "repeats": args.repeats,
            "unit": "microseconds per call (median over rounds)",
            "results": [asdict(m) for m in results],
            "all_passed": all(m.passed for m in results),
        }
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
        print(f"wrote {args.json}")
    return 0 if all(m.passed for m in results) else 1


if __name__ == "__main__":
    sys.exit(main())
