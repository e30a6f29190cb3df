"""Every program of the corpus (tests/corpus) again, with each captured graph run through the AOT
stage (`aot_eager`) instead of as it is: same comparison with eager, same graph counts.

The corpus harness compiles with `framejit.testing.CompileCounter`; this module swaps in a
counter whose compiled graphs are the AOT stage's, so each case is checked unchanged. The inner
backend also checks that every aten graph (inference, forward and backward) uses only the core
op set (`backend/aot/core_ops.py`).
"""

from __future__ import annotations

import importlib
import pathlib
import sys
from typing import Any

import pytest
import torch
from framejit.backend.aot import aot_compile
from framejit.backend.aot.core_ops import outside_core

import framejit.testing

CORPUS = pathlib.Path(__file__).resolve().parent.parent / "corpus"
FILES = sorted(p.stem for p in CORPUS.glob("test_corpus_*.py"))


def core_checked_eager(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """Inner backend: run the aten graph as Python after checking its op set."""
    assert not outside_core(gm), f"ops outside the core set: {outside_core(gm)}\n{gm.code}"
    return gm.forward


class AotCounter(framejit.testing.CompileCounter):
    """CompileCounter that compiles each graph with the AOT stage (as `aot_eager` does)."""

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        super().__call__(gm, example_inputs)
        return aot_compile(gm, example_inputs, core_checked_eager)


def _cases() -> list[Any]:
    sys.path.insert(0, str(CORPUS))  # the corpus files import `harness` as a top-level module
    params = []
    for name in FILES:
        module = importlib.import_module(name)
        for param in module.corpus.params():
            params.append(pytest.param(*param.values, id=f"{name[12:]}-{param.id}"))
    return params


@pytest.mark.parametrize("case", _cases())
def test_corpus_through_aot(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framejit.testing, "CompileCounter", AotCounter)
    torch.manual_seed(0)
    case.run()


@pytest.mark.parametrize("case", _cases())
def test_corpus_through_aot_with_symbolic_sizes(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same with `dynamic=True`: the AOT stage traces symbolic graphs (results must equal
    eager's; graph counts are not checked, see tests/test_dynamic_corpus.py)."""
    import harness

    monkeypatch.setattr(harness, "DYNAMIC", True)
    monkeypatch.setattr(framejit.testing, "CompileCounter", AotCounter)
    torch.manual_seed(0)
    case.run()
