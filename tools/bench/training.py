"""Training step: memory saved for backward and compile time, framejit vs eager vs torch.compile.

For each model of tests/backend/models.py (an MLP, a CNN with BatchNorm in train mode, a small
GPT-style transformer) and the same transformer with each block under
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` ("gpt-ckpt"), one training step
(forward, loss, backward) is run:

  saved bytes   what autograd holds between forward and backward, counted with
                `torch.autograd.graph.saved_tensors_hooks`: every packed tensor's storage,
                each storage once. Eager autograd, framejit (`backend="aot_eager"`: its
                min-cut partition) and torch.compile(backend="aot_eager") on the same step.
  compile time  wall time of the first step (trace, AOT stage, partition, first run, and the
                backward's first run), framejit vs torch.compile(backend="aot_eager").

Targets: framejit saved bytes <= eager on each model, and <= torch.compile on gpt-ckpt (eager's
checkpoint keeps its inputs through its own saved-tensor hooks, which the count does not see:
its figure there is not comparable). Reported: framejit / torch.compile for saved bytes and for
compile time.

    python tools/bench/training.py [--json results.json]

Exit status: 0 when every target passes, 1 otherwise. torch.compile is used only as the point of
comparison (DESIGN.md: tools/ may use it).
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend"))

from models import MODELS, batch, loss  # noqa: E402

import framejit  # noqa: E402

NAMES = ("mlp", "cnn", "gpt", "gpt-ckpt")


class CheckpointedGPT(MODELS["gpt"]):  # type: ignore[misc, valid-type]
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return self.head(self.ln(x))


def _model(name: str) -> torch.nn.Module:
    return CheckpointedGPT() if name == "gpt-ckpt" else MODELS[name]()


def saved_bytes(step: Callable[[], None]) -> int:
    """Bytes of the distinct storages autograd packs for backward during `step`."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(storages.values())


def make_step(model: Any, name: str, x: torch.Tensor, target: torch.Tensor) -> Callable[[], None]:
    name = name.removesuffix("-ckpt")

    def step() -> None:
        loss(name, model(x), target).backward()

    return step


def measure(name: str) -> dict[str, Any]:
    torch.manual_seed(0)
    base = _model(name).train()
    x, target = batch(name.removesuffix("-ckpt"))
    models = {
        "eager": copy.deepcopy(base),
        "framejit": framejit.jit(copy.deepcopy(base), backend="aot_eager", fullgraph=True),
        "torch.compile": torch.compile(copy.deepcopy(base), backend="aot_eager", fullgraph=True),
    }
    compile_seconds: dict[str, float] = {}
    for key in ("framejit", "torch.compile"):
        start = time.perf_counter()
        make_step(models[key], name, x, target)()
        compile_seconds[key] = time.perf_counter() - start
    saved = {key: saved_bytes(make_step(m, name, x, target)) for key, m in models.items()}
    return {
        "model": name,
        "saved_bytes": saved,
        "framejit_vs_eager": saved["framejit"] / saved["eager"],
        "framejit_vs_torch_compile": saved["framejit"] / saved["torch.compile"],
        "compile_seconds": compile_seconds,
        "compile_ratio": compile_seconds["framejit"] / compile_seconds["torch.compile"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args(argv)
    results = [measure(name) for name in NAMES]
    header = (
        f"{'model':<8} {'eager B':>10} {'framejit B':>11} {'compile B':>10} "
        f"{'fj/eager':>9} {'fj/tc':>6} {'fj s':>7} {'tc s':>7} {'fj/tc time':>10}"
    )
    print(header)
    ok = True
    for r in results:
        s, c = r["saved_bytes"], r["compile_seconds"]
        if r["model"] == "gpt-ckpt":
            ok &= r["framejit_vs_torch_compile"] <= 1.0
        else:
            ok &= r["framejit_vs_eager"] <= 1.0
        print(
            f"{r['model']:<8} {s['eager']:>10} {s['framejit']:>11} {s['torch.compile']:>10} "
            f"{r['framejit_vs_eager']:>9.3f} {r['framejit_vs_torch_compile']:>6.3f} "
            f"{c['framejit']:>7.2f} {c['torch.compile']:>7.2f} {r['compile_ratio']:>10.2f}"
        )
    print(
        "target framejit saved bytes <= eager (gpt-ckpt: <= torch.compile):",
        "PASS" if ok else "FAIL",
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
