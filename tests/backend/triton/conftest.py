"""Triton backend tests run the generated kernels in Triton's CPU interpreter, or on a GPU.

`TRITON_INTERPRET=1` is set here, before anything imports triton (only where numpy is
installed: the interpreter needs it, and without it `import triton` itself fails under the
variable; the tests that run kernels then skip); generated modules go to a per-session cache
folder; tests marked `cuda` skip without a CUDA device.

`FRAMEJIT_TEST_DEVICE=cuda` runs the same tests on the GPU with Triton's real compiler instead:
the interpreter stays off and each test runs under `torch.set_default_device("cuda")`, so the
tensors it makes (and `check`'s inputs) live on the GPU and eager's CUDA kernels are the
reference. Tests marked `interpreter_only` (they test the interpreter itself) skip then.

`FRAMEJIT_PTX_CHECK=1` (or `cuda:80`, ...) also compiles every kernel the tests launch for a GPU
(default sm_90) with Triton's real compiler, no GPU needed (tools/ptx_check.py); a kernel that
fails to compile fails the session.
"""

from __future__ import annotations

import importlib.util
import os

from device_mode import TEST_DEVICE, on_cuda  # noqa: E402

if TEST_DEVICE == "cpu" and importlib.util.find_spec("numpy") is not None:
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


@pytest.fixture(autouse=True)
def kernel_device(request: pytest.FixtureRequest) -> Iterator[str]:
    """The device the test's tensors are made on (`FRAMEJIT_TEST_DEVICE`)."""
    if TEST_DEVICE == "cpu":
        yield "cpu"
        return
    yield from on_cuda(request, "interpreter_only", "tests Triton's CPU interpreter")


_PTX = os.environ.get("FRAMEJIT_PTX_CHECK", "")
if _PTX and _PTX != "0":
    import importlib.util as _util
    import pathlib as _pathlib

    _path = _pathlib.Path(__file__).resolve().parents[3] / "tools" / "ptx_check.py"
    _spec = _util.spec_from_file_location("framejit_ptx_check", _path)
    assert _spec is not None and _spec.loader is not None
    ptx_check = _util.module_from_spec(_spec)
    _spec.loader.exec_module(ptx_check)
    ptx_check.install()

    def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
        failed = ptx_check.compile_recorded("cuda:90" if _PTX == "1" else _PTX)
        print("\n" + ptx_check.summary())
        if failed and session.exitstatus == 0:
            session.exitstatus = 1
