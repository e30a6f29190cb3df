"""Process and thread state that compiled code depends on: a compiled entry must see the state a
call is made under, and leave the state eager leaves.

- The GLOBAL_STATE guard pins the default device (`torch.set_default_device`, `with
  torch.device(...)`), inference mode and the autocast dtypes, in its C++ form and in its
  Python form alike (both are checked against `GlobalState.current()` as the oracle).
- Setters of process state (`torch.set_num_threads`, `set_flush_denormal`, ...) run at run time,
  in program order: they are graph breaks, found by rule (`changes_global_state`).
- Getters of process state (`torch.get_num_threads()`, ...) fold to a value a guard pins.
- `torch.tensor(n)` of an int that automatic dynamic shapes made symbolic keeps its value.

Every test compares against eager PyTorch on real tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from framejit.frontend.variables import torch_rules
from framejit.guards import GlobalState, Guard, GuardKind, compile_guards
from framejit.guards import guard as guard_module
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import framejit

CPP_BUILT = guard_module._tensor_check is not None and hasattr(
    guard_module._tensor_check, "state_check"
)
BACKENDS = ["eager", "aot_eager"]


@pytest.fixture(autouse=True, params=["python", "cpp"] if CPP_BUILT else ["python"])
def guard_language(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(framejit.config, "cpp_guards", request.param == "cpp")
    return request.param


@pytest.fixture(autouse=True)
def restore_process_state() -> Iterator[None]:
    """The tests change process state on purpose; each one leaves it as it found it."""
    state = (
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        torch.get_autocast_dtype("cpu"),
        torch.get_autocast_dtype("cuda"),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_cache_enabled(),
        torch.is_anomaly_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.is_warn_always_enabled(),
    )
    try:
        yield
    finally:
        torch.set_default_device(None)
        torch.set_num_threads(state[0])
        torch.set_float32_matmul_precision(state[1])
        torch.set_autocast_dtype("cpu", state[2])
        torch.set_autocast_dtype("cuda", state[3])
        torch.set_autocast_enabled("cpu", state[4])
        torch.set_autocast_cache_enabled(state[5])
        torch.set_anomaly_enabled(state[6])
        torch.use_deterministic_algorithms(state[7], warn_only=state[8])
        torch.set_warn_always(state[9])
        torch.set_flush_denormal(False)
        torch.set_autocast_enabled("mps", False)


def _compiles(jf: Any) -> int:
    return len(jf.cache.entries)


# --- 1. the default device -------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_default_device_switch_reaches_the_compiled_code(backend: str) -> None:
    def f(x: float) -> Any:
        z = torch.zeros(2)
        return z, z.device, torch.get_default_device(), x

    jf = framejit.jit(f, backend=backend)
    for device in ["cpu", "meta", "cpu", "meta"]:
        torch.set_default_device(device)
        want, got = f(1.0), jf(1.0)
        assert got[0].device == want[0].device == torch.device(device)
        assert got[1:] == want[1:]
    assert _compiles(jf) == 2  # one entry per default device, reused


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_context_switch_reaches_the_compiled_code(backend: str) -> None:
    def g() -> torch.Tensor:
        return torch.ones(1)

    jg = framejit.jit(g, backend=backend)
    with torch.device("cpu"):
        assert jg().device == g().device == torch.device("cpu")
    with torch.device("meta"):
        assert jg().device == g().device == torch.device("meta")
    assert jg().device == g().device == torch.device("cpu")  # no context at all


# --- the GLOBAL_STATE guard itself: C++ and Python agree with GlobalState.current() ----------


class _UserFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class _UserDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _default_device(device: str) -> Iterator[None]:
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextlib.contextmanager
def _setting(setter: Callable[[Any], Any], value: Any, old: Any) -> Iterator[None]:
    setter(value)
    try:
        yield
    finally:
        setter(old)


def _autocast_dtype(device: str, dtype: torch.dtype) -> Any:
    old = torch.get_autocast_dtype(device)
    return _setting(lambda d: torch.set_autocast_dtype(device, d), dtype, old)


STATES: dict[str, Callable[[], Any]] = {
    "plain": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "float64": lambda: _setting(torch.set_default_dtype, torch.float64, torch.float32),
    "deterministic": lambda: _setting(torch.use_deterministic_algorithms, True, False),
    "autocast_cpu": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "autocast_cpu_fp16": lambda: torch.autocast("cpu", dtype=torch.float16),
    "autocast_cpu_no_cache": lambda: torch.autocast("cpu", cache_enabled=False),
    "cpu_dtype_fp16": lambda: _autocast_dtype("cpu", torch.float16),
    "cuda_dtype_bf16": lambda: _autocast_dtype("cuda", torch.bfloat16),
    "autocast_cache_off": lambda: _setting(torch.set_autocast_cache_enabled, False, True),
    "autocast_xpu": lambda: _setting(lambda on: torch.set_autocast_enabled("xpu", on), True, False),
    "autocast_hpu": lambda: _setting(lambda on: torch.set_autocast_enabled("hpu", on), True, False),
    "default_cpu": lambda: _default_device("cpu"),
    "default_meta": lambda: _default_device("meta"),
    "with_meta": lambda: torch.device("meta"),
    "meta_torch_function_off": lambda: _stacked(
        _default_device("meta"), torch._C.DisableTorchFunction()
    ),
    "user_function_mode": _UserFunctionMode,
    "device_and_user_function_mode": lambda: _stacked(_default_device("cpu"), _UserFunctionMode()),
    "user_dispatch_mode": _UserDispatchMode,
}
USER_MODES = {"user_function_mode", "device_and_user_function_mode", "user_dispatch_mode"}


@contextlib.contextmanager
def _stacked(*contexts: Any) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for c in contexts:
            stack.enter_context(c)
        yield


def test_global_state_guard_checks_exactly_the_recorded_state(guard_language: str) -> None:
    """For every pair of states: the guard compiled under the first passes under the second
    exactly when GlobalState.current() is equal (never under a user's mode), in both forms."""
    compiled: dict[str, Any] = {}
    recorded: dict[str, GlobalState] = {}
    for name, make in STATES.items():
        if name in USER_MODES:
            continue  # nothing is compiled under a user's mode
        with make():
            recorded[name] = GlobalState.current()
            guard = Guard(None, GuardKind.GLOBAL_STATE, recorded[name])
            compiled[name] = compile_guards([guard], (), name=f"state_{name}")
        assert ("state_check" in compiled[name].source) is (guard_language == "cpp")
    for name, make in STATES.items():
        with make():
            now = None if name in USER_MODES else GlobalState.current()
            for other, guards in compiled.items():
                want = now == recorded[other]
                assert guards.check(None) is want, (other, name)
    # every state above is a distinct one, but for two pairs that act alike: the meta default
    # device set or entered, and a device context under DisableTorchFunction (it does nothing)
    assert recorded["with_meta"] == recorded["default_meta"]
    assert recorded["meta_torch_function_off"] == recorded["plain"]
    assert len({*recorded.values()}) == len(recorded) - 2


# --- 2. torch.tensor of a symbolic int --------------------------------------------------------


def _data_factories(x: torch.Tensor, n: int) -> tuple[Any, ...]:
    return (
        torch.tensor(n),
        torch.as_tensor(n),
        torch.Tensor.new_tensor(x, [n]),
        x.new_tensor([n]),
        torch.tensor(n, dtype=torch.float64),
        torch.tensor([n, 1]),
        torch.tensor([[n, 2], [3, n]]),
        torch.tensor([n, 1.5]),
        torch.tensor((n, 7), dtype=torch.int64),
        torch.asarray(n),
        x + n,
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_of_a_dynamic_int_keeps_its_value(backend: str) -> None:
    jf = framejit.jit(_data_factories, backend=backend)
    x = torch.zeros(1, dtype=torch.float16)
    for n in [3, 4, 5, 2**31 + 1, 2**40 + 7, 6]:
        want, got = _data_factories(x, n), jf(x, n)
        for w, g in zip(want, got, strict=True):
            assert (g.dtype, g.device, g.shape, g.requires_grad) == (
                w.dtype,
                w.device,
                w.shape,
                w.requires_grad,
            )
            assert g.tolist() == w.tolist(), n
    assert _compiles(jf) == 2  # the first value, then one entry with n symbolic


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_of_a_dynamic_int_that_overflows_its_dtype_raises(backend: str) -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return torch.tensor((n,), dtype=torch.int32) + x

    jf = framejit.jit(f, backend=backend)
    x = torch.zeros(1, dtype=torch.int32)
    for n in [3, 4, 5]:
        assert torch.equal(jf(x, n), f(x, n))
    with pytest.raises(RuntimeError, match="overflow") as want:
        f(x, 2**31 + 1)
    with pytest.raises(type(want.value), match="overflow"):
        jf(x, 2**31 + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_of_a_dynamic_int_that_requires_grad(backend: str) -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.tensor([n, 1], dtype=torch.float64, requires_grad=True)
        return t, t * x

    jf = framejit.jit(f, backend=backend)
    x = torch.ones(1)
    for n in [3, 4, 5, 2**40 + 7]:
        want, got = f(x, n), jf(x, n)
        assert got[0].is_leaf and got[0].requires_grad
        assert [t.tolist() for t in got] == [t.tolist() for t in want]
        got[1].sum().backward()
        assert got[0].grad is not None and got[0].grad.tolist() == [1.0, 1.0]


def test_tensor_of_a_dynamic_float_and_default_dtype() -> None:
    def f(x: torch.Tensor, n: int) -> tuple[torch.Tensor, ...]:
        return torch.tensor(n * 0.5), torch.tensor([n, 2]), x

    jf = framejit.jit(f, backend="aot_eager")
    x = torch.zeros(1)
    for n in [3, 4, 2**40 + 7]:
        for w, g in zip(f(x, n), jf(x, n), strict=True):
            assert (g.dtype, g.tolist()) == (w.dtype, w.tolist())


# --- 3. setters run at run time, in program order ---------------------------------------------


def _set_state(x: torch.Tensor) -> torch.Tensor:
    torch.set_num_threads(1)
    torch.set_float32_matmul_precision("medium")
    torch.set_autocast_dtype("cpu", torch.float16)
    torch.set_autocast_enabled("cpu", True)
    torch.set_warn_always(True)
    return x + 1


def _state() -> tuple[Any, ...]:
    return (
        torch.get_num_threads(),
        torch.get_float32_matmul_precision(),
        torch.get_autocast_dtype("cpu"),
        torch.is_autocast_enabled("cpu"),
        torch.is_warn_always_enabled(),
    )


def _reset_state() -> None:
    torch.set_num_threads(2)
    torch.set_float32_matmul_precision("highest")
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    torch.set_autocast_enabled("cpu", False)
    torch.set_warn_always(False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_setters_inside_run_on_every_call(backend: str) -> None:
    jf = framejit.jit(_set_state, backend=backend)
    for _ in range(3):
        _reset_state()
        want_value = _set_state(torch.ones(1))
        want = _state()
        _reset_state()
        got_value = jf(torch.ones(1))
        assert _state() == want
        assert torch.equal(got_value, want_value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_flush_denormal_takes_effect_between_the_ops(backend: str) -> None:
    def g(x: torch.Tensor) -> torch.Tensor:
        torch.set_flush_denormal(True)
        y = x * 1.0
        torch.set_flush_denormal(False)
        torch.set_autocast_enabled("mps", False)
        return y

    x = torch.tensor([1e-39, 1.0])
    jg = framejit.jit(g, backend=backend)
    for _ in range(2):
        assert jg(x).tolist() == g(x).tolist()


def test_every_state_setter_in_torch_is_refused() -> None:
    """By rule, not by list: every public torch function named like a setter, and none of the
    tensor methods or ops that share a prefix."""
    setters = [
        getattr(torch, name)
        for name in dir(torch)
        if name.startswith(("set_", "clear_", "use_", "init_"))
        and callable(getattr(torch, name))
        and not isinstance(getattr(torch, name), type)
    ]
    assert torch.set_flush_denormal in setters and torch.clear_autocast_cache in setters
    for fn in setters:
        assert fn in torch_rules.REFUSED or torch_rules.changes_global_state(fn), fn
        assert not torch_rules.is_graph_function(fn), fn
        assert torch_rules.is_torch_callable(fn), fn  # handled by call_torch_function: a break
    assert not torch_rules.changes_global_state(torch.Tensor.set_)
    assert not torch_rules.changes_global_state(torch.ops.aten.set_.source_Tensor)
    assert not torch_rules.changes_global_state(torch.add)


def test_setter_under_fullgraph_raises_a_clear_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.set_num_threads(1)
        return x + 1

    with pytest.raises(Exception, match="set_num_threads"):
        framejit.jit(f, backend="eager", fullgraph=True)(torch.ones(1))


# --- 4. getters are pinned ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_without_dtype_follows_set_autocast_dtype(backend: str) -> None:
    w = torch.randn(8, 8)

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu"):
            return x @ w

    jf = framejit.jit(f, backend=backend)
    x = torch.randn(4, 8)
    for dtype in [torch.bfloat16, torch.float16, torch.bfloat16]:
        torch.set_autocast_dtype("cpu", dtype)
        want, got = f(x), jf(x)
        assert got.dtype == want.dtype == dtype
        torch.testing.assert_close(got, want)


def _getters(x: torch.Tensor) -> tuple[Any, ...]:
    return (
        x + 1,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
        torch.is_anomaly_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.is_warn_always_enabled(),
        torch.get_autocast_dtype("cpu"),
        torch.get_autocast_dtype("xpu"),
        torch.is_autocast_enabled("mps"),
        torch.is_autocast_cache_enabled(),
        torch.get_default_device(),
    )


def test_getters_return_the_current_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framejit.config, "recompile_limit", 32)
    jf = framejit.jit(_getters, backend="eager")
    x = torch.ones(1)
    changes: list[Callable[[], Any]] = [
        lambda: None,
        lambda: torch.set_float32_matmul_precision("medium"),
        lambda: torch.set_num_threads(1),
        lambda: torch.set_anomaly_enabled(True),
        lambda: torch.use_deterministic_algorithms(True, warn_only=True),
        lambda: torch.set_warn_always(True),
        lambda: torch.set_autocast_dtype("cpu", torch.float16),
        lambda: torch.set_autocast_dtype("xpu", torch.bfloat16),
        lambda: torch.set_autocast_enabled("mps", True),
        lambda: torch.set_autocast_cache_enabled(False),
        lambda: torch.set_default_device("meta"),
    ]
    for change in changes:
        change()
        want, got = _getters(x), jf(x)
        assert got[1:] == want[1:]
        assert got[0].device == want[0].device
    assert not jf.cache.eager and _compiles(jf) > 1  # compiled again, never run eagerly


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_on_a_getter_follows_the_state(backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if torch.is_anomaly_enabled():
            return x * 2
        return x * 3

    jf = framejit.jit(f, backend=backend)
    x = torch.ones(2)
    for on in [False, True, False]:
        torch.set_anomaly_enabled(on)
        assert torch.equal(jf(x), f(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_mode_is_pinned(backend: str) -> None:
    def f(x: torch.Tensor) -> tuple[Any, ...]:
        z = torch.ones(2) + x
        return z, z.is_inference(), torch.is_inference_mode_enabled()

    jf = framejit.jit(f, backend=backend)
    x = torch.ones(2)
    for context in [torch.no_grad, torch.inference_mode, torch.no_grad]:
        with context():
            want, got = f(x), jf(x)
        assert got[1:] == want[1:]
        assert got[0].is_inference() == want[0].is_inference()


def test_state_read_guard_says_what_changed() -> None:
    def f(x: torch.Tensor) -> tuple[Any, ...]:
        return x + 1, torch.get_num_threads()

    jf = framejit.jit(f, backend="eager")
    x = torch.ones(1)
    threads = torch.get_num_threads()
    jf(x)
    torch.set_num_threads(threads + 1)
    reason = jf.cache.failures(f, (x,))[0]
    assert f"torch.get_num_threads() == {threads}" in reason
    assert f"actual: {threads + 1}" in reason


def _switch_reads(x: torch.Tensor) -> tuple[Any, ...]:
    """Branches on torch.backends switches, which are getters behind a module class's
    descriptors (cudnn, mkldnn) or an object's `__getattr__` (cuda.matmul)."""
    y = x + 1 if torch.backends.cudnn.benchmark else x - 1
    y = y * 2 if torch.backends.mkldnn.enabled else y * 3
    y = y + 5 if torch.backends.cuda.matmul.allow_tf32 else y
    return y, torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32


def _cudnn_flipped(name: str) -> contextlib.AbstractContextManager[Any]:
    """cudnn's flags with `name` flipped, through `flags()`: torch's own tests forbid setting
    them directly once they ran `disable_global_flags()` in this process."""
    cudnn = torch.backends.cudnn
    now = {n: getattr(cudnn, n) for n in ("enabled", "benchmark", "deterministic", "allow_tf32")}
    now[name] = not now[name]
    return cudnn.flags(**now)


@contextlib.contextmanager
def _tf32_flipped() -> Iterator[None]:
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    matmul.allow_tf32 = not saved
    try:
        yield
    finally:
        matmul.allow_tf32 = saved


@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_switches_are_read_again(backend: str) -> None:
    jf = framejit.jit(_switch_reads, backend=backend, fullgraph=True)
    x = torch.ones(2)
    mkldnn = torch.backends.mkldnn
    flips: list[Callable[[], contextlib.AbstractContextManager[Any]]] = [
        lambda: _cudnn_flipped("benchmark"),
        lambda: mkldnn.flags(enabled=not mkldnn.enabled, deterministic=mkldnn.deterministic),
        _tf32_flipped,
        lambda: _cudnn_flipped("deterministic"),
        lambda: _cudnn_flipped("allow_tf32"),
    ]
    assert jf(x)[1:] == _switch_reads(x)[1:]
    for flip in flips:
        with flip():
            want, got = _switch_reads(x), jf(x)
        assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
    assert not jf.cache.eager and _compiles(jf) == len(flips) + 1
