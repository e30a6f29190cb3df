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
once) divided by the median time of a call through `framejit.jit(fn, backend="triton")`, as a
fraction of the copy bandwidth (`dst.copy_(src)` on a 1 GiB tensor, read + write). Eager's
fraction is printed beside it. Targets: pointwise >= 0.85, softmax/layer_norm >= 0.75
(the same 0.75 for the other reductions, 0.85 for cat).

    python tools/bench/kernels.py [--repeats N] [--json results.json]

Without a CUDA device it says so and exits 0. Exit status on a GPU: 0 when every target is met.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class Result:
    case: str
    bytes: int
    framejit_ms: float
    eager_ms: float
    framejit_fraction: float
    eager_fraction: float
    target: float

    @property
    def ok(self) -> bool:
        return self.framejit_fraction >= self.target


def cuda_time_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median milliseconds of `fn` on the GPU (CUDA events), after three warm-up calls."""
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


def copy_bandwidth(repeats: int) -> float:
    """Bytes per millisecond of a device-to-device copy (read + write)."""
    src = torch.empty(256 * 1024 * 1024, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src), repeats)
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
            lambda x, w, b: F.layer_norm(x, (1024,), w, b),
            [dev(32768, 1024), dev(1024), dev(1024)],
            0.75,
        ),
        (
            "rms_norm",
            lambda x, w: F.rms_norm(x, (4096,), w),
            [dev(8192, 4096, dtype=torch.bfloat16), dev(4096, dtype=torch.bfloat16)],
            0.75,
        ),
        ("row_sum", lambda x: x.sum(-1), [dev(32768, 4096)], 0.75),
        ("col_amax", lambda x: x.amax(0), [dev(4096, 32768)], 0.75),
        ("cat", lambda x, y: torch.cat([x, y], -1) * 2, [dev(n, 4096), dev(n, 4096)], 0.85),
    ]


def run(repeats: int) -> list[Result]:
    import framejit

    copy = copy_bandwidth(repeats)
    print(f"device: {torch.cuda.get_device_name()}; copy bandwidth {copy / 1e6:.0f} GB/s")
    results = []
    for name, fn, inputs, target in _cases():
        with torch.no_grad():
            out = fn(*inputs)
            moved = sum(t.numel() * t.element_size() for t in {id(t): t for t in inputs}.values())
            moved += out.numel() * out.element_size()
            compiled = framejit.jit(fn, backend="triton")
            torch.testing.assert_close(compiled(*inputs), out, atol=2e-2, rtol=2e-2)
            fj = cuda_time_ms(lambda c=compiled, i=inputs: c(*i), repeats)
            eager = cuda_time_ms(lambda f=fn, i=inputs: f(*i), repeats)
        results.append(
            Result(name, moved, fj, eager, moved / fj / copy, moved / eager / copy, target)
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tools/bench/kernels.py measures GPU kernels: it needs a CUDA device (none here).")
        return 0
    results = run(args.repeats)
    print(f"{'case':12} {'framejit':>10} {'eager':>10} {'fj/copy':>8} {'eager/copy':>10} target")
    for r in results:
        mark = "ok" if r.ok else "MISS"
        print(
            f"{r.case:12} {r.framejit_ms:8.3f}ms {r.eager_ms:8.3f}ms {r.framejit_fraction:8.2f} "
            f"{r.eager_fraction:10.2f} >= {r.target:.2f} {mark}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) | {"ok": r.ok} for r in results], f, indent=2)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
