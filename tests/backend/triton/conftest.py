"""Triton backend tests run the generated kernels in Triton's CPU interpreter.

`TRITON_INTERPRET=1` is set here, before anything imports triton (only where numpy is
installed: the interpreter needs it, and without it `import triton` itself fails under the
variable; the tests that run kernels then skip); generated modules go to a per-session cache
folder; tests marked `cuda` skip without a CUDA device.
"""

from __future__ import annotations

import importlib.util
import os

if importlib.util.find_spec("numpy") is not None:
    os.environ["TRITON_INTERPRET"] = "1"

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import framejit  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def triton_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    old = framejit.config.cache_dir
    framejit.config.cache_dir = str(tmp_path_factory.mktemp("framejit-cache"))
    yield framejit.config.cache_dir
    framejit.config.cache_dir = old


@pytest.fixture(autouse=True)
def skip_without_cuda(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("cuda") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
