"""Whole-script mode: what the frame hook costs a program that has no tensor work, and what the
hook path costs per call next to the `@framejit.jit` path for one that does.

1. Pure Python (no tensors): an n-body simulation, a richards-like task scheduler and JSON round
   trips, many small function calls. Timed with the hook on for every thread (as FRAMEJIT=1
   does) and off, interleaved in one process after one warm-up round (every code object is then
   marked skip). Target: hook on at most 5% slower.
2. Tensors: a small training-step function (two matmuls, a relu, a loss) called with the hook on
   (`framejit.enabled`) vs decorated with `framejit.jit`, backend "eager" for both. Checked: the
   same number of graphs and the same results. Target: hook path per-call time <= decorator path.

    python tools/bench/whole_script.py [--rounds N]

Exit status: 0 when both targets pass, 1 otherwise. Timing: garbage collector off; the median
over rounds is reported.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable

import torch
from framejit.frontend import hook

import framejit
from framejit.testing import CompileCounter

# --- 1. pure-Python workload ------------------------------------------------------------------


class Body:
    def __init__(self, x: float, y: float, z: float, vx: float, vy: float, vz: float, m: float):
        self.pos = [x, y, z]
        self.vel = [vx, vy, vz]
        self.mass = m


def make_bodies() -> list[Body]:
    return [
        Body(0, 0, 0, 0, 0, 0, 39.47),
        Body(4.84, -1.16, -0.10, 0.60, 2.81, -0.02, 0.037),
        Body(8.34, 4.12, -0.40, -1.01, 1.82, 0.008, 0.011),
        Body(12.89, -15.11, -0.22, 1.08, 0.86, -0.01, 0.0017),
        Body(15.37, -25.91, 0.17, 0.97, 0.59, -0.03, 0.002),
    ]


def distance(a: Body, b: Body) -> tuple[float, float, float, float]:
    dx, dy, dz = (a.pos[i] - b.pos[i] for i in range(3))
    return dx, dy, dz, math.sqrt(dx * dx + dy * dy + dz * dz)


def advance(bodies: list[Body], dt: float) -> None:
    for i, a in enumerate(bodies):
        for b in bodies[i + 1 :]:
            dx, dy, dz, d = distance(a, b)
            mag = dt / (d * d * d)
            for k, dk in enumerate((dx, dy, dz)):
                a.vel[k] -= dk * b.mass * mag
                b.vel[k] += dk * a.mass * mag
    for body in bodies:
        for k in range(3):
            body.pos[k] += dt * body.vel[k]


def energy(bodies: list[Body]) -> float:
    e = 0.0
    for i, a in enumerate(bodies):
        e += 0.5 * a.mass * sum(v * v for v in a.vel)
        for b in bodies[i + 1 :]:
            e -= a.mass * b.mass / distance(a, b)[3]
    return e


def nbody(steps: int) -> float:
    bodies = make_bodies()
    for _ in range(steps):
        advance(bodies, 0.01)
    return energy(bodies)


class Task:
    def __init__(self, name: int, priority: int, work: int) -> None:
        self.name, self.priority, self.work, self.done = name, priority, work, 0

    def run(self) -> bool:
        self.done += 1
        return self.done >= self.work


def schedule(n_tasks: int) -> int:
    queue = [Task(i, (i * 7) % 5, 1 + i % 9) for i in range(n_tasks)]
    ticks = 0
    while queue:
        queue.sort(key=lambda t: (t.priority, t.name))
        task = queue.pop(0)
        ticks += 1
        if not task.run():
            task.priority = (task.priority + 1) % 5
            queue.append(task)
    return ticks


def json_round_trips(n: int) -> int:
    total = 0
    for i in range(n):
        doc = {"id": i, "tags": [f"t{j}" for j in range(5)], "nested": {"a": i * 0.5, "b": None}}
        total += len(json.loads(json.dumps(doc))["tags"])
    return total


def pure_workload() -> tuple[float, int, int]:
    return nbody(600), schedule(300), json_round_trips(1500)


# --- 2. tensor workload -----------------------------------------------------------------------


def train_step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, y: torch.Tensor):
    h = torch.relu(x @ w1)
    pred = h @ w2
    return ((pred - y) ** 2).mean(), pred


def _time(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    if not hook.available():
        print(f"whole_script.py: {hook.unavailable_reason()}", file=sys.stderr)
        return 1
    gc.disable()
    torch.set_num_threads(1)  # steadier timings on a shared machine

    # 1. pure Python
    expected = pure_workload()  # also the warm-up of the plain path
    hook.set_global(True)
    assert pure_workload() == expected  # warm-up: every code object seen once, marked skip
    hook.set_global(False)
    off, on = [], []
    for _ in range(args.rounds):
        off.append(_time(pure_workload, 1))
        hook.set_global(True)
        on.append(_time(pure_workload, 1))
        hook.set_global(False)
    t_off, t_on = statistics.median(off), statistics.median(on)
    slowdown = t_on / t_off - 1
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}")
    print("1. pure Python (n-body, scheduler, JSON), one run of the workload:")
    print(f"   hook off {t_off * 1e3:8.1f} ms")
    print(f"   hook on  {t_on * 1e3:8.1f} ms   ({slowdown * 100:+.1f}%, target <= +5%)")

    # 2. tensors
    g = torch.Generator().manual_seed(0)
    x, w1, w2, y = (torch.randn(s, generator=g) for s in ((16, 32), (32, 64), (64, 8), (16, 8)))
    hook_counter, jit_counter = CompileCounter(), CompileCounter()
    jitted = framejit.jit(train_step, backend=jit_counter)
    calls = 2000
    with framejit.enabled(backend=hook_counter):
        hook_out = train_step(x, w1, w2, y)
    jit_out = jitted(x, w1, w2, y)
    eager_out = train_step(x, w1, w2, y)
    for a, b in zip((hook_out, jit_out), (eager_out, eager_out)):
        torch.testing.assert_close(a, b)
    times: dict[str, list[float]] = {"eager": [], "hook": [], "jit": []}
    for _ in range(args.rounds):
        times["eager"].append(_time(lambda: train_step(x, w1, w2, y), calls))
        with framejit.enabled(backend=hook_counter):
            times["hook"].append(_time(lambda: train_step(x, w1, w2, y), calls))
        times["jit"].append(_time(lambda: jitted(x, w1, w2, y), calls))
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print("2. tensor training step, per call (backend eager):")
    for name in ("eager", "hook", "jit"):
        extra = f"   overhead {med[name] - med['eager']:+6.2f} us" if name != "eager" else ""
        print(f"   {name:5s} {med[name]:8.2f} us{extra}")
    print(f"   graphs: hook {hook_counter.frame_count}, jit {jit_counter.frame_count}")
    same_graphs = hook_counter.frame_count == jit_counter.frame_count == 1
    ok_pure = slowdown <= 0.05
    ok_tensor = med["hook"] <= med["jit"] and same_graphs
    print(
        f"targets: pure Python {'PASS' if ok_pure else 'FAIL'}, "
        f"hook <= jit {'PASS' if ok_tensor else 'FAIL'}"
    )
    return 0 if ok_pure and ok_tensor else 1


if __name__ == "__main__":
    sys.exit(main())
