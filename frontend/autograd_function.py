"""Custom `torch.autograd.Function`s: `MyFn.apply(*args)` becomes one graph op.

The call is not traced into: the op's target is a small function that calls `MyFn.apply`, run
on FakeTensors while tracing (for the output's metadata) and for real by the compiled graph.
The eager backend therefore runs the user's forward and backward as they are; the AOT stage
traces through both (make_fx records the forward's ops, and autograd calls the user's backward
while the joint graph is traced), so the compiled backward is the user's, not autograd's
derivative of the forward.

Because the forward runs on FakeTensors at trace time and, under the AOT backends, only its
ops are kept, a Function may be captured only if its `forward`, `backward` and
`setup_context` have no effect besides their tensors (`_impure`, a conservative scan of their
bytecode and of the plain functions they call): no writes to globals, closures or attributes of
anything but `ctx`; no in-place tensor methods (a write to an input would need `mark_dirty`);
globals that are modules, torch or math functions, classes, a short list of pure builtins, or
plain functions that pass the same scan. Anything else is a graph break naming what was found,
and the call runs as Python, as before.

State they read must be what the compiled graph was traced with (`_check_state_reads`): the AOT
stage keeps the values the forward and backward read while tracing. A class attribute, a
module attribute or a closure cell's contents that the forward or setup_context reads must be an
immutable constant, and is guarded like a global the traced code reads; one that the backward
reads must not be data at all (it is read when the backward runs, after every guard: no check
could see a change made between the forward and the backward). Arguments besides tensors must
be immutable constants: the graph holds them folded, so a dict or a list passed in would reach
the Function as a copy, and its writes (or the caller's) would not be shared.
"""

from __future__ import annotations

import dis
import enum
import types
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.purity import global_ok, scan, stateful_global
from framejit.frontend.sources import AttrSource, ConstSource, GlobalSource, ItemSource, Source

_METHODS = ("forward", "setup_context", "backward")

_verdicts: weakref.WeakKeyDictionary[type, str | None] = weakref.WeakKeyDictionary()
_targets: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()

# Values that cannot change in place: a guard on one pins it (tuples and frozensets of them too).
_IMMUTABLE_TYPES = (
    bool, int, float, complex, str, bytes, type(None), range, slice, type(Ellipsis),
    torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size,
)  # fmt: skip
# Library modules whose attributes are read without guards, as the translator reads them.
_FIXED_ROOTS = frozenset({"torch", "math", "cmath", "operator", "builtins", "numbers", "enum"})
_MAX_DEPTH = 3  # plain functions reached from forward/backward, as `scan` follows them


@dataclass(frozen=True)
class _Method:
    name: str
    fn: types.FunctionType
    ctx: str | None  # the argument whose attributes it may set
    cls: str | None  # a classmethod's class argument


def _methods(cls: type) -> list[_Method]:
    """The forward/setup_context/backward a subclass defines (below torch's own base)."""
    found = []
    for name in _METHODS:
        for klass in cls.__mro__:
            if klass.__module__.startswith("torch.autograd") or name not in vars(klass):
                continue
            raw = vars(klass)[name]
            fn = getattr(raw, "__func__", raw)  # staticmethod / classmethod
            for _ in range(4):  # once_differentiable and other functools.wraps wrappers
                inner = getattr(fn, "__wrapped__", None)
                if inner is None:
                    break
                fn = inner
            if isinstance(fn, types.FunctionType):
                names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
                owner = names[0] if isinstance(raw, classmethod) and names else None
                names = names[1:] if owner is not None else names
                # a forward with a setup_context takes no ctx
                ctx_free = name == "forward" and _defines(cls, "setup_context")
                ctx = names[0] if names and not ctx_free else None
                found.append(_Method(name, fn, ctx, owner))
            break
    return found


def _defines(cls: type, name: str) -> bool:
    return any(
        name in vars(k) and not k.__module__.startswith("torch.autograd") for k in cls.__mro__
    )


def _impure(cls: type) -> str | None:
    if cls in _verdicts:
        return _verdicts[cls]
    verdict = None
    if "apply" in vars(cls) or "vmap" in vars(cls) or "jvp" in vars(cls):
        verdict = f"{cls.__qualname__} defines apply, vmap or jvp"
    for method in _methods(cls) if verdict is None else ():
        verdict = scan(method.fn, method.ctx) or stateful_global(method.fn)
        if verdict is not None:
            break
    _verdicts[cls] = verdict
    return verdict


# --- state the Function reads ----------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    """`root.a.b` in `fn`'s code: root is a global, a free variable, or a classmethod's class."""

    fn: types.FunctionType
    kind: str  # "global", "cell" or "cls"
    name: str
    path: tuple[str, ...]


def _reads(fn: types.FunctionType, cls_arg: str | None) -> list[_Read]:
    free = fn.__code__.co_freevars
    out = []
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        insts = list(dis.get_instructions(code))
        for i, inst in enumerate(insts):
            if inst.opname == "LOAD_GLOBAL":
                kind = "global"
            elif inst.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF") and inst.argval in free:
                kind = "cell"  # (a cell of fn's own local, shared with nested code, is a local)
            elif inst.opname == "LOAD_FAST" and code is fn.__code__ and inst.argval == cls_arg:
                kind = "cls"
            else:
                continue
            path = []
            for nxt in insts[i + 1 :]:
                if nxt.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                    break
                path.append(nxt.argval)
            out.append(_Read(fn, kind, inst.argval, tuple(path)))
    return out


def _immutable(value: Any) -> bool:
    if type(value) in (tuple, frozenset):
        return all(_immutable(v) for v in value)
    return type(value) in _IMMUTABLE_TYPES or isinstance(value, enum.Enum)


def _fixed(value: Any) -> bool:
    """Library code and constants (torch, math): read without guards."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
    elif isinstance(value, (type, types.FunctionType)):
        module = getattr(value, "__module__", None) or ""
    else:
        return False
    return module.split(".")[0] in _FIXED_ROOTS


def _callable_code(value: Any) -> bool:
    """A callable with no state of its own: a torch/math function, a builtin function."""
    if isinstance(value, (types.BuiltinFunctionType, types.MethodWrapperType)):
        owner = getattr(value, "__self__", None)
        return owner is None or isinstance(owner, types.ModuleType)
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return True
    return not isinstance(value, torch.nn.Module) and callable(value) and global_ok(value)


class _StateCheck:
    """Walks what the methods of one Function read, guarding or refusing each value."""

    def __init__(self, tx: Any, cls: type, label: str) -> None:
        self.tx = tx
        self.cls = cls
        self.label = label
        self.seen: set[tuple[Any, bool]] = set()

    def refuse(self, fn: types.FunctionType, why: str) -> Unsupported:
        code = fn.__code__
        where = f"{fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"
        return Unsupported("unsupported_call", self.label, f"{where} {why}")

    def function(
        self, fn: types.FunctionType, backward: bool, cls_arg: str | None, depth: int
    ) -> None:
        if (fn, backward) in self.seen:
            return
        self.seen.add((fn, backward))
        for read in _reads(fn, cls_arg):
            self.read(read, backward, depth)

    def read(self, read: _Read, backward: bool, depth: int) -> None:
        fn = read.fn
        if read.kind == "cell":
            cell = fn.__closure__[fn.__code__.co_freevars.index(read.name)]  # type: ignore[index]
            try:
                value = cell.cell_contents
            except ValueError:
                raise self.refuse(fn, f"reads the free variable `{read.name}` unassigned") from None
            label = f"cell {read.name} of {fn.__qualname__}"
            source: Source = AttrSource(ConstSource(cell, label), "cell_contents")
            if self._cell_written(cell):
                raise self.refuse(fn, f"reads `{read.name}`, which this trace assigned")
        elif read.kind == "cls":
            value, source = self.cls, ConstSource(self.cls, self.cls.__qualname__)
        else:
            if read.name not in fn.__globals__:
                return  # a builtin: `scan` judged it
            value = fn.__globals__[read.name]
            if fn.__globals__ is self.tx.output.fn.__globals__:
                source = GlobalSource(read.name)
                if read.name in self.tx.output.side_effects.globals:
                    raise self.refuse(fn, f"reads `{read.name}`, which this trace assigned")
            else:
                module = str(fn.__globals__.get("__name__", "?"))
                source = ItemSource(ConstSource(fn.__globals__, f"globals of {module}"), read.name)
        text = read.name
        for attr in read.path:
            if _fixed(value) or not isinstance(value, (type, types.ModuleType)):
                break
            try:
                value = getattr(value, attr)
            except AttributeError:
                raise self.refuse(fn, f"reads `{text}.{attr}`, which is missing") from None
            source, text = AttrSource(source, attr), f"{text}.{attr}"
            written = self.tx.output.side_effects.attrs.values()
            if any(attr in names for _, names in written):
                raise self.refuse(fn, f"reads `{text}`, which this trace assigned")
        self.value(fn, value, source, text, backward, depth)

    def value(self, fn: types.FunctionType, value: Any, source: Source, text: str,
              backward: bool, depth: int) -> None:  # fmt: skip
        if isinstance(value, types.MethodType) and isinstance(value.__self__, type):
            value = value.__func__  # a classmethod read through its class
        if _fixed(value) or isinstance(value, (type, types.ModuleType)):
            return
        if isinstance(value, types.FunctionType):
            if depth >= _MAX_DEPTH:
                raise self.refuse(fn, f"calls `{text}` (too deep to check)")
            why = scan(value) or stateful_global(value)
            if why is not None:
                raise Unsupported("unsupported_call", self.label, why)
            self.function(value, backward, None, depth + 1)
            return
        if _callable_code(value):
            return
        if not _immutable(value):
            raise self.refuse(
                fn, f"reads `{text}`, a {type(value).__name__} that may change between calls"
            )
        if backward:
            raise self.refuse(
                fn,
                f"reads `{text}` in the backward, which runs after the guards: a change "
                "before it would not be seen",
            )
        vt = self.tx.wrap_source(source)  # guarded, like a global the traced code reads
        constant = vt.as_constant() if vt.is_constant() else None
        if not (type(constant) is type(value) and constant == value):
            raise self.refuse(fn, f"reads `{text}`, which cannot be guarded")

    def _cell_written(self, cell: Any) -> bool:
        """The trace assigned the cell (its write is replayed after the graph, which runs the
        Function first): see inlining.real_cell."""
        root = self.tx
        while root.parent is not None:
            root = root.parent
        known = root.__dict__.get("_real_cells", {}).get(id(cell))
        return known is not None and known.cell is cell and known.written is not None


def _check_state_reads(tx: Any, cls: type, label: str) -> None:
    """Guard what the Function's methods read besides their arguments (forward and
    setup_context), or refuse what no guard can pin (see the module docstring)."""
    check = _StateCheck(tx, cls, label)
    for method in _methods(cls):
        check.function(method.fn, method.name == "backward", method.cls, 0)


def _target(cls: type) -> Any:
    """The graph op for `cls.apply`: one function per class, named after it."""
    target = _targets.get(cls)
    if target is None:
        ref = weakref.ref(cls)

        def target(*args: Any) -> Any:
            return ref().apply(*args)  # type: ignore[union-attr]

        target.__name__ = target.__qualname__ = f"{cls.__name__}_apply"
        _targets[cls] = target
    return target


def apply(tx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`MyFn.apply(*args)` (the classmethod, with the class as the first argument)."""
    from framejit.frontend.variables.objects import ClassVariable
    from framejit.frontend.variables.tensor import TensorVariable

    if not args or not isinstance(args[0], ClassVariable):
        raise Unsupported("unsupported_call", "Function.apply without its class")
    cls = args[0].cls
    label = f"{cls.__qualname__}.apply"
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise Unsupported("unsupported_call", label, "not a torch.autograd.Function")
    if kwargs:
        raise Unsupported("unsupported_call", label, "keyword arguments")
    for a in args[1:]:
        if isinstance(a, TensorVariable):
            continue
        if not (a.is_constant() and _immutable(a.as_constant())):
            # folded into the graph, a list or a dict would reach the Function as a copy
            raise Unsupported("unsupported_call", label, f"an argument of type {a!r}")
    why = _impure(cls)
    if why is not None:
        raise Unsupported("unsupported_call", label, why)
    _check_state_reads(tx, cls, label)
    return tx.output.call_op("call_function", _target(cls), list(args[1:]), {})
