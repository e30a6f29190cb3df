"""`FRAMEJIT_TEST_DEVICE`: where the Triton and graph-tree tests make their tensors ("cpu", the
default: Triton's interpreter and the CPU stand-in recorder; "cuda": real kernels and real CUDA
graphs). Imported by tests/backend/triton/conftest.py and tests/cudagraphs/conftest.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

TEST_DEVICE = os.environ.get("FRAMEJIT_TEST_DEVICE", "cpu")
if TEST_DEVICE not in ("cpu", "cuda"):
    raise ValueError(f"FRAMEJIT_TEST_DEVICE must be 'cpu' or 'cuda', not {TEST_DEVICE!r}")


def on_cuda(request: pytest.FixtureRequest, marker: str, reason: str) -> Iterator[None]:
    """For a fixture (`yield from`): the test runs with CUDA as the default device, or skips
    (no CUDA device, or the test is marked `marker`: it is about the CPU path, `reason`)."""
    if not torch.cuda.is_available():
        pytest.skip("FRAMEJIT_TEST_DEVICE=cuda needs a CUDA device")
    if request.node.get_closest_marker(marker):
        pytest.skip(reason)
    torch.set_default_device("cuda")
    try:
        yield
    finally:
        torch.set_default_device(None)
