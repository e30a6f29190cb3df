"""Direct launches (launch.py): a kernel whose arguments have a known key is launched through
its `CompiledKernel.run`, skipping Triton's per-call work; anything else goes through Triton.

The key's soundness is checked against the installed Triton's own specialization, so a Triton
that specializes on more than the key turns the direct path off (and fails here, in CI)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from framejit.backend.triton import launch
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import native_specialize_impl
from triton_helpers import check


def _tritons(value: Any) -> Any:
    return native_specialize_impl(BaseBackend, value, False, True, True)


def _keys() -> list:
    marks = [] if launch._native_key else [pytest.mark.skip(reason="C++ extension not built")]
    return [pytest.param("python", id="python"), pytest.param("native", marks=marks, id="native")]


@pytest.mark.parametrize("which", _keys())
def test_the_key_refines_the_installed_tritons_specialization(monkeypatch, which) -> None:
    if which == "python":
        monkeypatch.setattr(launch, "_native_key", None)
    assert launch._launch_matches_triton()
    assert launch._key_refines(_tritons)


def test_a_key_that_ignores_alignment_is_refused(monkeypatch) -> None:
    def coarse(index: int, value: Any) -> str:
        return f"a{index}.dtype" if isinstance(value, torch.Tensor) else f"a{index}.__class__"

    monkeypatch.setattr(launch, "_native_key", None)
    monkeypatch.setattr(launch, "_key_text", coarse)
    assert not launch._key_refines(_tritons)


def test_the_native_key_tells_apart_what_the_python_key_does() -> None:
    """The C++ key (guards/_tensor_check.cpp, launch_key) and the key written in Python split
    the same argument tuples into the same classes; the C++ one gives None (Triton's path)
    for an argument it has no key for."""
    if launch._native_key is None:
        pytest.skip("framejit's C++ extension is not built here")
    buffer = torch.zeros(256, dtype=torch.uint8)
    values: list[Any] = [*launch._INT_SAMPLES, *launch._SCALAR_SAMPLES]
    values += [buffer[k:] for k in range(0, 40, 3)]
    values += [buffer[k:].view(torch.float32) for k in range(0, 40, 4)]
    values += [torch.zeros(3, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.int64)]
    pairs = [(a, b) for a in values for b in (0, 16, 1.5, buffer)]
    native = [launch._native_key(p) for p in pairs]
    python = [launch.key_function(p)(p) for p in pairs]
    for i in range(len(pairs)):
        for j in range(len(pairs)):
            if native[i] is None or native[j] is None or type(pairs[i][0]) is not type(pairs[j][0]):
                continue
            assert (native[i] == native[j]) == (python[i] == python[j]), (pairs[i], pairs[j])
    assert launch._native_key((2**64,)) is None and launch._native_key(("text",)) is None
    assert launch._native_key((-(2**63) - 1,)) is None and launch._native_key(()) == ()


class FakeCompiled:
    """Stands in for a CompiledKernel: records direct launches."""

    def __init__(self, launches: list) -> None:
        self.function, self.packed_metadata = object(), (4, 1, 0)
        self.launches = launches

    def run(self, *args: Any) -> None:
        self.launches.append(args)


class FakeKernel:
    """Stands in for a @triton.jit function: Triton's path compiles one FakeCompiled per
    specialization (as Triton's cache does) and returns it."""

    arg_names = ["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"]

    def __init__(self) -> None:
        self.through_triton: list[tuple] = []
        self.direct: list[tuple] = []
        self.compiled: dict[tuple, FakeCompiled] = {}

    def __getitem__(self, grid):
        def run(*args, **config):
            self.through_triton.append((grid, args, config))
            spec = tuple(map(_tritons, args))
            return self.compiled.setdefault(spec, FakeCompiled(self.direct))

        return run


@pytest.fixture
def fake_device(monkeypatch):
    device = SimpleNamespace(index=0)
    monkeypatch.setattr(launch, "_device", lambda: device.index)
    monkeypatch.setattr(launch, "_stream", lambda index: 1000 + index)
    monkeypatch.setattr(launch, "_backend", lambda kernel: BaseBackend)
    return device


def test_known_keys_launch_directly(fake_device) -> None:
    kernel = FakeKernel()
    launches = launch.Launches(kernel, {"XBLOCK": 128, "num_warps": 4})
    x, out = torch.zeros(64), torch.zeros(64)
    launches.launch((2,), (x, out, 256))
    assert len(kernel.through_triton) == 1 and not kernel.direct
    launches.launch((2,), (x, out, 256))
    (direct,) = kernel.direct
    compiled = next(iter(kernel.compiled.values()))
    # grid padded to 3, the stream, the handles, no metadata or hooks, then the arguments in
    # the kernel's order with the constexprs after them
    assert direct == (
        2,
        1,
        1,
        1000,
        compiled.function,
        (4, 1, 0),
        None,
        None,
        None,
        x,
        out,
        256,
        128,
    )

    cases = [
        ((x[1:], out, 256), "triton"),  # a pointer 4 bytes off alignment: another kernel
        ((x[1:], out, 256), "direct"),
        ((x, out, 272), "direct"),  # another multiple of 16: the same kernel
        ((x, out, 257), "triton"),
        ((x, out, 1), "triton"),  # 1 is a constant to Triton
        ((x, out, 2**31), "triton"),  # 64-bit
        ((x.double(), out, 256), "triton"),  # another dtype
        ((x, out, 256.0), "triton"),  # a float where an int was
        ((x, out, 256), "direct"),
    ]
    for args, path in cases:
        before = len(kernel.through_triton), len(kernel.direct)
        launches.launch((2,), args)
        after = len(kernel.through_triton), len(kernel.direct)
        went = "triton" if after[0] > before[0] else "direct"
        assert went == path, (args[2], path)
        if went == "direct":  # the kernel Triton compiled for these arguments
            assert kernel.compiled[tuple(map(_tritons, args))].launches[-1][9:] == (*args, 128)


def test_hooks_and_another_device_go_through_triton(fake_device) -> None:
    from triton import knobs

    kernel = FakeKernel()
    launches = launch.Launches(kernel, {"XBLOCK": 128})
    args = (torch.zeros(8), torch.zeros(8), 8)
    launches.launch((1,), args)
    launches.launch((1,), args)
    assert len(kernel.direct) == 1

    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        launches.launch((1,), args)
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    assert len(kernel.through_triton) == 2 and len(kernel.direct) == 1

    fake_device.index = 1
    launches.launch((1,), args)
    assert len(kernel.through_triton) == 3 and len(kernel.direct) == 1


@pytest.mark.interpreter_only
def test_the_interpreter_launches_through_triton() -> None:
    x = torch.randn(300)
    before = dict(launch.STATS)
    for _ in range(3):
        check(lambda x: torch.relu(x) * 2, x)
    assert launch.STATS["direct"] == before["direct"]
    assert launch.STATS["triton"] > before["triton"]


@pytest.mark.cuda
def test_direct_launches_on_a_gpu_match_eager() -> None:
    """Real kernels: the second call launches directly; a misaligned view of the same input
    (another specialization) goes through Triton once, then directly, with eager's results."""
    import framejit

    def fn(x, y):
        return torch.softmax(x * 2 + y, dim=-1), (x - y).sigmoid().sum(0)

    compiled = framejit.jit(fn, backend="triton")
    base = torch.randn(64 * 64 + 1, device="cuda")
    y = torch.randn(64, 64, device="cuda")
    went = []
    for offset in (0, 0, 1, 1, 0):
        x = base[offset : offset + 64 * 64].view(64, 64)
        before = dict(launch.STATS)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
        went.append(tuple(launch.STATS[k] > before[k] for k in ("triton", "direct")))
    through_triton, direct = (True, False), (False, True)
    assert went == [through_triton, direct, through_triton, direct, direct]


def _a_kernel(x_ptr, XBLOCK):  # made a JITFunction below, never launched
    pass


def test_gpu_launches_ask_for_fp_fusion_explicitly(fake_device, monkeypatch) -> None:
    """Triton's path gets `enable_fp_fusion=True` for a compiled kernel (what the kernels were
    written and measured with; Triton 3.9 warns when it is left to the default, which 3.10
    turns off), which the CUDA backend accepts; the interpreter's kernels get no option."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import JITFunction

    options = launch.compile_options(JITFunction(_a_kernel))
    assert options == {"enable_fp_fusion": True}
    parsed = CUDABackend(GPUTarget("cuda", 90, 32)).parse_options({**options, "num_warps": 4})
    assert parsed.enable_fp_fusion is True and parsed.num_warps == 4
    assert launch.compile_options(FakeKernel()) == {}
    monkeypatch.setattr(launch, "compile_options", lambda kernel: options)
    kernel = FakeKernel()
    launch.Launches(kernel, {"XBLOCK": 128, "num_warps": 4}).launch((2,), (torch.zeros(4),))
    assert kernel.through_triton[0][2] == {"XBLOCK": 128, "num_warps": 4, **options}
