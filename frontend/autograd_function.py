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
"""

from __future__ import annotations

import builtins
import dis
import math
import operator
import types
import weakref
from typing import Any

import torch
from framejit.frontend.errors import Unsupported

_PURE_BUILTINS = frozenset(
    {
        "len", "range", "isinstance", "issubclass", "tuple", "list", "dict", "int", "float",
        "bool", "str", "min", "max", "abs", "zip", "enumerate", "getattr", "hasattr", "super",
        "any", "all", "sum", "reversed", "sorted", "slice", "type", "divmod", "round", "map",
        "NotImplementedError", "ValueError", "TypeError", "RuntimeError", "AssertionError",
    }
)  # fmt: skip
_PURE_MODULES = (torch, math, operator)
_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"})
_METHODS = frozenset({"forward", "backward", "setup_context"})

_verdicts: weakref.WeakKeyDictionary[type, str | None] = weakref.WeakKeyDictionary()
_targets: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()


def _functions(cls: type) -> list[types.FunctionType]:
    """The forward/backward/setup_context a subclass defines (below torch's own base)."""
    found = []
    for name in _METHODS:
        for klass in cls.__mro__:
            if klass.__module__.startswith("torch.autograd") or name not in vars(klass):
                continue
            fn = vars(klass)[name]
            fn = getattr(fn, "__func__", fn)  # staticmethod / classmethod
            for _ in range(4):  # once_differentiable and other functools.wraps wrappers
                inner = getattr(fn, "__wrapped__", None)
                if inner is None:
                    break
                fn = inner
            if isinstance(fn, types.FunctionType):
                found.append(fn)
            break
    return found


def _global_ok(value: Any) -> bool:
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, type):
        return True
    module = getattr(value, "__module__", None) or ""
    if module == "torch" or module.startswith("torch."):
        return True
    return any(getattr(m, getattr(value, "__name__", ""), None) is value for m in _PURE_MODULES)


def _scan(fn: types.FunctionType, ctx_name: str | None, depth: int) -> str | None:
    """Why `fn` may have an effect besides its tensors (None: it has none that we can see)."""
    where = f"{fn.__qualname__} ({fn.__code__.co_filename}:{fn.__code__.co_firstlineno})"
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        previous = None
        for inst in dis.get_instructions(code):
            op = inst.opname
            if op in _STORES:
                return f"{where} writes `{inst.argval}` outside itself"
            if op in ("STORE_ATTR", "DELETE_ATTR"):
                own = code is fn.__code__ and ctx_name is not None
                if not (own and previous is not None and previous.opname == "LOAD_FAST"
                        and previous.argval == ctx_name):  # fmt: skip
                    return f"{where} sets the attribute `{inst.argval}` of something not ctx"
            if op in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(inst.argval, str):
                name = inst.argval
                if name.endswith("_") and not name.endswith("__") or name == "mark_dirty":
                    return f"{where} calls `{name}`, which may write to a tensor in place"
            if op in ("YIELD_VALUE", "RETURN_GENERATOR"):
                return f"{where} is a generator"
            if op == "LOAD_GLOBAL":
                name = inst.argval
                if name in fn.__globals__:
                    value = fn.__globals__[name]
                elif name in _PURE_BUILTINS and hasattr(builtins, name):
                    previous = inst
                    continue
                else:
                    return f"{where} uses `{name}`"
                if isinstance(value, types.FunctionType) and not _global_ok(value):
                    if depth >= 3:
                        return f"{where} calls `{name}` (too deep to check)"
                    why = _scan(value, None, depth + 1)
                    if why is not None:
                        return why
                elif not _global_ok(value):
                    return f"{where} uses the global `{name}` ({type(value).__name__})"
            previous = inst
    return None


def _impure(cls: type) -> str | None:
    if cls in _verdicts:
        return _verdicts[cls]
    verdict = None
    if "apply" in vars(cls) or "vmap" in vars(cls) or "jvp" in vars(cls):
        verdict = f"{cls.__qualname__} defines apply, vmap or jvp"
    for fn in _functions(cls) if verdict is None else ():
        ctx = fn.__code__.co_varnames[0] if fn.__code__.co_argcount else None
        verdict = _scan(fn, ctx, 0)
        if verdict is not None:
            break
    _verdicts[cls] = verdict
    return verdict


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
        if not (isinstance(a, TensorVariable) or a.is_constant()):
            raise Unsupported("unsupported_call", label, f"an argument of type {a!r}")
    why = _impure(cls)
    if why is not None:
        raise Unsupported("unsupported_call", label, why)
    return tx.output.call_op("call_function", _target(cls), list(args[1:]), {})
