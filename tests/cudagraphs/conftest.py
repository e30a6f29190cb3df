"""CUDA graph tree tests: on the CPU through the stand-in recorder (CUDA graph semantics: fixed
output memory, a replay overwrites it in place); tests marked `cuda` use real CUDA graphs and
skip without a CUDA device. Limits are restored after each test.

`FRAMEJIT_TEST_DEVICE=cuda` runs the stand-in tests on real CUDA graphs instead: the `stand_in`
fixture then makes the test's tensors on the GPU (`torch.set_default_device("cuda")`), and tests
marked `stand_in_only` (they test the stand-in itself) skip."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from device_mode import TEST_DEVICE, on_cuda

import framejit
from framejit import cudagraphs


@pytest.fixture(autouse=True)
def cudagraph_limits() -> Iterator[None]:
    shapes, rerecords = (
        framejit.config.cudagraph_max_shapes,
        framejit.config.cudagraph_rerecord_limit,
    )
    yield
    framejit.config.cudagraph_max_shapes = shapes
    framejit.config.cudagraph_rerecord_limit = rerecords
    cudagraphs.reset()


@pytest.fixture
def stand_in(request: pytest.FixtureRequest) -> Iterator[None]:
    if TEST_DEVICE != "cuda":
        with cudagraphs.stand_in():
            yield
        return
    yield from on_cuda(request, "stand_in_only", "tests the CPU stand-in recorder")


@pytest.fixture(autouse=True)
def skip_without_cuda(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
