"""CUDA graph trees (mode="reduce-overhead"): framejit vs eager vs torch.compile, on the GPU.

Cases (float32):

  mlp_infer   a launch-bound 12-layer MLP (width 256) at batch 1, no_grad
  mlp_train   one training step of the same MLP at batch 8 (forward, MSE loss, backward)

For each: the median time per call of eager, framejit (`backend="auto"`, `mode="reduce-overhead"`)
and torch.compile(mode="reduce-overhead"), the ratios eager/framejit and torch.compile/framejit;
framejit's replay overhead per call (a call of the jitted function minus a bare
`CUDAGraph.replay()` of framejit's own recorded graph, in microseconds; beside it a hand-made
graph of eager's ops, which runs other kernels); and peak memory during the timed calls,
as a ratio to eager (and in MiB: the whole process's allocated memory, so every model's
parameters and whatever cuBLAS workspaces are held at the time count). For framejit it also says
what its trees did during the case: recordings, replays, warm-ups, calls run without graphs, and
why a graph was refused, so a slow case shows whether it replayed at all. Targets: >= 3x eager
on mlp_infer, within 10% of torch.compile or ahead, peak memory <= torch.compile's.

    python tools/bench/cudagraphs.py [--repeats N] [--json results.json]

Without a CUDA device it says so and exits 0. torch.compile is used only as the point of
comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

WIDTH, LAYERS = 256, 12


def make_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda()


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds per call over `repeats` batches of 20 calls, after 5 warm-up calls."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / 20)
    return statistics.median(samples)


def peak_memory(fn: Callable[[], Any]) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def inference_step(model: Any, x: torch.Tensor) -> Callable[[], Any]:
    def step() -> Any:
        with torch.no_grad():
            return model(x)

    return step


def training_step(model: Any, params: list, x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
    def step() -> None:
        torch.nn.functional.mse_loss(model(x), y).backward()
        for p in params:
            p.grad = None

    return step


def bare_replay_us(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    """A hand-made CUDA graph of the same forward: the floor framejit's replay is measured on."""
    static = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            model(static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        model(static)
    return timed(graph.replay, repeats) * 1e6


def own_replay_us(repeats: int) -> float | None:
    """framejit's one recorded graph replayed bare (`CUDAGraph.replay()`, nothing else): the
    floor of a call of the jitted function. None unless exactly one graph was recorded."""
    from framejit import cudagraphs

    graphs = [
        node.graph
        for manager in cudagraphs.managers().values()
        for nodes in manager.roots.values()
        for node in nodes
        if not node.children
    ]
    if len(graphs) != 1 or not isinstance(graphs[0], torch.cuda.CUDAGraph):
        return None
    return timed(graphs[0].replay, repeats) * 1e6


def tree_report() -> dict[str, Any]:
    """What framejit's CUDA graph trees did so far (framejit.cudagraphs managers' counters)."""
    from framejit import cudagraphs

    report: dict[str, Any] = {
        "recordings": 0,
        "replays": 0,
        "warm_ups": 0,
        "runs_without_graphs": 0,
        "refused": [],
    }
    for manager in cudagraphs.managers().values():
        report["recordings"] += manager.nodes
        report["replays"] += manager.replays
        report["warm_ups"] += manager.warm_ups
        report["runs_without_graphs"] += manager.eager_runs
        report["refused"] += manager.refusals
    return report


def run_case(name: str, repeats: int) -> dict[str, Any]:
    import framejit

    model = make_mlp()
    variants: dict[str, Any] = {
        "eager": model,
        "framejit": framejit.jit(copy.deepcopy(model), mode="reduce-overhead"),
        "torch.compile": torch.compile(copy.deepcopy(model), mode="reduce-overhead"),
    }
    batch = 1 if name == "mlp_infer" else 8
    x = torch.randn(batch, WIDTH, device="cuda")
    y = torch.randn(batch, WIDTH, device="cuda")
    seconds, memory = {}, {}
    for label, m in variants.items():
        if name == "mlp_infer":
            step = inference_step(m, x)
        else:
            target = m._orig_mod if hasattr(m, "_orig_mod") else m
            step = training_step(m, list(target.parameters()), x, y)
        if label == "framejit":
            framejit.mark_step_begin()
        seconds[label] = timed(step, repeats)
        memory[label] = peak_memory(step)
        if label == "framejit":
            trees = tree_report()
            own = own_replay_us(repeats) if name == "mlp_infer" else None
    result: dict[str, Any] = {
        "case": name,
        "ms": {k: v * 1e3 for k, v in seconds.items()},
        "speedup_vs_eager": seconds["eager"] / seconds["framejit"],
        "vs_torch_compile": seconds["torch.compile"] / seconds["framejit"],
        "peak_memory_vs_eager": {k: memory[k] / memory["eager"] for k in memory},
        "peak_memory_mib": {k: v / 2**20 for k, v in memory.items()},
        "framejit_trees": trees,
    }
    if name == "mlp_infer":
        if own is not None:
            result["replay_overhead_us"] = seconds["framejit"] * 1e6 - own
        result["eager_graph_replay_us"] = bare_replay_us(model, x, repeats)
    framejit.reset()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tools/bench/cudagraphs.py needs a CUDA device (none found): nothing measured")
        return 0
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    results = [run_case(name, args.repeats) for name in ("mlp_infer", "mlp_train")]
    ok = True
    for r in results:
        ms = "  ".join(f"{k} {v:.3f} ms" for k, v in r["ms"].items())
        mem = "  ".join(f"{k} {v:.2f}" for k, v in r["peak_memory_vs_eager"].items())
        print(f"{r['case']:<10} {ms}")
        print(
            f"{'':<10} eager/framejit {r['speedup_vs_eager']:.2f}x  "
            f"torch.compile/framejit {r['vs_torch_compile']:.2f}x  peak memory vs eager: {mem}"
        )
        mib = "  ".join(f"{k} {v:.1f}" for k, v in r["peak_memory_mib"].items())
        print(f"{'':<10} peak memory MiB: {mib}")
        t = r["framejit_trees"]
        print(
            f"{'':<10} framejit trees: {t['recordings']} recordings, {t['replays']} replays, "
            f"{t['warm_ups']} warm-ups, {t['runs_without_graphs']} runs without graphs"
        )
        for reason in t["refused"]:
            print(f"{'':<10} refused: {reason}")
        if "eager_graph_replay_us" in r:
            own = r.get("replay_overhead_us")
            print(
                f"{'':<10} replay overhead per call: "
                f"{'-' if own is None else f'{own:.1f}'} us over framejit's own graph "
                f"replayed bare; a graph of eager's ops replays in "
                f"{r['eager_graph_replay_us']:.1f} us"
            )
        if r["case"] == "mlp_infer":
            ok &= r["speedup_vs_eager"] >= 3.0 and r["vs_torch_compile"] >= 0.9
        peaks = r["peak_memory_vs_eager"]
        ok &= peaks["framejit"] <= peaks["torch.compile"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
