"""CUDA graph tree tests: on the CPU through the stand-in recorder (CUDA graph semantics: fixed
output memory, a replay overwrites it in place); tests marked `cuda` use real CUDA graphs and
skip without a CUDA device. Limits are restored after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

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
def stand_in() -> Iterator[None]:
    with cudagraphs.stand_in():
        yield


@pytest.fixture(autouse=True)
def skip_without_cuda(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
