"""The symbolic interpreter: runs a code object's instructions over VariableTrackers.

One Translator per frame being traced; an inlined call runs a child Translator that shares the
parent's OutputGraph. The instruction loop is small: fetch, dispatch to the handler registered
for the opname (frontend/handlers/), repeat until RETURN. Everything specific to an opcode
lives in its handler; everything specific to a Python version lives in versions.py.

Invariants:
- The translator never runs user code: calls are inlined, tensor ops go to the graph, pure
  functions of constants are folded.
- Every fact read from the real frame goes through a Source and leaves a guard behind
  (variables/builder.py).
- On anything it cannot capture it raises Unsupported with the user's stack attached.
"""

from __future__ import annotations

import dis
import inspect
import operator
import types
import weakref
from typing import Any

import torch
from framejit.frontend.breaks import GraphBreak, can_break
from framejit.frontend.errors import Location, Unsupported
from framejit.frontend.handlers import HANDLERS, unsupported_opcodes
from framejit.frontend.output_graph import OutputGraph
from framejit.frontend.sources import (
    AttrSource,
    FreeVarSource,
    GlobalSource,
    ItemSource,
    Source,
    closure_cell_source,
    default_source,
    kwdefault_source,
)
from framejit.frontend.variables import builder
from framejit.frontend.variables.base import (
    BINARY_OPS,
    CellVariable,
    ConstantVariable,
    VariableTracker,
    mutation_count,
    note_mutation,
    undo_mark,
    undo_to,
)
from framejit.frontend.variables.containers import (
    BaseSequence,
    DictVariable,
    IteratorVariable,
    ListVariable,
    TupleVariable,
)
from framejit.frontend.variables.functions import (
    NestedFunctionVariable,
    UserFunctionVariable,
)
from framejit.frontend.variables.objects import (
    NewObjectVariable,
    NNModuleVariable,
    UserObjectVariable,
)
from framejit.frontend.variables.rnn import RNN_TYPES, call_rnn
from framejit.frontend.variables.tensor import TensorVariable
from framejit.guards import GuardKind

from framejit.config import config

MAX_STEPS = 2_000_000  # instructions per traced frame, inlined calls included


class Decoded:
    """A code object's instructions, decoded once."""

    def __init__(self, code: types.CodeType) -> None:
        self.instructions = list(dis.get_instructions(code))
        self.index_of = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.next_offset = {
            a.offset: b.offset for a, b in zip(self.instructions, self.instructions[1:])
        }


_decoded: weakref.WeakKeyDictionary[types.CodeType, Decoded] = weakref.WeakKeyDictionary()
_signatures: weakref.WeakKeyDictionary[types.CodeType, tuple[Any, inspect.Signature]] = (
    weakref.WeakKeyDictionary()
)


def decode(code: types.CodeType) -> Decoded:
    d = _decoded.get(code)
    if d is None:
        d = _decoded[code] = Decoded(code)
    return d


class _RealCell(VariableTracker):
    """A free variable backed by a real cell, read through its Source when loaded."""

    def __init__(self, source: Source | None, cell: Any) -> None:
        self.source = source
        self.cell = cell
        self.written: VariableTracker | None = None  # a value assigned while tracing


class Translator:
    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        output: OutputGraph,
        local_vars: dict[str, VariableTracker],
        freevars: dict[str, CellVariable | _RealCell],
        parent: Translator | None = None,
        globals_source_ok: bool = True,
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.output = output
        self.locals = local_vars
        self.cells: dict[str, CellVariable | _RealCell] = dict(freevars)
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        # Globals of the root frame are read through GlobalSource; an inlined function from
        # another module reads them through its own function's __globals__.
        self.globals_source_ok = globals_source_ok
        self.stack: list[VariableTracker] = []
        self.decoded = decode(code)
        self.ip = 0
        self.inst: Any = None
        self.lineno = code.co_firstlineno
        self.kw_names: tuple[str, ...] = ()
        self.return_value: VariableTracker | None = None
        self.fn_source: Source | None = None  # the function being inlined, when it has one
        self.steps = 0
        self.breaks_allowed = False  # the root frame may break its graph (compile_frame sets it)
        # Set for an inlined generator: the values it yields, in order (YIELD_VALUE appends).
        self.yielded: list[VariableTracker] | None = None

    # --- the loop --------------------------------------------------------------------------------
    def run(self) -> VariableTracker:
        instructions = self.decoded.instructions
        unsupported = unsupported_opcodes()
        try:
            while self.return_value is None:
                inst = instructions[self.ip]
                self.ip += 1
                self.inst = inst
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                self.steps += 1
                if self.steps > MAX_STEPS:
                    raise Unsupported(
                        "unsupported_control_flow",
                        "a loop that does not end",
                        f"more than {MAX_STEPS} instructions",
                    )
                fn = HANDLERS.get(inst.opname)
                if fn is None:
                    reason = unsupported.get(inst.opname, "unknown opcode")
                    raise Unsupported("unsupported_opcode", inst.opname, reason)
                if not self.breaks_allowed:
                    self._step(fn, inst)
                    continue
                stack, local_vars, kw_names = list(self.stack), dict(self.locals), self.kw_names
                cells = dict(self.cells)
                contents = {n: c.contents for n, c in cells.items() if isinstance(c, CellVariable)}
                mark, mutations, undo = self.output.checkpoint(), mutation_count(), undo_mark()
                try:
                    self._step(fn, inst)
                except Unsupported as exc:
                    if not can_break(self, inst, exc, mutations):
                        raise
                    self.output.rollback(mark)
                    undo_to(undo)
                    for name, value in contents.items():  # a store into a cell, rewound
                        cells[name].contents = value
                    exc.stack.insert(0, self.location())
                    raise GraphBreak(inst, exc, stack, local_vars, kw_names, cells) from None
        except Unsupported as exc:
            exc.stack.insert(0, self.location())
            raise
        return self.return_value

    def _step(self, fn: Any, inst: Any) -> None:
        if config.debug_stack_check:
            self._checked_step(fn, inst)
        else:
            fn(self, inst)

    def _checked_step(self, fn: Any, inst: Any) -> None:
        before = len(self.stack)
        jumped_ip = self.ip
        fn(self, inst)
        if self.return_value is not None:
            return
        jump = self.ip != jumped_ip
        try:
            expected = dis.stack_effect(inst.opcode, inst.arg, jump=jump)
        except ValueError:
            return
        if len(self.stack) - before != expected:
            raise AssertionError(
                f"{inst.opname} at {self.location()}: stack effect {len(self.stack) - before},"
                f" dis says {expected}"
            )

    # --- stack helpers ---------------------------------------------------------------------------
    def push(self, vt: VariableTracker) -> None:
        self.stack.append(vt)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list[VariableTracker]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump_to(self, offset: int) -> None:
        self.ip = self.decoded.index_of[offset]

    # --- where we are ----------------------------------------------------------------------------
    def location(self) -> Location:
        import linecache

        line = linecache.getline(self.code.co_filename, self.lineno).strip()
        return Location(self.code.co_filename, self.lineno, self.code.co_name, line)

    def location_text(self) -> str:
        return f"{self.code.co_filename}:{self.lineno} in {self.code.co_name}"

    def user_stack(self) -> list[Location]:
        out: list[Location] = []
        tx: Translator | None = self
        while tx is not None:
            out.insert(0, tx.location())
            tx = tx.parent
        return out

    # --- wrapping values -------------------------------------------------------------------------
    def wrap_source(self, source: Source) -> VariableTracker:
        return builder.wrap_source(self, source)

    def wrap_value(self, value: Any, source: Source | None) -> VariableTracker:
        return builder.wrap_value(self, value, source)

    def wrap_constant_result(self, value: Any) -> VariableTracker:
        """The result of folding a pure function on constants."""
        if isinstance(value, (tuple, list)) and not isinstance(value, torch.Size):
            items = [self.wrap_constant_result(v) for v in value]
            if type(value) is list:
                return ListVariable(items)
            if type(value) is tuple:
                return TupleVariable(items)
        if isinstance(value, dict):
            return DictVariable({k: self.wrap_constant_result(v) for k, v in value.items()})
        return self.wrap_value(value, None)

    def has_attr(self, vt: VariableTracker, name: str) -> bool:
        try:
            vt.getattr(self, name)
            return True
        except Unsupported as exc:
            if exc.code == "exception" or exc.code == "unsupported_attr" and not hasattr(vt, "obj"):
                return False
            if hasattr(vt, "obj"):
                return hasattr(vt.obj, name)
            raise

    # --- globals and closures --------------------------------------------------------------------
    def load_global(self, name: str) -> VariableTracker:
        written = self.output.side_effects.globals.get(name)
        if written is not None and self.f_globals is self.output.fn.__globals__:
            return written
        if name in self.f_globals:
            if self.parent is None or self.f_globals is self.output.fn.__globals__:
                return self.wrap_source(GlobalSource(name))
            if _trusted_globals(self.f_globals):
                return self.wrap_value(self.f_globals[name], None)
            if self.fn_source is not None:
                return self.wrap_source(ItemSource(AttrSource(self.fn_source, "__globals__"), name))
            raise Unsupported(
                "unsupported_object",
                f"global {name!r} of another module",
                "reached through a function with no source",
            )
        builtins_dict = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_dict, types.ModuleType):
            builtins_dict = vars(builtins_dict)
        if name in builtins_dict:
            return self.wrap_value(builtins_dict[name], None)
        raise Unsupported("exception", f"name {name!r} is not defined", "NameError")

    def load_deref(self, name: str) -> VariableTracker:
        cell = self.cells.get(name)
        if cell is None:
            raise Unsupported("exception", f"free variable {name!r}", "not found")
        if isinstance(cell, CellVariable):
            if cell.contents is None:
                raise Unsupported(
                    "exception", f"free variable {name!r} referenced before assignment", "NameError"
                )
            return cell.contents
        if cell.written is not None:
            return cell.written
        if cell.source is not None:
            return self.wrap_source(cell.source)
        contents = cell.cell.cell_contents
        if type(contents) in builder.CONSTANT_TYPES:
            return ConstantVariable(contents)
        return self.wrap_value(contents, None)

    def zero_arg_super(self) -> VariableTracker:
        """`super()` in a method: the class from the `__class__` cell, the first argument."""
        from framejit.frontend.variables.objects import SuperVariable

        code = self.code
        if "__class__" not in code.co_freevars or not code.co_argcount:
            raise Unsupported("unsupported_call", "super() outside a method")
        cls = self.load_deref("__class__")
        first = realize(self, self.locals[code.co_varnames[0]])
        if not cls.is_constant():
            raise Unsupported("unsupported_call", "super() with an unknown class")
        return SuperVariable(cls.as_constant(), first)

    def store_global(self, name: str, value: VariableTracker) -> None:
        if self.f_globals is not self.output.fn.__globals__:
            raise Unsupported("side_effect", f"assigning global {name!r} of another module")
        note_mutation()
        self.output.side_effects.globals[name] = value

    def store_deref(self, name: str, value: VariableTracker) -> None:
        cell = self.cells.get(name)
        if isinstance(cell, CellVariable):
            note_mutation()
            cell.contents = value
            return
        if isinstance(cell, _RealCell) and cell.source is not None:
            note_mutation()
            if isinstance(cell.source, FreeVarSource) and self.parent is None:
                self.output.side_effects.cells[cell.source] = (name, value)
            else:  # a cell of an inlined function: reached through that function's closure
                self.output.side_effects.cells[cell.source.base] = (None, value)
            cell.written = value
            return
        raise Unsupported("side_effect", f"assigning nonlocal {name!r}")

    # --- operators -------------------------------------------------------------------------------
    def binary_op(self, op: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return self.output.call_op("call_function", op, [a, b], {})
        if a.is_constant() and b.is_constant():
            try:
                return self.wrap_constant_result(op(a.as_constant(), b.as_constant()))
            except Exception as exc:
                raise Unsupported(
                    "exception", f"{op.__name__} on constants", f"raises {exc!r}"
                ) from None
        if isinstance(a, ListVariable) and op is operator.iadd:
            a.mutate(self, "extend", [b], {})  # `lst += other` extends in place
            return a
        plain = (ListVariable, TupleVariable)
        if (
            isinstance(a, BaseSequence)
            and isinstance(b, BaseSequence)
            and op is operator.add
            and (a.python_type() is b.python_type() or isinstance(a, TupleVariable))
        ):
            return (
                type(a)(a.items + b.items) if type(a) in plain else TupleVariable(a.items + b.items)
            )
        if isinstance(a, BaseSequence) and b.is_constant() and op in (operator.mul, operator.imul):
            items = a.items * b.as_constant()
            return type(a)(items) if type(a) in plain else TupleVariable(items)
        result = self._user_operator(op, a, b)
        if result is not None:
            return result
        raise Unsupported("unsupported_object", f"{a.type_name()} {_symbol(op)} {b.type_name()}")

    def _user_operator(
        self, op: Any, a: VariableTracker, b: VariableTracker
    ) -> VariableTracker | None:
        """`a + b` where a class of a or b defines `__add__` / `__radd__` (and so on) in Python:
        inline that method, as Python would call it."""
        names = _DUNDERS.get(op)
        if names is None:
            return None
        forward, reflected, inplace = names
        for obj, other, name in ((a, b, inplace), (a, b, forward), (b, a, reflected)):
            if name is None or not isinstance(obj, (UserObjectVariable, NewObjectVariable)):
                continue
            method = _python_method(obj.python_type(), name)
            if method is not None:
                result = UserFunctionVariable(method).call(self, [obj, other], {})
                if not (result.is_constant() and result.as_constant() is NotImplemented):
                    return result
        return None

    def compare_op(self, op: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return self.output.call_op("call_function", op, [a, b], {})
        if a.is_constant() and b.is_constant():
            return self.wrap_constant_result(op(a.as_constant(), b.as_constant()))
        if op in (operator.eq, operator.ne) and _is_object(a) and _is_object(b):
            same = a is b or (
                getattr(a, "obj", None) is not None
                and getattr(a, "obj", None) is getattr(b, "obj", None)
            )
            return ConstantVariable(same if op is operator.eq else not same)
        raise Unsupported("unsupported_object", f"{a.type_name()} {_symbol(op)} {b.type_name()}")

    def unary_op(self, op: Any, a: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable):
            return self.output.call_op("call_function", op, [a], {})
        if a.is_constant():
            return self.wrap_constant_result(op(a.as_constant()))
        raise Unsupported("unsupported_object", f"{_symbol(op)}{a.type_name()}")

    def is_op(self, a: VariableTracker, b: VariableTracker) -> bool:
        if a is b:
            return True
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            self.output.identity_sensitive = True
            return a.node is b.node
        if a.is_constant() and b.is_constant():
            return a.as_constant() is b.as_constant()
        if (
            a.is_constant()
            and a.as_constant() is None
            or b.is_constant()
            and b.as_constant() is None
        ):
            return False  # a non-constant value is never None
        if hasattr(a, "obj") and hasattr(b, "obj"):
            return a.obj is b.obj
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return False
        raise Unsupported("unsupported_object", f"{a.type_name()} is {b.type_name()}")

    def getitem(self, obj: VariableTracker, index: VariableTracker) -> VariableTracker:
        if isinstance(obj, TensorVariable):
            return self.output.call_op("call_function", operator.getitem, [obj, index], {})
        if isinstance(obj, (BaseSequence, DictVariable)):
            return obj.getitem(self, index)
        if obj.is_constant() and index.is_constant():
            try:
                return self.wrap_constant_result(obj.as_constant()[index.as_constant()])
            except Exception as exc:
                raise Unsupported("exception", "indexing a constant", f"raises {exc!r}") from None
        return obj.call_method(self, "__getitem__", [index], {})

    def setitem(self, obj: VariableTracker, index: VariableTracker, value: VariableTracker) -> None:
        if isinstance(obj, TensorVariable):
            self.output.call_op("call_function", operator.setitem, [obj, index, value], {})
            return
        obj.call_method(self, "__setitem__", [index, value], {})

    # --- calls -----------------------------------------------------------------------------------
    def call_function_value(
        self, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.wrap_value(fn, None).call(self, args, kwargs)

    def call_module(
        self,
        module: NNModuleVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        """`module(*args)`: forward pre-hooks, forward (or the RNN op), forward hooks, inlined
        the way nn.Module.__call__ runs them. Backward hooks, keyword hooks and global hooks
        are not captured (the call then runs for real, at a graph break)."""
        mod = module.obj
        from torch.nn.modules import module as nn_module

        if (
            mod._backward_hooks
            or mod._backward_pre_hooks
            or mod._forward_hooks_with_kwargs
            or mod._forward_pre_hooks_with_kwargs
            or mod._forward_hooks_always_called
        ):
            raise Unsupported("module_hooks", f"calling {type(mod).__name__} with these hooks")
        if (
            nn_module._global_forward_hooks
            or nn_module._global_forward_pre_hooks
            or nn_module._global_backward_hooks
            or nn_module._global_backward_pre_hooks
        ):
            raise Unsupported("module_hooks", "global nn.Module hooks are registered")
        self.output.calls_modules = True
        if not (mod._forward_hooks or mod._forward_pre_hooks):
            if module.source is not None:  # the common case: one cheap guard, no hooks at all
                self.output.add_guard(
                    module.source, GuardKind.MODULE_NO_HOOKS, None, self.location_text()
                )
            return self._module_forward(module, args, kwargs)
        for attr in ("_backward_hooks", "_backward_pre_hooks"):  # pinned empty
            self._module_hooks(module, attr)
        pre_hooks = self._module_hooks(module, "_forward_pre_hooks")
        post_hooks = self._module_hooks(module, "_forward_hooks")
        for hook in pre_hooks:
            result = hook.call(self, [module, TupleVariable(list(args))], {})
            if not (result.is_constant() and result.as_constant() is None):
                args = result.unpack(self) if isinstance(result, TupleVariable) else [result]
        out = self._module_forward(module, args, kwargs)
        for hook in post_hooks:
            result = hook.call(self, [module, TupleVariable(list(args)), out], {})
            if not (result.is_constant() and result.as_constant() is None):
                out = result
        return out

    def _module_hooks(self, module: NNModuleVariable, attr: str) -> list[VariableTracker]:
        """The hooks in `module.<attr>`, guarded: same keys (handles), same functions."""
        hooks = getattr(module.obj, attr)
        if module.source is None:
            if hooks:
                raise Unsupported("module_hooks", "hooks on a module with no source")
            return []
        return list(self.wrap_source(AttrSource(module.source, attr)).items.values())

    def _module_forward(
        self,
        module: NNModuleVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        mod = module.obj
        if isinstance(mod, RNN_TYPES):
            return call_rnn(self, module, args, kwargs)
        if "forward" in mod.__dict__:
            forward = module.getattr(self, "forward")
            return forward.call(self, args, kwargs)
        return module.getattr(self, "forward").call(self, args, kwargs)

    def inline_user_function(
        self,
        fn_vt: UserFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fn = fn_vt.fn
        code = fn.__code__
        src = fn_vt.source
        if getattr(fn, "_framejit_disabled", False):
            raise Unsupported("unsupported_call", f"{fn.__qualname__}", "framejit.disable")

        def default(i: int) -> VariableTracker:
            if src is not None:
                return self.wrap_source(default_source(src, i))
            return self.wrap_value(fn.__defaults__[i], None)

        def kwdefault(name: str) -> VariableTracker:
            if src is not None:
                return self.wrap_source(kwdefault_source(src, name))
            return self.wrap_value(fn.__kwdefaults__[name], None)

        freevars: dict[str, CellVariable | _RealCell] = {}
        for i, name in enumerate(code.co_freevars):
            cell_src = closure_cell_source(src, i) if src is not None else None
            freevars[name] = _RealCell(cell_src, fn.__closure__[i])
        bound = self._bind(
            code,
            fn.__qualname__,
            len(fn.__defaults__ or ()),
            tuple(fn.__kwdefaults__ or ()),
            default,
            kwdefault,
            args,
            kwargs,
        )
        return self._inline(code, fn.__globals__, bound, freevars, src)

    def inline_nested_function(
        self,
        fn_vt: NestedFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        code = fn_vt.code
        freevars: dict[str, CellVariable | _RealCell] = dict(zip(code.co_freevars, fn_vt.closure))
        bound = self._bind(
            code,
            fn_vt.qualname,
            len(fn_vt.defaults),
            tuple(fn_vt.kwdefaults),
            lambda i: fn_vt.defaults[i],
            lambda n: fn_vt.kwdefaults[n],
            args,
            kwargs,
        )
        return self._inline(code, fn_vt.f_globals, bound, freevars, None)

    def _bind(
        self,
        code: types.CodeType,
        qualname: str,
        ndefaults: int,
        kwdefault_names: tuple[str, ...],
        default: Any,
        kwdefault: Any,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> dict[str, VariableTracker]:
        key = (code, ndefaults, kwdefault_names)
        cached = _signatures.get(code)
        sig = cached[1] if cached is not None and cached[0] == key else None
        if sig is None:
            dummy = types.FunctionType(
                code,
                {},
                code.co_name,
                tuple(_Default(i) for i in range(ndefaults)),
                tuple(types.CellType() for _ in code.co_freevars),
            )
            dummy.__kwdefaults__ = {n: _KwDefault(n) for n in kwdefault_names} or None
            sig = inspect.signature(dummy)
            _signatures[code] = (key, sig)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise Unsupported("exception", f"calling {qualname}", f"TypeError: {exc}") from None
        bound.apply_defaults()
        out: dict[str, VariableTracker] = {}
        # inspect renames comprehension arguments (".0" -> "implicit0"): map back by position
        real_names = dict(zip(sig.parameters, code.co_varnames))
        for name, value in bound.arguments.items():
            kind = sig.parameters[name].kind
            if isinstance(value, _Default):
                value = default(value.index)
            elif isinstance(value, _KwDefault):
                value = kwdefault(value.name)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                value = TupleVariable(list(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                value = DictVariable(dict(value))
            out[real_names[name]] = value
        return out

    def _inline(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        bound: dict[str, VariableTracker],
        freevars: dict[str, Any],
        fn_source: Source | None,
    ) -> VariableTracker:
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            raise Unsupported("generator", f"calling async function {code.co_name}")
        generator = bool(code.co_flags & inspect.CO_GENERATOR)
        if self.depth + 1 > config.inline_depth_limit:
            raise Unsupported(
                "recursion_limit", f"calling {code.co_name}", f"depth {config.inline_depth_limit}"
            )
        child = Translator(code, f_globals, self.output, bound, freevars, parent=self)
        child.fn_source = fn_source
        if generator:  # run to exhaustion now; the caller iterates over what it yielded
            child.yielded = []
        child.steps = self.steps
        result = child.run()
        self.steps = child.steps
        if generator:
            return IteratorVariable(child.yielded)
        return result


class _Default:
    def __init__(self, index: int) -> None:
        self.index = index


class _KwDefault:
    def __init__(self, name: str) -> None:
        self.name = name


_DUNDERS: dict[Any, tuple[str, str, str | None]] = {}
for _op, _name in (
    ("add", "add"),
    ("sub", "sub"),
    ("mul", "mul"),
    ("truediv", "truediv"),
    ("floordiv", "floordiv"),
    ("mod", "mod"),
    ("pow", "pow"),
    ("matmul", "matmul"),
    ("and_", "and"),
    ("or_", "or"),
    ("xor", "xor"),
):
    _DUNDERS[getattr(operator, _op)] = (f"__{_name}__", f"__r{_name}__", None)
    _DUNDERS[getattr(operator, "i" + _op.rstrip("_"))] = (
        f"__{_name}__",
        f"__r{_name}__",
        f"__i{_name}__",
    )


def _python_method(cls: type, name: str) -> types.FunctionType | None:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            return attr if isinstance(attr, types.FunctionType) else None
    return None


def _trusted_globals(f_globals: dict[str, Any]) -> bool:
    """Globals of library modules (torch, the standard library) are read without guards."""
    from framejit.frontend.variables.objects import TRUSTED_MODULE_ROOTS

    name = str(f_globals.get("__name__", ""))
    return name.split(".")[0] in TRUSTED_MODULE_ROOTS


def _symbol(op: Any) -> str:
    for sym, fn in BINARY_OPS.items():
        if fn is op:
            return sym
    return getattr(op, "__name__", "?")


def _is_object(vt: VariableTracker) -> bool:
    return hasattr(vt, "obj")


def root_translator(
    code: types.CodeType, fn: Any, output: OutputGraph, argnames: tuple[str, ...]
) -> Translator:
    """The translator for the frame being compiled: arguments and free variables from Sources."""
    tx = Translator(code, fn.__globals__, output, {}, {})
    for name in argnames:
        is_cell = name in code.co_cellvars
        from framejit.frontend.sources import LocalSource

        tx.locals[name] = _LazyArg(LocalSource(name, is_cell))  # type: ignore[assignment]
    for i, name in enumerate(code.co_freevars):
        tx.cells[name] = _RealCell(FreeVarSource(name, i), fn.__closure__[i])
    return tx


class _LazyArg(VariableTracker):
    """An argument not yet looked at: wrapped (and guarded) on first use."""

    def __init__(self, source: Source) -> None:
        self.source = source


def realize(tx: Translator, vt: VariableTracker) -> VariableTracker:
    if isinstance(vt, _LazyArg):
        return tx.wrap_source(vt.source)
    return vt

