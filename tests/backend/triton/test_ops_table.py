"""The op table covers the core op set: every op of CORE_OPS has a lowering or is an extern on
purpose, and an op without a lowering runs as an aten call with a perf_hints line."""

from __future__ import annotations

import torch
from framejit.backend.aot import CORE_OPS
from framejit.backend.triton.ops import EXTERN_OPS, LOWERINGS
from triton_helpers import aten_stages, check

DTYPE_RULES = {"promote", "compare", "logical", "same", "given"}


def test_every_core_op_is_lowered_or_extern() -> None:
    missing = sorted(CORE_OPS - set(LOWERINGS) - EXTERN_OPS)
    assert missing == [], f"core ops with neither a lowering nor an extern entry: {missing}"
    assert set(LOWERINGS) & EXTERN_OPS == set()


def test_dtype_rules_are_known() -> None:
    assert {rule.dtype for rule in LOWERINGS.values()} <= DTYPE_RULES


def test_lowered_share_of_core_ops() -> None:
    lowered = CORE_OPS & set(LOWERINGS)
    assert len(lowered) >= 95, len(lowered)


# The ops the backend promises to lower (not run as externs), by aten name.
PROMISED_OPS = [
    "where",
    "clamp",
    "_to_copy",
    "eq",
    "lt",
    "logical_and",
    "logical_not",
    "bitwise_and",
    "bitwise_not",
    "gelu",
    "relu",
    "sigmoid",
    "tanh",
    "view",
    "permute",
    "expand",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "cat",
    "gather",
    "index",
    "embedding",
    "sum",
    "mean",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "var",
    "prod",
    "any",
    "_softmax",
    "_log_softmax",
    "native_layer_norm",
    "native_dropout",
]


def test_promised_ops_are_lowered() -> None:
    missing = [name for name in PROMISED_OPS if f"aten.{name}" not in LOWERINGS]
    assert missing == []


def test_extern_runs_with_a_hint() -> None:
    found = aten_stages(lambda x: torch.cumsum(x, 0) * 2, torch.randn(5))
    assert "extern(aten.cumsum.default" in found.lowered
    assert any("aten.cumsum runs as torch's kernel" in h for h in found.hints), found.hints
    check(lambda x: torch.cumsum(x, 0) * 2, torch.randn(5))
