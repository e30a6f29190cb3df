"""Every program of the corpus (tests/corpus) again, with each captured graph run through the AOT
stage (`aot_eager`) instead of as it is: same comparison with eager, same graph counts.

The corpus harness compiles with `framejit.testing.CompileCounter`; this module swaps in a
counter whose compiled graphs are the AOT stage's, so each case is checked unchanged. The inner
backend also checks that every aten graph (inference, forward and backward) uses only the core
op set (`backend/aot/core_ops.py`).
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest
import torch
from framejit.backend.aot import aot_compile
from framejit.backend.aot.core_ops import outside_core

import framejit.testing

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "corpus"


def core_checked_eager(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """Inner backend: run the aten graph as Python after checking its op set."""
    assert not outside_core(gm), f"ops outside the core set: {outside_core(gm)}\n{gm.code}"
    return gm.forward


class AotCounter(framejit.testing.CompileCounter):
    """CompileCounter that compiles each graph with the AOT stage (as `aot_eager` does)."""

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        super().__call__(gm, example_inputs)
        return aot_compile(gm, example_inputs, core_checked_eager)


sys.path.insert(0, str(CORPUS))  # the corpus files import `harness` as a top-level module
import harness  # noqa: E402

CASES = harness.all_cases()


@pytest.mark.parametrize("case", CASES)
def test_corpus_through_aot(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framejit.testing, "CompileCounter", AotCounter)
    torch.manual_seed(0)
    case.run()


@pytest.mark.parametrize("case", CASES)
def test_corpus_through_aot_with_symbolic_sizes(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same with `dynamic=True`: the AOT stage traces symbolic graphs (results must equal
    eager's; graph counts are not checked, see tests/test_dynamic_corpus.py)."""
    monkeypatch.setattr(harness, "DYNAMIC", True)
    monkeypatch.setattr(framejit.testing, "CompileCounter", AotCounter)
    torch.manual_seed(0)
    case.run()
