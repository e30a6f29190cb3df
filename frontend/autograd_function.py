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

import types
import weakref
from typing import Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.purity import scan, stateful_global

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


def _impure(cls: type) -> str | None:
    if cls in _verdicts:
        return _verdicts[cls]
    verdict = None
    if "apply" in vars(cls) or "vmap" in vars(cls) or "jvp" in vars(cls):
        verdict = f"{cls.__qualname__} defines apply, vmap or jvp"
    for fn in _functions(cls) if verdict is None else ():
        ctx = fn.__code__.co_varnames[0] if fn.__code__.co_argcount else None
        verdict = scan(fn, ctx) or stateful_global(fn)
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
