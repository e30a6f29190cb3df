"""Every program of the corpus (tests/corpus) again, with each captured graph compiled by the
Triton backend (the AOT stage, then `compile_graph`; kernels run in Triton's CPU interpreter):
the same comparison with eager (values, printed output, warnings) and the same graph counts.
The programs were written for the frontend, so they probe the op set in ways the op tests did
not plan for."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest
import torch
from framejit.backend.aot import aot_compile
from framejit.backend.triton import compile_graph
from triton_helpers import kernel_device

import framejit.testing

CORPUS = pathlib.Path(__file__).resolve().parent.parent.parent / "corpus"


class TritonCounter(framejit.testing.CompileCounter):
    """CompileCounter whose compiled graphs are the Triton backend's."""

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        super().__call__(gm, example_inputs)
        return aot_compile(gm, example_inputs, compile_graph)


sys.path.insert(0, str(CORPUS))  # the corpus files import `harness` as a top-level module
import harness  # noqa: E402

# Cases whose programs read tensors made at import time, on the CPU: under
# FRAMEJIT_TEST_DEVICE=cuda their inputs are on the GPU and eager itself fails on the mix.
CPU_GLOBALS = {
    "functions-reads_global_tensor",
    "realistic-tokenize_then_embed",
    "side_effects-global_tensor_updated_in_place",
}
CASES = [
    pytest.param(*p.values, id=p.id, marks=(*p.marks, pytest.mark.interpreter_only))
    if p.id in CPU_GLOBALS
    else p
    for p in harness.all_cases()
]
assert {p.id for p in CASES} >= CPU_GLOBALS


# Cases with a dropout in training mode: the Triton kernels draw their own masks (README), so
# the values cannot be eager's (tests/backend/test_corpus_aot.py compares them under aot_eager).
TRITON_OWN_RANDOM = {
    "training-train_eval_toggled_inside_forward",
    "training-evaluate_helper_restores_mode",
}
assert {p.id for p in CASES} >= TRITON_OWN_RANDOM


@pytest.mark.parametrize("case", CASES)
def test_corpus_through_triton(
    case: Any, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if request.node.callspec.id in TRITON_OWN_RANDOM:
        pytest.skip("dropout in training mode: Triton's kernels draw their own masks")
    monkeypatch.setattr(framejit.testing, "CompileCounter", TritonCounter)
    monkeypatch.setattr(framejit.config, "raise_internal_errors", True)
    # a Python float read from a GPU kernel's result (`.item()`) may differ in its last bits
    monkeypatch.setattr(harness, "CLOSE_FLOATS", kernel_device() == "cuda")
    torch.manual_seed(0)
    case.run()


def test_close_floats_take_float32_tolerances(monkeypatch: pytest.MonkeyPatch) -> None:
    """`harness.CLOSE_FLOATS` (GPU runs): a float one float32 ulp off eager's passes (a mean's
    `.item()` seen on an H200), one further off does not; exact comparison otherwise."""
    monkeypatch.setattr(harness, "CLOSE_FLOATS", True)
    harness.assert_same((1, -0.5286441445350647), (1, -0.5286442041397095))
    with pytest.raises(AssertionError, match=r"out\[1\]"):
        harness.assert_same((1, -0.5286), (1, -0.5287))
    monkeypatch.setattr(harness, "CLOSE_FLOATS", False)
    with pytest.raises(AssertionError, match="!= eager"):
        harness.assert_same(-0.5286441445350647, -0.5286442041397095)
