"""Every nn module torch tests itself (its ModuleInfo database), in eval and train mode,
through framejit (`aot_eager`: capture, the AOT stage and its backward), against eager:
outputs, gradients of inputs and parameters under a weighted loss, and module state (running
statistics) after the call. The whole database, one sample per module and mode; more samples
and other backends: `tools/module_sweep.py`."""

from __future__ import annotations

import importlib.util
import pathlib
from typing import Any

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's ModuleInfo database imports expecttest")

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "module_sweep.py"
_spec = importlib.util.spec_from_file_location("framejit_module_sweep", _PATH)
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)


def _infos() -> list[Any]:
    from torch.testing._internal.common_modules import module_db

    return [m for m in module_db if not m.module_cls.__name__.startswith("Lazy")]


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("info", _infos(), ids=lambda m: m.module_cls.__name__)
def test_module_matches_eager(info: Any, training: bool) -> None:
    torch.manual_seed(0)
    samples = info.module_inputs_func(
        info, device="cpu", dtype=torch.float32, requires_grad=training, training=training
    )
    if not samples:
        pytest.skip("no samples")
    outcome, why, _ = sweep.run_one(info, samples[0], "aot_eager", training)
    assert outcome in ("ok", "same-error"), f"{outcome}: {why}"
