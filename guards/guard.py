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
    MODULE_MATCH = "MODULE_MATCH"  # x is module, x.training is flag (and type(x) is its class)
    MODULE_NO_HOOKS = "MODULE_NO_HOOKS"  # no forward/backward hooks registered on x
    GLOBAL_STATE = "GLOBAL_STATE"  # grad mode, autocast, default dtype, determinism
    DUPLICATE_INPUT = "DUPLICATE_INPUT"  # x is y: two sources reached the same tensor
    NO_ALIASING = "NO_ALIASING"  # the tensors at these sources are distinct objects
    # which of the tensors at these sources share a storage (views of one base), as traced
    STORAGE_GROUPS = "STORAGE_GROUPS"
    SHAPE_EXPR = "SHAPE_EXPR"  # a fact about symbolic sizes: `x.size()[0] == y.size()[1]`
    KEYS_ABSENT = "KEYS_ABSENT"  # none of these keys is in dict x (no shadowing name)


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
    # guards, and the strides by contiguity (only contiguous inputs get symbolic sizes).
    dynamic: tuple[int, ...] = ()

    @staticmethod
    def of(t: torch.Tensor, dynamic: tuple[int, ...] = ()) -> TensorMeta:
        spec = None
        if _tensor_check is not None and t.layout == torch.strided:
            try:
                spec = _tensor_check.spec(t, dynamic) if dynamic else _tensor_check.spec(t)
            except TypeError:  # built before symbolic sizes existed: the Python check runs
                spec = None
        shape = tuple(t.shape)
        if dynamic:
            shape = tuple(None if d in dynamic else n for d, n in enumerate(shape))
        return TensorMeta(
            type=type(t),
            dtype=t.dtype,
            device=t.device,
            shape=shape,  # type: ignore[arg-type]
            stride=() if dynamic else tuple(t.stride()),
            requires_grad=t.requires_grad,
            inference=t.is_inference(),
            conj=t.is_conj(),
            neg=t.is_neg(),
            spec=spec,
            dynamic=tuple(sorted(dynamic)),
        )


@dataclass(frozen=True)
class GlobalState:
    grad_enabled: bool
    default_dtype: torch.dtype
    deterministic: bool
    autocast_cpu: bool
    autocast_cuda: bool
    module_hooks: bool = False  # guard that no global nn.Module hooks exist
    autocast_cpu_dtype: torch.dtype | None = None  # only when autocast is on for the device
    autocast_cuda_dtype: torch.dtype | None = None
    # a TorchFunctionMode is active (`with torch.device("meta"):`, `set_default_device`):
    # it changes what factory calls make
    function_mode: bool = False

    @staticmethod
    def current(module_hooks: bool = False) -> GlobalState:
        cpu, cuda = torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")
        return GlobalState(
            grad_enabled=torch.is_grad_enabled(),
            default_dtype=torch.get_default_dtype(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            autocast_cpu=cpu,
            autocast_cuda=cuda,
            module_hooks=module_hooks,
            autocast_cpu_dtype=torch.get_autocast_dtype("cpu") if cpu else None,
            autocast_cuda_dtype=torch.get_autocast_dtype("cuda") if cuda else None,
            function_mode=torch._C._is_torch_function_mode_enabled(),
        )


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
                layout = f"size={size}{',' if len(m.shape) == 1 else ''}), contiguous=True"
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
            return (
                f"global_state(grad_enabled={st.grad_enabled}, default_dtype="
                f"{st.default_dtype}, deterministic={st.deterministic}, autocast_cpu="
                f"{st.autocast_cpu}, autocast_cuda={st.autocast_cuda}{autocast}"
                + (", no_global_module_hooks=True)" if st.module_hooks else ")")
            )
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
            # model per experiment); once it is dead, nothing is it
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
            return exp.render(render)
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
        layout = [f"{x}.dim() == {len(m.shape)}", *static, f"{x}.is_contiguous()"]
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
    A call made under one runs as plain Python: the mode must see each of the program's own
    torch calls once, and none of framejit's guards, tracing or graphs. Nothing is compiled
    under one, and the GLOBAL_STATE guard, checked first, fails under one."""
    c = torch._C
    if c._len_torch_dispatch_stack():
        return True
    if not c._is_torch_function_mode_enabled():
        return False
    return any(
        type(c._get_function_stack_at(i)) not in _COMPILED_FUNCTION_MODES
        for i in range(c._len_torch_function_stack())
    )


def _global_state_check(s: GlobalState, const: Callable[[Any], str]) -> str:
    # torch._C's own functions, bound as constants: no attribute lookups on the hot path.
    c = torch._C
    parts = [
        f"{const(c.is_grad_enabled)}() is {s.grad_enabled}",
        f"{const(c.get_default_dtype)}() is {const(s.default_dtype)}",
        f"{const(c._get_deterministic_algorithms)}() is {s.deterministic}",
    ]
    if not (s.autocast_cpu or s.autocast_cuda) and not c._is_any_autocast_enabled():
        parts.append(f"not {const(c._is_any_autocast_enabled)}()")
    else:
        parts.append(f"{const(torch.is_autocast_enabled)}('cpu') is {s.autocast_cpu}")
        parts.append(f"{const(torch.is_autocast_enabled)}('cuda') is {s.autocast_cuda}")
    if s.autocast_cpu_dtype is not None:
        parts.append(f"{const(torch.get_autocast_dtype)}('cpu') is {const(s.autocast_cpu_dtype)}")
    if s.autocast_cuda_dtype is not None:
        parts.append(f"{const(torch.get_autocast_dtype)}('cuda') is {const(s.autocast_cuda_dtype)}")
    # no user mode (user_mode_active): no dispatch mode at all, and a function mode only where
    # the frame was compiled under torch's device context
    parts.append(f"not {const(c._len_torch_dispatch_stack)}()")
    if s.function_mode:
        parts.append(
            f"{const(c._is_torch_function_mode_enabled)}() and not {const(user_mode_active)}()"
        )
    else:
        parts.append(f"not {const(c._is_torch_function_mode_enabled)}()")
    if s.module_hooks:
        m = const(_nn_module_globals)
        parts.append(
            f"not ({m}._global_forward_hooks or {m}._global_forward_pre_hooks"
            f" or {m}._global_backward_hooks or {m}._global_backward_pre_hooks)"
        )
    return " and ".join(parts)


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
        return _identifier_path(obj.__qualname__)
    if isinstance(obj, types.CodeType):
        return f"code_{_identifier_path(obj.co_qualname).replace('.', '_')}_{id(obj):#x}"
    return f"{_identifier_path(type(obj).__qualname__).replace('.', '_')}_{id(obj):#x}"


def _identifier_path(name: str) -> str:
    """`f.<locals>.g` -> `f._locals_.g`: a dotted name that parses as Python."""
    return ".".join(re.sub(r"\W", "_", part) or "_" for part in name.split("."))
