"""Run torch's ModuleInfo samples (every nn module torch tests itself) through framejit.

For each module class in `torch.testing._internal.common_modules.module_db` (needs the
`expecttest` package), each constructor/forward sample, train and eval mode: build the module,
copy it, run one copy eagerly and the other through `framejit.jit(module, backend=...)` twice,
and compare outputs (tools/op_sweep.py's comparison), gradients of the inputs and parameters
when training, and the graph breaks (`framejit.explain`). Random modules (dropout inside
transformers, fractional pooling, RReLU) are compared by shape only.

    python tools/module_sweep.py                       # backend aot_eager
    python tools/module_sweep.py --backend triton --modules LayerNorm,GELU

Each sample is sorted ok / same-error / MISMATCH / ERROR as in op_sweep; `breaks` lists the
modules whose forward has a graph break, with the first reason.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import sys
import time
from collections import Counter
from typing import Any

# Not in a GPU test run (tests/device_mode.py), which loads this file too: the kernels must
# compile for the GPU there, and the variable would turn the interpreter on for the process.
if (
    importlib.util.find_spec("numpy") is not None
    and os.environ.get("FRAMEJIT_TEST_DEVICE") != "cuda"
):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import framejit  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "framejit_op_sweep", os.path.join(os.path.dirname(__file__), "op_sweep.py")
)
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

RANDOM = {"FractionalMaxPool2d", "FractionalMaxPool3d", "RReLU"}


def _args(sample: Any) -> tuple[tuple, dict]:
    return tuple(sample.forward_input.args), dict(sample.forward_input.kwargs)


def _grads(module: torch.nn.Module, outputs: Any, inputs: tuple) -> list[Any]:
    leaves = [a for a in sweep._flat(inputs) if isinstance(a, torch.Tensor) and a.requires_grad]
    leaves += [p for p in module.parameters() if p.requires_grad]
    return sweep._grads(outputs, leaves, 0)


def run_one(
    info: Any, sample: Any, backend: str, training: bool, dynamic: bool | None = None
) -> tuple[str, str, str]:
    """(outcome, why, first break reason)"""
    torch.manual_seed(0)
    module = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
    module.train(training)
    first = sample.forward_input.args[0] if sample.forward_input.args else None
    if isinstance(first, torch.Tensor) and first.dtype.is_floating_point:
        module.to(first.dtype)  # as torch's own module tests: parameters in the input's dtype
    twin = copy.deepcopy(module)
    third = copy.deepcopy(module)  # for explain(), which runs the module once more
    args, kwargs = _args(sample)
    eager_args = sweep._clone(args, True)
    fj_args = sweep._clone(args, True)
    values = info.module_cls.__name__ not in RANDOM
    if training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in module.modules()):
        values = False
    framejit.reset()
    eager_exc = None
    try:
        torch.manual_seed(1)
        expected = module(*eager_args, **kwargs)
        if training:
            expected = (expected, _grads(module, expected, eager_args))
    except Exception as exc:  # noqa: BLE001 - eager's own error is the reference
        eager_exc = exc
    try:
        jitted = framejit.jit(twin, backend=backend, dynamic=dynamic)
        torch.manual_seed(1)
        got = jitted(*fj_args, **kwargs)
        if training:
            got = (got, _grads(twin, got, fj_args))
        reason = ""
        explained = framejit.explain(third, *sweep._clone(args), **kwargs)
        if explained.break_reasons:
            reason = str(explained.break_reasons[0]).splitlines()[0][:240]
    except Exception as exc:  # noqa: BLE001 - sorted below
        if eager_exc is not None and type(exc) is type(eager_exc):
            return "same-error", "", ""
        return "ERROR", f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}", ""
    if eager_exc is not None:
        return "ERROR", f"eager raised {type(eager_exc).__name__}, framejit did not", reason
    why = sweep.compare(expected, got, values=values)
    if why is None and values:
        for (name, p), q in zip(module.state_dict().items(), twin.state_dict().values()):
            if isinstance(p, torch.Tensor) and not torch.allclose(p, q, equal_nan=True):
                why = f"state {name} differs after the call"
                break
    return ("ok", "", reason) if why is None else ("MISMATCH", why, reason)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", default="", help="comma-separated class names (default: all)")
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--dynamic", action="store_true", help="compile with dynamic=True")
    a = parser.parse_args()

    from torch.testing._internal.common_modules import module_db

    wanted = set(filter(None, a.modules.split(",")))
    dtype = sweep.DTYPES[a.dtype]
    counts: Counter[str] = Counter()
    breaks: dict[str, str] = {}
    t0 = time.perf_counter()
    for info in module_db:
        name = info.module_cls.__name__
        if (wanted and name not in wanted) or name.startswith("Lazy"):
            continue
        for training in (False, True):
            torch.manual_seed(0)
            try:
                samples = info.module_inputs_func(
                    info, device="cpu", dtype=dtype, requires_grad=training, training=training
                )[: a.samples]
            except Exception as exc:  # noqa: BLE001
                print(f"{name}: no samples ({type(exc).__name__})", flush=True)
                continue
            for i, sample in enumerate(samples):
                outcome, why, reason = run_one(info, sample, a.backend, training, a.dynamic or None)
                counts[outcome] += 1
                if reason and name not in breaks:
                    breaks[name] = reason
                if outcome in ("MISMATCH", "ERROR"):
                    mode = "train" if training else "eval"
                    print(f"{outcome} {name} {mode} sample {i}: {why}", flush=True)
        print(f"-- {name} done ({time.perf_counter() - t0:.0f}s)", flush=True)
    for name, reason in breaks.items():
        print(f"breaks {name}: {reason}")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"== {summary}, {len(breaks)} modules with breaks, in {time.perf_counter() - t0:.0f}s")
    return 1 if counts["MISMATCH"] or counts["ERROR"] else 0


if __name__ == "__main__":
    sys.exit(main())
