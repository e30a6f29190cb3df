"""End-to-end inference: framejit (backend `triton`) vs eager vs torch.compile (default mode).

Models (random weights, eval mode, `torch.no_grad()`):

  gpt2    GPT-2-small shape: 12 layers, d_model 768, 12 heads, MLP 3072 (GELU tanh), vocab 50257,
          learned positions, pre-LayerNorm, causal attention written out (matmul, mask, softmax)
          as GPT-2 does; batch 1 and batch 8, sequence 512 (--seq)
  resnet  ResNet-18 shape: conv-BN-ReLU stem, max pool, 4 stages of 2 BasicBlocks
          (64/128/256/512 channels), average pool, linear 1000; batch 8 at 224x224 (--batch)

Each model is timed in one process: the median of `--repeats` calls (CUDA events, after
warm-up, compile excluded) for eager, framejit and torch.compile, and the outputs of both
compilers are checked against eager. Printed: medians and the ratios eager/framejit
(speed-up, > 1 is faster than eager) and framejit/torch.compile (<= 1.10 meets the target
"within 10% of torch.compile or ahead"). Also timed for framejit: every kernel launched through
Triton's own `kernel[grid](...)`, and, for a model with convolutions, a second copy compiled
with `config.conv_layout = "keep"` (no channels-last convolutions: what that pass is worth).
For each of the three, the host's time to enqueue one call beside the device's time per call
(the GPU kept busy meanwhile): a call whose host time is above its device time is host-bound,
and then only host work (guards, the wrapper, launches) makes it faster. `--host-profile`
prints where framejit's host time goes (cProfile of 20 calls).

    python tools/bench/models.py [--models gpt2,resnet] [--dtype bfloat16] [--repeats 20]
                                 [--gpt2-batches 1,8] [--kernels] [--host-profile]
                                 [--json results.json]
    TRITON_INTERPRET=1 python tools/bench/models.py --smoke   # tiny shapes, checks only (CPU)

Without a CUDA device (and without --smoke) it says so and exits 0. torch.compile is used here
only, as the baseline being measured against.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import cuda_time_ms, device_and_host_ms  # noqa: E402 - the same timing

# ---------------------------------------------------------------------------------------------
# Models


@dataclass(frozen=True)
class GPTShape:
    layers: int = 12
    d_model: int = 768
    heads: int = 12
    vocab: int = 50257
    max_seq: int = 1024


class Attention(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.d_model, 3 * shape.d_model)
        self.proj = nn.Linear(shape.d_model, shape.d_model)
        causal = torch.tril(torch.ones(shape.max_seq, shape.max_seq, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(shape.d_model), nn.LayerNorm(shape.d_model)
        self.attn = Attention(shape)
        self.fc = nn.Linear(shape.d_model, 4 * shape.d_model)
        self.out = nn.Linear(4 * shape.d_model, shape.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.wte = nn.Embedding(shape.vocab, shape.d_model)
        self.wpe = nn.Embedding(shape.max_seq, shape.d_model)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # logits, weights tied as in GPT-2


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...] = (64, 128, 256, 512), classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        self.pool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], widths[0]
        for k, w in enumerate(widths):
            layers += [BasicBlock(cin, w, 1 if k == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.pool(self.stem(x)))
        return self.fc(x.mean((2, 3)))


def _randomize_batch_norm(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.1)


# ---------------------------------------------------------------------------------------------
# Timing


@dataclass
class Result:
    case: str
    eager_ms: float
    framejit_ms: float
    compile_ms: float | None
    framejit_compile_s: float
    speedup_vs_eager: float
    ratio_vs_compile: float | None
    # framejit with every kernel launched through Triton's `kernel[grid](...)`
    # (config.direct_launch off), and the launches of one timed call by path
    framejit_via_triton_ms: float = 0.0
    launches_per_call: str = ""
    # framejit with config.conv_layout = "keep" (no channels-last convolutions), for models
    # with convolutions (None: not measured)
    framejit_keep_layout_ms: float | None = None
    # {implementation: (host ms to enqueue one call, device ms per call)}, the GPU kept busy
    # while the host enqueues (kernels.device_and_host_ms): host > device is a host-bound call
    host_device_ms: dict[str, tuple[float, float]] = field(default_factory=dict)
    # torch.compile's first call (its compile), seconds, as framejit_compile_s
    compile_first_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.speedup_vs_eager > 1.0 and (
            self.ratio_vs_compile is None or self.ratio_vs_compile <= 1.10
        )


def _time_ms(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    if device.type == "cuda":
        return cuda_time_ms(fn, repeats)
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _host_profile(label: str, call: Callable[[], Any], calls: int = 20) -> None:
    """cProfile of `calls` steady-state calls, by own time: where the host's time goes."""
    call()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    print(f"{label}: host profile of {calls} calls, by own time", flush=True)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def _close(got: Any, expected: torch.Tensor, what: str) -> None:
    got = got[0] if isinstance(got, (tuple, list)) else got
    tol = 2e-2 if expected.dtype in (torch.float16, torch.bfloat16) else 1e-3
    scale = expected.float().abs().max().clamp_min(1.0)
    error = (got.float() - expected.float()).abs().max() / scale
    if not error <= tol * 5:
        raise AssertionError(f"{what}: max relative error {error.item():.3g}")


def _kernel_table(label: str, call: Callable[[], Any], device: torch.device, calls: int = 3):
    """Profile `calls` calls: the device's busy time per call next to the wall time (a wall
    time well above it is host-bound), and the ops/kernels that take the most device time."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    call()
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            call()
        if cuda:
            torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - start) * 1e3 / calls
    events = prof.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    if cuda and not hasattr(events[0], key):
        key = "self_cuda_time_total"  # older torch
    busy_ms = sum(getattr(e, key, 0) for e in events) / 1e3 / calls
    what = "device" if cuda else "cpu (self)"
    print(f"{label}: wall {wall_ms:.2f} ms/call, {what} time {busy_ms:.2f} ms/call", flush=True)
    print(events.table(sort_by=key, row_limit=12), flush=True)


def measure(
    case: str,
    model: nn.Module,
    inputs: tuple[torch.Tensor, ...],
    repeats: int,
    with_compile: bool,
    profile_first: bool = False,
    kernels: bool = False,
    host_profile: bool = False,
) -> Result:
    from framejit.backend.triton import launch

    import framejit

    device = inputs[0].device
    with torch.no_grad():
        expected = model(*inputs)
        profiler = cProfile.Profile() if profile_first else None
        start = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        fast = framejit.jit(model, backend="triton")
        _close(fast(*inputs), expected, f"{case}: framejit")
        if device.type == "cuda":
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        if profiler is not None:
            profiler.disable()
            print(f"{case}: framejit's first call, by cumulative time", flush=True)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        eager_ms = _time_ms(lambda: model(*inputs), repeats, device)
        before = dict(launch.STATS)
        fast(*inputs)
        per_call = ", ".join(f"{k} {launch.STATS[k] - before[k]}" for k in before)
        fj_ms = _time_ms(lambda: fast(*inputs), repeats, device)
        framejit.config.direct_launch = False
        try:
            via_triton_ms = _time_ms(lambda: fast(*inputs), repeats, device)
        finally:
            framejit.config.direct_launch = True
        keep_ms = None
        if any(isinstance(m, nn.Conv2d) for m in model.modules()):
            framejit.config.conv_layout = "keep"
            try:  # a copy of the model: the compiled entry above stays as it is
                plain = framejit.jit(copy.deepcopy(model), backend="triton")
                _close(plain(*inputs), expected, f"{case}: framejit, conv_layout keep")
                keep_ms = _time_ms(lambda: plain(*inputs), repeats, device)
            finally:
                framejit.config.conv_layout = "auto"
        tc_ms = compile_first_s = None
        calls = {"eager": lambda: model(*inputs), "framejit": lambda: fast(*inputs)}
        if kernels:
            _kernel_table(f"{case} eager", calls["eager"], device)
            _kernel_table(f"{case} framejit", calls["framejit"], device)
        if host_profile:
            _host_profile(f"{case} framejit", calls["framejit"])
        if with_compile:
            compiled = torch.compile(model)
            start = time.perf_counter()
            first = compiled(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            compile_first_s = time.perf_counter() - start
            _close(first, expected, f"{case}: torch.compile")
            tc_ms = _time_ms(lambda: compiled(*inputs), repeats, device)
            calls["torch.compile"] = lambda: compiled(*inputs)
            if kernels:
                _kernel_table(f"{case} torch.compile", calls["torch.compile"], device)
        # (host ms to enqueue one call, device ms per call); on the CPU both are the call's
        # time, measured above
        measured = {"eager": eager_ms, "framejit": fj_ms, "torch.compile": tc_ms}
        split = {
            impl: device_and_host_ms(call, repeats, inner=2)[::-1]
            if device.type == "cuda"
            else (measured[impl], measured[impl])
            for impl, call in calls.items()
        }
    return Result(
        case,
        eager_ms,
        fj_ms,
        tc_ms,
        compile_s,
        eager_ms / fj_ms,
        None if tc_ms is None else fj_ms / tc_ms,
        via_triton_ms,
        per_call,
        keep_ms,
        split,
        compile_first_s,
    )


def cases(
    names: list[str],
    device: torch.device,
    dtype: torch.dtype,
    seq: int,
    batch: int,
    smoke: bool,
    gpt2_batches: tuple[int, ...] = (1, 8),
) -> list[tuple[str, nn.Module, tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    found = []
    if "gpt2" in names:
        shape = (
            GPTShape(layers=2, d_model=32, heads=2, vocab=101, max_seq=16) if smoke else GPTShape()
        )
        seq = min(seq, shape.max_seq) if not smoke else 8
        model = GPT(shape).eval().to(device, dtype)
        for b in gpt2_batches if not smoke else (1, 2):
            ids = torch.randint(0, shape.vocab, (b, seq), device=device)
            found.append((f"gpt2 b={b} t={seq}", model, (ids,)))
    if "resnet" in names:
        model = ResNet((8, 8, 16, 16), 10) if smoke else ResNet()
        _randomize_batch_norm(model)
        model = model.eval().to(device, dtype)
        side, n = (32, 2) if smoke else (224, batch)
        x = torch.randn(n, 3, side, side, device=device, dtype=dtype)
        found.append((f"resnet18 b={n} {side}x{side}", model, (x,)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2,resnet")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8, help="ResNet batch")
    parser.add_argument("--gpt2-batches", default="1,8", help="GPT-2 batches, in this order")
    parser.add_argument(
        "--profile-first", action="store_true", help="print a profile of framejit's first call"
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--kernels",
        action="store_true",
        help="also profile 3 calls of eager, framejit and torch.compile: device time per call "
        "(host-bound or not) and the kernels that take the most",
    )
    parser.add_argument(
        "--host-profile",
        action="store_true",
        help="also print a cProfile of 20 steady-state framejit calls (where host time goes)",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CPU: checks only)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("tools/bench/models.py measures GPU inference: it needs a CUDA device (none here).")
        return 0
    device = torch.device("cuda" if cuda else "cpu")
    dtype = getattr(torch, args.dtype) if cuda else torch.float32
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    with_compile = not args.no_compile and cuda
    where = torch.cuda.get_device_name() if cuda else "cpu (smoke: Triton's interpreter)"
    print(f"device: {where}; dtype {dtype}; torch {torch.__version__}")
    results = []
    gpt2_batches = tuple(int(b) for b in args.gpt2_batches.split(","))
    found = cases(names, device, dtype, args.seq, args.batch, args.smoke, gpt2_batches)
    for case, model, inputs in found:
        repeats = 3 if args.smoke else args.repeats
        result = measure(
            case,
            model,
            inputs,
            repeats,
            with_compile,
            args.profile_first,
            args.kernels,
            args.host_profile,
        )
        results.append(result)
        tc = "-" if result.compile_ms is None else f"{result.compile_ms:8.2f}ms"
        ratio = "-" if result.ratio_vs_compile is None else f"{result.ratio_vs_compile:.2f}"
        print(
            f"{case:24} eager {result.eager_ms:8.2f}ms  framejit {result.framejit_ms:8.2f}ms  "
            f"torch.compile {tc}  eager/framejit {result.speedup_vs_eager:.2f}  "
            f"framejit/compile {ratio}  (first call: framejit {result.framejit_compile_s:.1f}s"
            + (
                ""
                if result.compile_first_s is None
                else f", torch.compile {result.compile_first_s:.1f}s"
            )
            + ")",
            flush=True,
        )
        print(
            f"{'':24} framejit launching through Triton only {result.framejit_via_triton_ms:.2f}ms;"
            f" launches per call: {result.launches_per_call}",
            flush=True,
        )
        split = ", ".join(
            f"{impl} {host:.2f}/{dev:.2f}" for impl, (host, dev) in result.host_device_ms.items()
        )
        print(f"{'':24} host/device ms per call (host > device: host-bound): {split}", flush=True)
        if result.framejit_keep_layout_ms is not None:
            print(
                f"{'':24} framejit without channels-last convolutions (conv_layout keep) "
                f"{result.framejit_keep_layout_ms:.2f}ms",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) | {"ok": r.ok} for r in results], f, indent=2)
    if args.smoke:
        return 0
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
