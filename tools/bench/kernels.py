"""Achieved bandwidth of framejit's fused Triton kernels vs the device's copy bandwidth (GPU).

Cases (float32 unless named; large enough to be memory-bound):

  pointwise   relu(x * y + z) * 0.5                        x, y, z: (8192, 8192)
  gelu_bf16   gelu(x + b), bfloat16                        x: (8192, 8192), b: (8192,)
  softmax     softmax(x, -1)                               x: (32768, 1024)
  softmax_4k  softmax(x, -1)                               x: (8192, 4096)
  layer_norm  layer_norm(x, (1024,), w, b)                 x: (32768, 1024)
  rms_norm    rms_norm(x, (4096,), w), bfloat16            x: (8192, 4096)
  row_sum     x.sum(-1)                                    x: (32768, 4096)
  col_amax    x.amax(0) (a reduction over the outer dim)   x: (4096, 32768)
  cat         cat([x, y], -1) * 2 (piecewise index)        x, y: (8192, 4096)

For each case: the bytes a perfect kernel must move (every input read once, every output written
once) divided by the time of a call through `framejit.jit(fn, backend="triton")`, as a fraction of
the copy bandwidth (`dst.copy_(src)` on a 1 GiB tensor, read + write). Two times per call:

  kernel   device time: a spin kernel (`torch.cuda._sleep`) is queued first so the host enqueues
           10 calls while the GPU waits, then CUDA events around the 10 calls; per call, median
           over the repeats. The host's per-call cost is hidden, as in a model whose host runs
           ahead of its GPU. The targets are on this figure.
  call     one call between events with the stream idle before it (synchronized each time): the
           host's guards, wrapper and launches count too (what a lone call costs).

Eager's and torch.compile's (default mode) fractions are printed beside framejit's, from the same
timings. Targets (kernel time): pointwise >= 0.85, softmax/layer_norm >= 0.75 (the same 0.75 for
the other reductions, 0.85 for cat).

    python tools/bench/kernels.py [--repeats N] [--json results.json] [--no-compile]

Without a CUDA device it says so and exits 0. Exit status on a GPU: 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class Result:
    case: str
    bytes: int
    target: float
    # per implementation (framejit, eager, torch.compile): kernel ms, call ms, kernel fraction
    kernel_ms: dict[str, float]
    call_ms: dict[str, float]
    fraction: dict[str, float]

    @property
    def framejit_fraction(self) -> float:
        return self.fraction["framejit"]

    @property
    def ok(self) -> bool:
        return self.framejit_fraction >= self.target


def cuda_time_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median milliseconds of one call of `fn` with the stream idle before it (the host's
    work before the first launch counts), after three warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


INNER = 10  # calls per timed batch in kernel_time_ms


def kernel_time_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median device milliseconds per call of `fn` (`device_and_host_ms`)."""
    return device_and_host_ms(fn, repeats)[0]


def device_and_host_ms(
    fn: Callable[[], Any], repeats: int, inner: int = INNER
) -> tuple[float, float]:
    """Medians of the device's milliseconds per call of `fn` and of the host's milliseconds to
    enqueue one: the GPU spins (`torch.cuda._sleep`) while the host enqueues `inner` calls
    behind the start event, so no host time falls between the events as long as the spin
    outlasts the host's work (it is sized from a first batch). Host time above device time is
    a host-bound call: the GPU would wait for the host between kernels."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    spin = 1_000_000  # cycles; doubled until the spin outlasts the host's enqueueing
    device, host = [], []
    while len(device) < repeats:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin)
        began = time.perf_counter()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        host_ms = (time.perf_counter() - began) * 1e3
        torch.cuda.synchronize()
        # the GPU may have waited on the host: spin longer (up to ~0.5 s: a host that is blocked,
        # by a full launch queue, say, waits for the spin whatever its length)
        if host_ms > 0.8 * spun_ms(spin) and spin < 2**30:
            spin *= 2
            continue
        device.append(start.elapsed_time(end) / inner)
        host.append(host_ms / inner)
    return statistics.median(device), statistics.median(host)


_SPIN_MS: dict[int, float] = {}


def spun_ms(cycles: int) -> float:
    """Milliseconds a `torch.cuda._sleep(cycles)` spin takes on this device (measured once)."""
    if cycles not in _SPIN_MS:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        _SPIN_MS[cycles] = start.elapsed_time(end)
    return _SPIN_MS[cycles]


def copy_bandwidth(repeats: int) -> float:
    """Bytes per millisecond of a device-to-device copy (read + write)."""
    src = torch.empty(256 * 1024 * 1024, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = kernel_time_ms(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() * src.element_size() / ms


def _cases() -> list[tuple[str, Callable[..., Any], list[torch.Tensor], float]]:
    def dev(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=dtype)

    n = 8192
    return [
        ("pointwise", lambda x, y, z: torch.relu(x * y + z) * 0.5, [dev(n, n)] * 3, 0.85),
        (
            "gelu_bf16",
            lambda x, b: F.gelu(x + b),
            [dev(n, n, dtype=torch.bfloat16), dev(n, dtype=torch.bfloat16)],
            0.85,
        ),
        ("softmax", lambda x: torch.softmax(x, -1), [dev(32768, 1024)], 0.75),
        ("softmax_4k", lambda x: torch.softmax(x, -1), [dev(8192, 4096)], 0.75),
        (
            "layer_norm",
            lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b),
            [dev(32768, 1024), dev(1024), dev(1024)],
            0.75,
        ),
        (
            "rms_norm",
            lambda x, w: F.rms_norm(x, x.shape[-1:], w),
            [dev(8192, 4096, dtype=torch.bfloat16), dev(4096, dtype=torch.bfloat16)],
            0.75,
        ),
        ("row_sum", lambda x: x.sum(-1), [dev(32768, 4096)], 0.75),
        ("col_amax", lambda x: x.amax(0), [dev(4096, 32768)], 0.75),
        ("cat", lambda x, y: torch.cat([x, y], -1) * 2, [dev(n, 4096), dev(n, 4096)], 0.85),
    ]


def run(repeats: int, with_compile: bool) -> list[Result]:
    import framejit

    copy = copy_bandwidth(repeats)
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {copy / 1e6:.0f} GB/s")
    results = []
    for name, fn, inputs, target in _cases():
        with torch.no_grad():
            out = fn(*inputs)
            moved = sum(t.numel() * t.element_size() for t in {id(t): t for t in inputs}.values())
            moved += out.numel() * out.element_size()
            impls: dict[str, Callable[..., Any]] = {
                "framejit": framejit.jit(fn, backend="triton"),
                "eager": fn,
            }
            if with_compile:
                impls["torch.compile"] = torch.compile(fn)
            kernel, call = {}, {}
            for impl, f in impls.items():
                try:
                    torch.testing.assert_close(f(*inputs), out, atol=2e-2, rtol=2e-2)
                except Exception as e:  # torch.compile may be unavailable here; framejit may not
                    if impl == "framejit":
                        raise
                    print(f"{name}: {impl} failed ({type(e).__name__}: {e}); left out")
                    continue
                kernel[impl] = kernel_time_ms(lambda f=f, i=inputs: f(*i), repeats)
                call[impl] = cuda_time_ms(lambda f=f, i=inputs: f(*i), repeats)
        fraction = {impl: moved / ms / copy for impl, ms in kernel.items()}
        results.append(Result(name, moved, target, kernel, call, fraction))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--no-compile", action="store_true", help="leave torch.compile out of the comparison"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tools/bench/kernels.py measures GPU kernels: it needs a CUDA device (none here).")
        return 0
    results = run(args.repeats, not args.no_compile)
    print("fraction of copy bandwidth from kernel time; ms per call: kernel / call (synchronized)")
    impls = ["framejit", "eager", "torch.compile"]
    print(f"{'case':12}" + "".join(f" {i:>24}" for i in impls) + "  target")
    for r in results:
        cells = []
        for impl in impls:
            if impl not in r.fraction:
                cells.append(f" {'-':>24}")
                continue
            cells.append(
                f" {r.fraction[impl]:5.2f} {r.kernel_ms[impl]:7.3f}/{r.call_ms[impl]:7.3f}ms"
            )
        mark = "ok" if r.ok else "MISS"
        print(f"{r.case:12}" + "".join(cells) + f"  >= {r.target:.2f} {mark}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) | {"ok": r.ok} for r in results], f, indent=2)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
