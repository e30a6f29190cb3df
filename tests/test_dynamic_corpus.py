"""Every program of the corpus (tests/corpus) again with `dynamic=True`: every input size is
symbolic from the first call, so the whole translator runs on symbolic shapes. Results (outputs,
arguments after the call, printed output, module state) must equal eager's; graph and break
counts are not checked (an op without symbolic-size support is a graph break here)."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest
import torch

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


sys.path.insert(0, str(CORPUS))  # the corpus files import `harness` as a top-level module
import harness  # noqa: E402

CASES = harness.all_cases()


@pytest.mark.parametrize("case", CASES)
def test_corpus_with_symbolic_sizes(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "DYNAMIC", True)
    torch.manual_seed(0)
    case.run()
