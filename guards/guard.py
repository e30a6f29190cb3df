"""Guard kinds and how each prints as Python.

A Guard is `(source, kind, expected)` plus the user line that made the translator rely on it.
`Guard.check_expr(x, const)` renders the check over the already-rendered expression `x`, asking
`const(obj)` for a name whenever the check needs an object that has no literal spelling (a dtype,
a device, a class, a module). The kinds are a closed set; every one of them must be sound: if a
check passes, the value is indistinguishable, for the compiled code, from the one traced.
"""

from __future__ import annotations

import enum
import math
import re
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from framejit.frontend.sources import Source
from torch.utils._device import DeviceContext

from framejit.config import config

try:  # the C++ TENSOR_MATCH (setup.py builds it when torch is present at install time)
    from framejit.guards import _tensor_check
except ImportError:
    _tensor_check = None  # type: ignore[assignment]
if _tensor_check is not None and torch.__version__ != _tensor_check.TORCH_VERSION_STR:
    _tensor_check = None  # built against another torch: its ABI is not ours


def cpp_tensor_guards() -> bool:
    """Whether TENSOR_MATCH guards compile to the C++ check (else to Python expressions)."""
    return _tensor_check is not None and config.cpp_guards


class GuardKind(enum.Enum):
    TYPE_MATCH = "TYPE_MATCH"  # type(x) is T
    ID_MATCH = "ID_MATCH"  # x is obj
    CONSTANT_MATCH = "CONSTANT_MATCH"  # type(x) is T and x == v
    TENSOR_MATCH = "TENSOR_MATCH"  # type, dtype, device, sizes, strides, requires_grad, keys
    LENGTH_CHECK = "LENGTH_CHECK"  # len(x) == n
    DICT_KEYS = "DICT_KEYS"  # list(x) == [k0, k1, ...]
    # x is module (or None: any instance), x.training is flag (and type(x) is its class)
    MODULE_MATCH = "MODULE_MATCH"
    MODULE_NO_HOOKS = "MODULE_NO_HOOKS"  # no forward/backward hooks registered on x
    GLOBAL_STATE = "GLOBAL_STATE"  # grad/inference mode, autocast, default dtype and device...
    DUPLICATE_INPUT = "DUPLICATE_INPUT"  # x is y: two sources reached the same tensor
    NO_ALIASING = "NO_ALIASING"  # the tensors at these sources are distinct objects
    # which of the tensors at these sources share a storage (views of one base), as traced
    STORAGE_GROUPS = "STORAGE_GROUPS"
    SHAPE_EXPR = "SHAPE_EXPR"  # a fact about symbolic sizes: `x.size()[0] == y.size()[1]`
    KEYS_ABSENT = "KEYS_ABSENT"  # none of these keys is in dict x (no shadowing name)
    # fn(*args) == value: a torch getter of process state (torch.get_num_threads()) that the
    # trace folded to the value it returned
    STATE_READ = "STATE_READ"


_LITERAL_TYPES = (bool, int, str, bytes, type(None))


@dataclass(frozen=True)
class TensorMeta:
    """Everything about a tensor that a traced graph may depend on, short of its values."""

    type: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    inference: bool
    conj: bool
    neg: bool
    # The same facts (plus the full dispatch key set) for the C++ check; None without it.
    spec: Any = field(default=None, compare=False, repr=False)
    # Symbolic dimensions (dynamic shapes): their sizes are not pinned here but by SHAPE_EXPR
    # guards, and the strides by contiguity (`stride` is then ()), or for a view of a bigger
    # buffer (a slice of a preallocated sequence or cache that grows), by its strides as they
    # are (`stride` kept: they do not depend on the sizes).
    dynamic: tuple[int, ...] = ()

    @staticmethod
    def of(t: torch.Tensor, dynamic: tuple[int, ...] = ()) -> TensorMeta:
        spec = None
        fixed_strides = bool(dynamic) and not t.is_contiguous()
        if _tensor_check is not None and t.layout == torch.strided:
            try:
                if fixed_strides:
                    spec = _tensor_check.spec(t, dynamic, True)
                else:
                    spec = _tensor_check.spec(t, dynamic) if dynamic else _tensor_check.spec(t)
            except TypeError:  # built before these arguments existed: the Python check runs
                spec = None
        shape = tuple(t.shape)
        if dynamic:
            shape = tuple(None if d in dynamic else n for d, n in enumerate(shape))
        return TensorMeta(
            type=type(t),
            dtype=t.dtype,
            device=t.device,
            shape=shape,  # type: ignore[arg-type]
            stride=tuple(t.stride()) if fixed_strides or not dynamic else (),
            requires_grad=t.requires_grad,
            inference=t.is_inference(),
            conj=t.is_conj(),
            neg=t.is_neg(),
            spec=spec,
            dynamic=tuple(sorted(dynamic)),
        )


def _autocast_devices() -> tuple[str, ...]:
    """The device types whose autocast state the GLOBAL_STATE guard pins: those
    torch._C._is_any_autocast_enabled() looks at in every supported torch (so that its one call
    is the Python check's fast path), that this torch knows. (mps, maia and mtia are left out:
    autocast for them changes no CPU or CUDA op, and a folded `torch.is_autocast_enabled("mps")`
    gets a STATE_READ guard of its own.)"""
    known = []
    for device in ("cpu", "cuda", "xpu", "ipu", "xla", "hpu", "privateuseone"):
        try:
            torch.is_autocast_enabled(device)
            torch.device(device)
        except (RuntimeError, ValueError, TypeError):
            continue
        known.append(device)
    return tuple(known)


# The GLOBAL_STATE guard pins whether autocast is on for each of these device types (a graph
# traced with it off must not run with it on), and the dtype it uses for cpu and cuda.
AUTOCAST_DEVICES = _autocast_devices()


@dataclass(frozen=True)
class GlobalState:
    """The process and thread state a traced graph depends on without reading it as an input:
    the GLOBAL_STATE guard compares all of it on every call, first."""

    grad_enabled: bool
    default_dtype: torch.dtype
    deterministic: bool
    autocast_cpu: bool
    autocast_cuda: bool
    module_hooks: bool = False  # guard that no global nn.Module hooks exist
    # The dtype autocast uses for the device. current() records it whether autocast is on or
    # not: `with torch.autocast("cpu"):` with no dtype reads it. None: not checked.
    autocast_cpu_dtype: torch.dtype | None = None
    autocast_cuda_dtype: torch.dtype | None = None
    # a TorchFunctionMode is active (`with torch.device("meta"):`, `set_default_device`):
    # it changes what factory calls make
    function_mode: bool = False
    # ...and the device each of them selects: the function-mode stack, bottom first, is
    # exactly torch's DeviceContexts with these devices (a graph made under the cpu default
    # device must not run under the meta one)
    default_devices: tuple[torch.device, ...] = ()
    # inference mode (distinct from grad mode: it makes inference tensors, and
    # torch.is_inference_mode_enabled() folds)
    inference_mode: bool = False
    autocast_cache: bool = True  # torch.is_autocast_cache_enabled()
    # (device type, dtype) of every device but cpu and cuda with autocast on; autocast is off
    # for the others of AUTOCAST_DEVICES
    autocast_others: tuple[tuple[str, torch.dtype], ...] = ()
    # The same facts for the C++ check (guards/_tensor_check.cpp); built when first rendered.
    spec: Any = field(default=None, compare=False, repr=False)

    @staticmethod
    def current(module_hooks: bool = False) -> GlobalState:
        cpu, cuda = torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")
        function_mode = torch._C._is_torch_function_mode_enabled()
        return GlobalState(
            grad_enabled=torch.is_grad_enabled(),
            default_dtype=torch.get_default_dtype(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            autocast_cpu=cpu,
            autocast_cuda=cuda,
            module_hooks=module_hooks,
            autocast_cpu_dtype=torch.get_autocast_dtype("cpu"),
            autocast_cuda_dtype=torch.get_autocast_dtype("cuda"),
            function_mode=function_mode,
            default_devices=device_modes() or (),
            inference_mode=torch.is_inference_mode_enabled(),
            autocast_cache=torch.is_autocast_cache_enabled(),
            autocast_others=tuple(
                (d, torch.get_autocast_dtype(d))
                for d in AUTOCAST_DEVICES
                if d not in ("cpu", "cuda") and torch.is_autocast_enabled(d)
            ),
        )

    def autocast_facts(self) -> list[tuple[str, bool, torch.dtype | None]]:
        """(device type, autocast on, its dtype or None when not pinned) for every device type
        of AUTOCAST_DEVICES: what the guard compares."""
        others = dict(self.autocast_others)
        facts: list[tuple[str, bool, torch.dtype | None]] = []
        for device in AUTOCAST_DEVICES:
            if device == "cpu":
                facts.append((device, self.autocast_cpu, self.autocast_cpu_dtype))
            elif device == "cuda":
                facts.append((device, self.autocast_cuda, self.autocast_cuda_dtype))
            else:
                facts.append((device, device in others, others.get(device)))
        return facts


from torch.nn.modules import module as _nn_module_globals  # noqa: E402 - the hook registries


@dataclass(frozen=True)
class Guard:
    source: Source | None  # None only for GLOBAL_STATE
    kind: GuardKind
    expected: Any
    origin: str = ""  # "file.py:12 in fn": the user line that made the translator rely on this

    def __str__(self) -> str:
        """The guard as a Python expression people can read (what `guards` logs print)."""
        if self.kind is GuardKind.TENSOR_MATCH:
            m = self.expected
            extra = "".join(
                f", {k}=True"
                for k, v in (("inference", m.inference), ("conj", m.conj), ("neg", m.neg))
                if v
            )
            if m.dynamic:
                size = "(" + ", ".join("*" if n is None else str(n) for n in m.shape)
                strides = f"stride={m.stride}" if m.stride else "contiguous=True"
                layout = f"size={size}{',' if len(m.shape) == 1 else ''}), {strides}"
            else:
                layout = f"size={m.shape}, stride={m.stride}"
            return (
                f"check_tensor({self.source}, {m.type.__name__}, {m.dtype}, {m.device!r}, "
                f"{layout}, requires_grad={m.requires_grad}{extra})"
            )
        if self.kind is GuardKind.SHAPE_EXPR:
            return self.expected.render(str)
        if self.kind is GuardKind.STORAGE_GROUPS:
            sources, groups = self.expected
            return f"storage_groups({', '.join(map(str, sources))}) == {groups!r}"
        if self.kind is GuardKind.GLOBAL_STATE:
            st = self.expected
            autocast = "".join(
                f", autocast_{d}_dtype={dt}"
                for d, dt in (("cpu", st.autocast_cpu_dtype), ("cuda", st.autocast_cuda_dtype))
                if dt
            )
            autocast += "".join(
                f", autocast_{d}=True, autocast_{d}_dtype={dt}" for d, dt in st.autocast_others
            )
            extra = ", inference_mode=True" if st.inference_mode else ""
            extra += "" if st.autocast_cache else ", autocast_cache=False"
            if st.function_mode:
                extra += f", default_devices={st.default_devices!r}"
            return (
                f"global_state(grad_enabled={st.grad_enabled}, default_dtype="
                f"{st.default_dtype}, deterministic={st.deterministic}, autocast_cpu="
                f"{st.autocast_cpu}, autocast_cuda={st.autocast_cuda}{autocast}{extra}"
                + (", no_global_module_hooks=True)" if st.module_hooks else ")")
            )
        if self.kind is GuardKind.STATE_READ:
            return _state_read_check(self.expected, _pretty_qualified)
        return self.check_expr(str(self.source) if self.source else "", _pretty_const, str)

    def check_expr(
        self, x: str, const: Callable[[Any], str], render: Callable[[Source], str] = str
    ) -> str:
        """The check as Python over `x` (this guard's source, rendered); `render` renders the
        other sources some kinds compare against."""
        kind, exp = self.kind, self.expected
        if kind is GuardKind.TYPE_MATCH:
            return f"type({x}) is {const(exp)}"
        if kind is GuardKind.ID_MATCH:
            return f"{x} is {const(exp)}"
        if kind is GuardKind.CONSTANT_MATCH:
            return _constant_check(x, exp, const)
        if kind is GuardKind.TENSOR_MATCH:
            return _tensor_match(x, exp, const)
        if kind is GuardKind.LENGTH_CHECK:
            return f"len({x}) == {exp}"
        if kind is GuardKind.DICT_KEYS:
            keys = ", ".join(_const_or_literal(k, const) for k in exp)
            return f"list({x}) == [{keys}]"
        if kind is GuardKind.MODULE_MATCH:
            # its class too: `m.__class__ = Other` changes what its calls run
            # exp[0] is a weak reference: an entry must not keep a dropped model alive (a new
            # model per experiment); once it is dead, nothing is it. None: any instance of the
            # class (a module shared by the instances of a layer class, frontend/dynamic.py)
            if exp[0] is None:
                return f"type({x}) is {const(exp[2])} and {x}.training is {exp[1]}"
            module = f"{const(exp[0])}()" if isinstance(exp[0], weakref.ref) else const(exp[0])
            check = f"{x} is {module} and {x}.training is {exp[1]}"
            return check + (f" and type({x}) is {const(exp[2])}" if len(exp) > 2 else "")
        if kind is GuardKind.MODULE_NO_HOOKS:
            return (
                f"not ({x}._forward_hooks or {x}._forward_pre_hooks"
                f" or {x}._backward_hooks or {x}._backward_pre_hooks)"
            )
        if kind is GuardKind.GLOBAL_STATE:
            return _global_state_check(exp, const)
        if kind is GuardKind.STATE_READ:
            return _state_read_check(exp, const)
        if kind is GuardKind.DUPLICATE_INPUT:
            return f"{x} is {render(exp)}"
        if kind is GuardKind.NO_ALIASING:
            ids = ", ".join(f"id({render(src)})" for src in exp)
            return f"len({{{ids}}}) == {len(exp)}"
        if kind is GuardKind.STORAGE_GROUPS:
            sources, groups = exp
            tensors = "(" + "".join(f"{render(src)}, " for src in sources) + ")"
            if cpp_tensor_guards() and hasattr(_tensor_check, "same_storages"):
                return f"{const(_tensor_check.same_storages)}({tensors}, {groups!r})"
            return f"{const(storage_groups)}({tensors}) == {groups!r}"
        if kind is GuardKind.SHAPE_EXPR:
            return exp.render(render, const)
        if kind is GuardKind.KEYS_ABSENT:
            if len(exp) == 1:
                return f"{exp[0]!r} not in {x}"
            return f"{x}.keys().isdisjoint({tuple(exp)!r})"
        raise AssertionError(kind)


def storage_key(t: Any) -> int | None:
    """What identifies `t`'s storage (real or fake): equal for views of one base. None for a
    non-tensor or a tensor with no storage (sparse raises NotImplementedError, a functorch or
    wrapper tensor RuntimeError)."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def storage_groups(tensors: Sequence[torch.Tensor]) -> tuple[int, ...]:
    """Number the tensors' storages in order of first appearance: `(0, 1, 0)` says the first and
    the last share memory. A tensor with no storage (sparse, a wrapper subclass) has its own."""
    seen: dict[Any, int] = {}
    groups = []
    for t in tensors:
        key = storage_key(t)
        groups.append(seen.setdefault(("tensor", id(t)) if key is None else key, len(seen)))
    return tuple(groups)


def _const_or_literal(value: Any, const: Callable[[Any], str]) -> str:
    # exact types: a str or int enum member (`Mode.GREEDY`) is a named constant, its repr is
    # not Python
    if type(value) in _LITERAL_TYPES or (type(value) is float and math.isfinite(value)):
        return repr(value)
    return const(value)


def _constant_check(x: str, value: Any, const: Callable[[Any], str]) -> str:
    t = type(value)
    if t is float and math.isnan(value):
        return f"type({x}) is float and {x} != {x}"
    if value is None or value is Ellipsis or value is NotImplemented:
        return f"{x} is {const(value) if value is not None else 'None'}"
    if t is bool:
        return f"{x} is {value}"
    check = f"type({x}) is {const(t)} and {x} == {_const_or_literal(value, const)}"
    if t is float and value == 0.0:  # 0.0 == -0.0, but 1/x tells them apart
        check += f" and {const(math.copysign)}(1.0, {x}) == {math.copysign(1.0, value)}"
    return check


def _tensor_match(x: str, m: TensorMeta, const: Callable[[Any], str]) -> str:
    if m.spec is not None and cpp_tensor_guards():
        return f"{const(_tensor_check.check)}({x}, {const(m.spec)})"
    if m.dynamic:
        static = [f"{x}.size({d}) == {n}" for d, n in enumerate(m.shape) if n is not None]
        strides = f"{x}.stride() == {m.stride!r}" if m.stride else f"{x}.is_contiguous()"
        layout = [f"{x}.dim() == {len(m.shape)}", *static, strides]
    else:
        layout = [f"{x}.shape == {m.shape!r}", f"{x}.stride() == {m.stride!r}"]
    parts = [
        f"type({x}) is {const(m.type)}",
        f"{x}.dtype is {const(m.dtype)}",
        f"{x}.device == {const(m.device)}",
        *layout,
        f"{x}.requires_grad is {m.requires_grad}",
        f"{x}.is_inference() is {m.inference}",
    ]
    if m.dtype.is_complex or m.conj:
        parts.append(f"{x}.is_conj() is {m.conj}")
    if m.neg:
        parts.append(f"{x}.is_neg() is {m.neg}")
    return " and ".join(parts)


# torch's own TorchFunctionModes that compiled code honours (the GLOBAL_STATE guard records that
# a function mode is on): `with torch.device("meta"):` and `torch.set_default_device` push one.
_COMPILED_FUNCTION_MODES: tuple[type, ...] = (DeviceContext,)


def user_mode_active() -> bool:
    """Is a TorchFunctionMode or TorchDispatchMode active that compiled code would not honour?
    (Any dispatch mode, FakeTensorMode included; any function mode but torch's device context.)
    Or is `torch.jit.trace` recording? A call made under one runs as plain Python: the mode or
    the tracer must see each of the program's own torch calls once, and none of framejit's
    guards, tracing or graphs. Nothing is compiled under one, and the GLOBAL_STATE guard,
    checked first, fails under one."""
    if torch._C._len_torch_dispatch_stack() or torch._C._get_tracing_state() is not None:
        return True
    return torch._C._is_torch_function_mode_enabled() and device_modes() is None


def device_modes() -> tuple[torch.device, ...] | None:
    """The device each function mode on the stack selects, bottom first, when function modes
    are on and every one of them is torch's DeviceContext; None otherwise (none on, or one of
    the user's)."""
    c = torch._C
    if not c._is_torch_function_mode_enabled():
        return None
    devices = []
    for i in range(c._len_torch_function_stack()):
        mode = c._get_function_stack_at(i)
        if type(mode) not in _COMPILED_FUNCTION_MODES:
            return None
        devices.append(mode.device)
    return tuple(devices)


def _state_spec(s: GlobalState) -> Any:
    """The C++ form of `s` (None without the accelerator): state_check(spec) compares the
    same facts as the Python check below, in one call."""
    if not cpp_tensor_guards() or not hasattr(_tensor_check, "state_spec"):
        return None
    if s.spec is None:
        autocast = tuple((torch.device(d), on, dtype) for d, on, dtype in s.autocast_facts())
        spec = _tensor_check.state_spec(
            s.grad_enabled,
            s.inference_mode,
            s.default_dtype,
            s.deterministic,
            autocast,
            s.autocast_cache,
            s.function_mode,
            tuple(s.default_devices),
            DeviceContext,
        )
        object.__setattr__(s, "spec", spec)  # a cache: not part of the state's identity
    return s.spec


def _global_state_check(s: GlobalState, const: Callable[[Any], str]) -> str:
    spec = _state_spec(s)
    if spec is not None:
        parts = [f"{const(_tensor_check.state_check)}({const(spec)})"]
    else:
        parts = _python_state_check(s, const)
    # no torch.jit.trace under way (user_mode_active): the tracer records the program's own ops
    parts.append(f"{const(torch._C._get_tracing_state)}() is None")
    if s.module_hooks:
        m = const(_nn_module_globals)
        parts.append(
            f"not ({m}._global_forward_hooks or {m}._global_forward_pre_hooks"
            f" or {m}._global_backward_hooks or {m}._global_backward_pre_hooks)"
        )
    return " and ".join(parts)


def _python_state_check(s: GlobalState, const: Callable[[Any], str]) -> list[str]:
    """The GLOBAL_STATE facts as Python (no C++ accelerator): the same facts state_check
    compares."""
    # torch._C's own functions, bound as constants: no attribute lookups on the hot path.
    c = torch._C
    parts = [
        f"{const(c.is_grad_enabled)}() is {s.grad_enabled}",
        f"{const(torch.is_inference_mode_enabled)}() is {s.inference_mode}",
        f"{const(c.get_default_dtype)}() is {const(s.default_dtype)}",
        f"{const(c._get_deterministic_algorithms)}() is {s.deterministic}",
        f"{const(torch.is_autocast_cache_enabled)}() is {s.autocast_cache}",
    ]
    facts = s.autocast_facts()
    enabled = const(torch.is_autocast_enabled)
    if not any(on for _, on, _ in facts):
        # the one call covers every device of AUTOCAST_DEVICES (on torch 2.13 also mtia: there
        # autocast for mtia fails this check, and passes the C++ one, which ignores mtia)
        parts.append(f"not {const(c._is_any_autocast_enabled)}()")
    else:
        parts += [f"{enabled}({d!r}) is {on}" for d, on, _ in facts]
    parts += [
        f"{const(torch.get_autocast_dtype)}({d!r}) is {const(dtype)}"
        for d, _, dtype in facts
        if dtype is not None
    ]
    # no user mode (user_mode_active): no dispatch mode at all, and a function mode only where
    # the frame was compiled under torch's device context, selecting the same devices
    parts.append(f"not {const(c._len_torch_dispatch_stack)}()")
    if s.function_mode:
        parts.append(f"{const(device_modes)}() == {const(tuple(s.default_devices))}")
    else:
        parts.append(f"not {const(c._is_torch_function_mode_enabled)}()")
    return parts


def _state_read_check(read: tuple[Any, ...], const: Callable[[Any], str]) -> str:
    """`fn(*args, **kwargs)` returns `value` again. Identity for what has one value per
    meaning (bools, None, dtypes), equality for the rest (ints, strings, devices)."""
    fn, args, kwargs, value = read
    call_args = [_const_or_literal(a, const) for a in args]
    call_args += [f"{k}={_const_or_literal(v, const)}" for k, v in kwargs]
    call = f"{const(fn)}({', '.join(call_args)})"
    if value is None or type(value) is bool or isinstance(value, torch.dtype):
        return f"{call} is {_const_or_literal(value, const)}"
    return f"{call} == {_const_or_literal(value, const)}"


def _pretty_const(obj: Any) -> str:
    """How an object prints inside a guard for people: valid Python, readable names."""
    if isinstance(obj, weakref.ref):  # named as what it refers to (a module)
        target = obj()
        return _pretty_const(target) if target is not None else f"dead_{id(obj):#x}"
    if obj is torch:
        return "torch"
    if isinstance(obj, type):
        name = (
            obj.__qualname__
            if obj.__module__ == "builtins"
            else (f"{obj.__module__}.{obj.__qualname__}")
        )
        return _identifier_path(name)
    if isinstance(obj, (torch.dtype, torch.device)):
        return repr(obj)
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if callable(obj) and hasattr(obj, "__qualname__"):
        if obj.__qualname__.startswith("pybind11_"):  # torch._C's functions: a mangled class
            return obj.__name__
        return _identifier_path(obj.__qualname__)
    if isinstance(obj, types.CodeType):
        return f"code_{_identifier_path(obj.co_qualname).replace('.', '_')}_{id(obj):#x}"
    return f"{_identifier_path(type(obj).__qualname__).replace('.', '_')}_{id(obj):#x}"


def _pretty_qualified(obj: Any) -> str:
    """`_pretty_const`, with a function's module: `torch.get_num_threads`."""
    module = getattr(obj, "__module__", None)
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)) and module:
        return _identifier_path(f"{module}.{obj.__qualname__}")
    return _pretty_const(obj)


def _identifier_path(name: str) -> str:
    """`f.<locals>.g` -> `f._locals_.g`: a dotted name that parses as Python."""
    return ".".join(re.sub(r"\W", "_", part) or "_" for part in name.split("."))
