"""A small autotune: each kernel launches with the fastest of a few configs (block sizes and
warps), chosen by timing on its first call.

`configs(kind, xnumel, rnumel, persistent, wide)` lists the candidates; the first is the
heuristic choice, so a kernel with one candidate, or one run where timing means nothing, behaves
as it did before tuning existed. `wide=True` (`mode="max-autotune"`, `config.max_autotune`) lists
more. A generated module holds one `Launcher` per kernel with more than one candidate.

Invariants:

- Timing happens only on a CUDA device. Under Triton's CPU interpreter (tests) the first config
  is taken without running anything twice.
- Timing runs the kernel several times on the call's own arguments. That is safe because a
  kernel only writes its output buffers, which are fresh, and its index-check rows (the same
  flags on every run), and reads its inputs.
- The choice is remembered per (kernel, device) in `<module>.tune.json` next to the generated
  module (written whole, then renamed), so a second process takes it without timing. The module
  file's name hashes its source, which holds the candidate list, so a remembered index always
  refers to the same configs.
- A config that fails to compile (too many registers, too much shared memory) is skipped.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from framejit.backend.triton.launch import Launches, compile_options

Config = dict[str, int]

STATS = {"timed": 0, "remembered": 0, "first": 0}


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


# Below this many elements a kernel is launch-bound: one config, no timing.
TUNE_MIN_ELEMENTS = 1 << 16


def configs(kind: str, xnumel: int, rnumel: int, persistent: bool, wide: bool) -> list[Config]:
    """Candidate launch configs; the first is the heuristic default. `kind`: `pointwise`,
    `reduction` (rows contiguous along the reduction) or `reduction_x_major`."""
    xmax = _pow2(xnumel)
    found: list[Config] = []

    def add(**cfg: int) -> None:
        if cfg not in found:
            found.append(cfg)

    if kind == "pointwise":
        add(XBLOCK=min(1024, xmax), num_warps=4)
        if xnumel >= TUNE_MIN_ELEMENTS:
            blocks = [256, 512, 1024, 2048, 4096] if wide else [512, 2048, 4096]
            for block in blocks:
                for warps in [2, 4, 8] if wide else [4 if block <= 1024 else 8]:
                    if block // (32 * warps) >= 1:
                        add(XBLOCK=min(block, xmax), num_warps=warps)
        return found
    total = xnumel * max(rnumel, 1)
    if kind == "reduction_x_major":  # tiles of many rows x a few reduction steps
        rmax = _pow2(max(rnumel, 1))
        add(XBLOCK=min(64, xmax), RBLOCK=min(16, rmax), num_warps=4)
        if total >= TUNE_MIN_ELEMENTS:
            pairs = [(x, r) for x in (32, 64, 128, 256) for r in (4, 8, 16, 32, 64)]
            if not wide:
                pairs = [(128, 8), (32, 32), (256, 4)]
            for x, r in pairs:
                for w in [2, 4, 8] if wide else [4]:
                    add(XBLOCK=min(x, xmax), RBLOCK=min(r, rmax), num_warps=w)
        return found
    if persistent:
        rblock = _pow2(max(rnumel, 1))
        xblock = min(xmax, max(1, 4096 // rblock))
        warps = 8 if rblock >= 2048 else 4
        add(XBLOCK=xblock, RBLOCK=rblock, num_warps=warps)
        if total >= TUNE_MIN_ELEMENTS:
            xblocks = [1, 2, 4, 8, 16, 32, 64] if wide else [max(1, xblock // 2), xblock * 2]
            for xb in xblocks:
                if xb * rblock > 16384:
                    continue
                for w in [2, 4, 8, 16] if wide else [warps]:
                    add(XBLOCK=min(xb, xmax), RBLOCK=rblock, num_warps=w)
            if not wide:
                add(XBLOCK=xblock, RBLOCK=rblock, num_warps=min(16, warps * 2))
        return found
    add(XBLOCK=1, RBLOCK=1024, num_warps=4)
    if total >= TUNE_MIN_ELEMENTS:
        rmax = _pow2(rnumel)
        pairs = (
            [(r, w) for r in (512, 1024, 2048, 4096, 8192) for w in (2, 4, 8, 16)]
            if wide
            else [(2048, 8), (4096, 8)]
        )
        for r, w in pairs:
            if r <= rmax and r // (32 * w) >= 1:
                add(XBLOCK=1, RBLOCK=r, num_warps=w)
    return found


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Launcher:
    """`launcher(*args)` launches `kernel` over `xnumel` rows/elements with the best config;
    `launcher.launch(grid, *args)` launches a kernel whose size is symbolic (`xnumel` None, one
    candidate) over `grid`. Launches go through `launch.Launches` (Triton's per-call work
    skipped where it can be)."""

    def __init__(
        self,
        kernel: Any,
        xnumel: int | None,
        candidates: list[Config],
        module_file: str | None = None,
        timer: Callable[[Callable[[], Any]], float] | None = None,
    ) -> None:
        self.kernel = kernel
        self.xnumel = xnumel
        self.candidates = candidates
        self.record = Path(module_file[:-3] + ".tune.json") if module_file else None
        self.timer = timer
        self.grid: tuple[int, int, int] | None = None
        self.config: Config = candidates[0]
        self.launches = Launches(kernel, self.config)

    def __call__(self, *args: Any) -> None:
        if self.grid is None:
            self._choose(args)
        self.launches.launch(self.grid, args)

    def launch(self, grid: tuple[int, ...], *args: Any) -> None:
        self.launches.launch(grid, args)

    def _grid(self, config: Config) -> tuple[int, int, int]:
        return (_cdiv(self.xnumel, config["XBLOCK"]), 1, 1)

    def _choose(self, args: tuple[Any, ...]) -> None:
        device = next((a.device for a in args if hasattr(a, "device")), None)
        if len(self.candidates) == 1 or device is None or device.type != "cuda":
            STATS["first"] += 1
            self._take(0)
            return
        key = f"{_kernel_name(self.kernel)}|{_device_name(device)}"
        remembered = self._read().get(key)
        if isinstance(remembered, int) and 0 <= remembered < len(self.candidates):
            STATS["remembered"] += 1
            self._take(remembered)
            return
        STATS["timed"] += 1
        timer = self.timer or _time
        best, best_ms, first_error = 0, float("inf"), None
        options = compile_options(self.kernel)
        for k, config in enumerate(self.candidates):
            grid = self._grid(config)
            try:
                ms = timer(lambda g=grid, c=config: self.kernel[g](*args, **c, **options))
            except Exception as e:  # out of resources for this config: try the next
                first_error = first_error or e
                continue
            if ms < best_ms:
                best, best_ms = k, ms
        if best_ms == float("inf") and first_error is not None:
            raise first_error
        self._take(best)
        self._write(key, best)

    def _take(self, k: int) -> None:
        self.config = self.candidates[k]
        self.grid = self._grid(self.config)
        self.launches = Launches(self.kernel, self.config)

    def _read(self) -> dict[str, Any]:
        if self.record is None or not self.record.exists():
            return {}
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}

    def _write(self, key: str, index: int) -> None:
        if self.record is None:
            return
        data = self._read() | {key: index}
        try:
            fd, tmp = tempfile.mkstemp(dir=self.record.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.record)
        except OSError:  # a read-only cache: tune again next time
            pass


def _kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "fn", kernel)
    return getattr(fn, "__name__", repr(kernel))


def _device_name(device: Any) -> str:
    import torch

    props = torch.cuda.get_device_properties(device)
    return f"{props.name} sm{props.major}{props.minor}"


def _time(launch: Callable[[], Any]) -> float:
    """Median milliseconds of `launch` on the GPU (after a compile-and-warm-up call)."""
    import triton.testing

    launch()
    return float(triton.testing.do_bench(launch, warmup=5, rep=20, return_mode="median"))
