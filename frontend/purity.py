"""A conservative scan of a function's bytecode for effects beyond its tensors.

Used where framejit runs or reorders a user's function differently from Python: an autograd
Function's forward/backward (run on FakeTensors while tracing), and a generator drained ahead of
its consumer at a graph break (variables/generators.py). The scan reads the bytecode of the
function, of the code objects nested in it and of the plain global functions it calls (three
levels deep). It finds: writes to globals, closures or attributes; in-place tensor methods
(`name_`, `mark_dirty`); globals other than modules, classes, torch/math/operator functions and
a short list of pure builtins (so `print`, `open`, `input` and the like are effects). What it
does not see (a method of an argument that has an effect) the callers rule out by what they
accept as arguments.
"""

from __future__ import annotations

import builtins
import dis
import math
import operator
import types
from typing import Any

import torch

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


def global_ok(value: Any) -> bool:
    if isinstance(value, types.ModuleType):
        return True
    if isinstance(value, type):
        return True
    module = getattr(value, "__module__", None) or ""
    if module == "torch" or module.startswith("torch."):
        return True
    return any(getattr(m, getattr(value, "__name__", ""), None) is value for m in _PURE_MODULES)


def scan(
    fn: types.FunctionType,
    ctx_name: str | None = None,
    depth: int = 0,
    generator: bool = False,
    modules: bool = False,
) -> str | None:
    """Why `fn` may have an effect besides its tensors (None: it has none that we can see).
    `ctx_name`: an argument whose attributes it may set (an autograd Function's ctx);
    `generator`: `fn` itself may be a generator (its nested code and callees may not);
    `modules`: `fn` may read nn.Module globals (a torch.func transform passes their state in,
    see `stateful_global`)."""
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
            if op in ("YIELD_VALUE", "RETURN_GENERATOR") and not (
                generator and code is fn.__code__
            ):
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
                if isinstance(value, types.FunctionType) and not global_ok(value):
                    if depth >= 3:
                        return f"{where} calls `{name}` (too deep to check)"
                    why = scan(value, None, depth + 1)
                    if why is not None:
                        return why
                elif not global_ok(value) and not (
                    modules and depth == 0 and isinstance(value, torch.nn.Module)
                ):
                    return f"{where} uses the global `{name}` ({type(value).__name__})"
            previous = inst
    return None


def stateful_global(
    fn: types.FunctionType, depth: int = 0, modules: dict[str, Any] | None = None
) -> str | None:
    """A global the function (or a plain function it calls) reads that holds tensors: a module
    or a tensor. A graph op that calls the function for real (an autograd Function, a torch.func
    transform) would have the AOT stage bake its current values in, and its parameters would get
    no gradients. `scan` lets such globals pass: their classes come from torch. With `modules`,
    the function's own module globals are collected there (name -> module) instead: the caller
    passes their parameters and buffers in (frontend/functorch.py)."""
    codes = [fn.__code__]
    while codes:
        code = codes.pop()
        codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        for name in code.co_names:
            value = fn.__globals__.get(name)
            if isinstance(value, torch.nn.Module) and modules is not None and depth == 0:
                modules[name] = value
                continue
            if isinstance(value, (torch.Tensor, torch.nn.Module)):
                return f"{fn.__qualname__} reads the global `{name}`, a {type(value).__name__}"
            if isinstance(value, types.FunctionType) and depth < 3 and value is not fn:
                why = stateful_global(value, depth + 1)
                if why is not None:
                    return why
    return None
