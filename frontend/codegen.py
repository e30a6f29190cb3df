"""Codegen: the transformed code object that runs a compiled graph and rebuilds the result.

The new code has the original's signature, cells and free variables, so it can run in the
original's place (as a function made with the same globals, defaults and closure, or - with the
frame hook - in the original frame). Its body:

    graph inputs loaded from their Sources -> CALL compiled graph -> STORE ___graph_out
    the return value rebuilt from graph outputs, constants and Sources -> RETURN_VALUE

Inputs returned unchanged are loaded from their Source, so they keep their identity. Every
object the body needs (the compiled graph, classes to rebuild) is a constant of the code.

When the compiled graph raises at run time (an error only real values show: an index out of
range, a failing kernel), the graph call - the first thing the body does, before any Python
write is replayed - sits in a `try` range (zero cost until something is raised) whose handler
puts the global state back as it was at entry (a graph may raise inside its own `no_grad` or
autocast region) and, when the graph writes to none of its inputs (`GraphError.rerun`), runs the
frame's own code again, uncompiled, with the frame's arguments and returns what it returns
(`EagerRerun`): the `except`/`finally` of the user's function, and the exception and traceback
the user sees, are then eager's. A graph that writes to an input may have half-written it, so
its exception propagates as it is. Exceptions that are not `Exception`s (KeyboardInterrupt)
always propagate.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from bytecode import Bytecode, CellVar, FreeVar, Instr, Label, TryBegin, TryEnd
from bytecode.instr import InstrLocation
from framejit.frontend import versions
from framejit.frontend.breaks import left_as_range, resumes
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import Source
from framejit.frontend.variables.base import VariableTracker
from framejit.frontend.variables.classdef import UnbuiltClassVariable
from framejit.frontend.variables.containers import (
    DataclassVariable,
    DictVariable,
    IteratorVariable,
    ListVariable,
)
from framejit.frontend.variables.functions import (
    NestedFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from framejit.frontend.variables.objects import (
    FreshModuleVariable,
    NewObjectVariable,
    NNModuleVariable,
)
from framejit.frontend.variables.symbolic import SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable
from framejit.guards import GlobalState

from framejit import logs

log = logs.get_logger("frontend")

# Mutable objects made in the frame: rebuilt once per transformed code, then reloaded.
_BUILT_ONCE = (
    ListVariable,
    DictVariable,
    DataclassVariable,
    NewObjectVariable,
    FreshModuleVariable,
    IteratorVariable,
    NestedFunctionVariable,
    UnbuiltClassVariable,
)

GRAPH_OUT = "___graph_out"


def same_cells(a: tuple | None, b: tuple | None) -> bool:
    """The same cell objects (cells compare by their contents under `==`)."""
    a, b = a or (), b or ()
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class ResumeCall:
    """What a resume function's transformed code returns instead of calling the next resume
    function: the call, for `run_resumes` to make. A loop whose body breaks then resumes
    iteration after iteration without nesting one Python call per iteration. Its arguments are
    in a list that the call empties (`call_taking`)."""

    __slots__ = ("fn", "box")

    def __init__(self, fn: Any, box: list[Any]) -> None:
        self.fn = fn
        self.box = box


# stack kind (breaks.resume_code) -> what builds the argument from the iterator left
_LEFT_OF = {"iter": tuple, "range": left_as_range}


def run_resumes(fn: Any, box: list[Any]) -> Any:
    """Call a resume function as the user's frame's tail call, then each resume function the
    resumed code hands back (`ResumeCall`), until one returns the frame's result."""
    result = call_taking(fn, box)
    while type(result) is ResumeCall:
        result = call_taking(result.fn, result.box)
    return result


def call_taking(fn: Any, box: list[Any]) -> Any:
    """`fn(*box)`, with `box` emptied before `fn`'s frame starts, so that frame's locals are
    the only owners of the arguments, as a Python callee's are: a value the resumed code lets go
    of (a generator dropped by a `break` out of its loop) dies there, as in eager, not when the
    call returns. (`fn(*args)` would keep them in `args` and in the call's own tuple.) A jit of
    a resume function (`call_taking` of its own) checks its guards on the list first."""
    take = getattr(type(fn), "call_taking", None)
    if take is not None:
        return take(fn, box)
    return _caller_taking(len(box))(fn, box)


@functools.cache
def _caller_taking(n: int) -> Callable[[Any, list[Any]], Any]:
    """`call(fn, box)`: `fn` called with the `n` items of `box`, which are moved onto the
    stack (the list left empty) before the call; a call instruction hands a Python function
    its stack arguments without keeping them (no frame hook installed)."""
    args = ", ".join(["box.pop()"] * n)
    scope: dict[str, Any] = {"__name__": __name__}
    source = f"def call(fn, box):\n    box.reverse()\n    return fn({args})\n"
    # of this module and file: tracebacks and warnings skip it with framejit's other frames
    exec(compile(source, __file__, "exec"), scope)
    return scope["call"]


def with_closure(target: Any, closure: tuple) -> Any:
    """`target` (a resume function, or framejit's jit of one) run with `closure`'s cells."""
    jitted = getattr(target, "with_closure", None)
    if jitted is not None:
        return jitted(closure)
    if same_cells(closure, target.__closure__):
        return target
    fn = rebind(target, target, closure)
    fn.__dict__.update(target.__dict__)  # `_framejit_disabled`
    return fn


def rebind(code_of: Any, like: Any, closure: tuple | None) -> types.FunctionType:
    """A function with `code_of`'s code and globals, and `like`'s defaults and names, over the
    cells of `closure`."""
    fn = types.FunctionType(
        code_of.__code__, code_of.__globals__, code_of.__name__, like.__defaults__, closure
    )
    fn.__kwdefaults__ = like.__kwdefaults__
    fn.__qualname__ = like.__qualname__
    return fn


class CodeGen:
    def __init__(self, code: types.CodeType, lineno: int | None = None) -> None:
        self.code = code
        self.instructions: list[Instr] = []
        self.output_index: dict[Any, int] = {}  # fx node -> index in the graph's output tuple
        # fx node -> (function, [(source, dim)]): a symbolic int computed by Python from the
        # inputs it depends on (OutputGraph.sizes_in_python), where no graph is made
        self.python_values: dict[Any, tuple[Any, list[Any]]] = {}
        self.lineno = lineno or code.co_firstlineno
        # Set while emitting code that stands for one user line (a replayed warnings.warn call
        # reports that line, as in eager).
        self.line_override: int | None = None
        # Set while emitting code that stands for one user instruction (the one that runs for
        # real at a break, the call of the resume function): its line and columns, so that
        # tracebacks show the user's line with its `^^^` marks.
        self.positions_override: Any = None
        self._built: dict[int, str] = {}  # id(VT of an object made in the frame) -> its local
        self._obj_count = 0  # locals ___obj<n> handed out (_new_obj_name)
        # fx node of a symbolic int the code computes (python_values) -> the local holding it
        self._python_value_locals: dict[Any, str] = {}
        self._keep: list[VariableTracker] = []  # keeps those VTs alive while ids are in use
        # id(CellVariable) -> name, for the cells of the frame being compiled: a closure rebuilt
        # after the graph shares the frame's real cell (its contents stored there first).
        self.frame_cells: dict[int, str] = {}
        self._cells_stored: set[str] = set()
        self._tail: list[Any] = []  # code placed after the body (the graph call's handler)

    def _emit(self, *instrs: Instr) -> None:
        if self.positions_override is not None:
            p = self.positions_override
            for inst in instrs:
                inst.location = InstrLocation(
                    p.lineno, p.end_lineno, p.col_offset, p.end_col_offset
                )
        elif self.line_override is not None:
            for inst in instrs:
                inst.lineno = self.line_override
        self.instructions.extend(instrs)

    @contextlib.contextmanager
    def at_positions(self, positions: Any) -> Iterator[None]:
        """Emit at a user instruction's positions (`dis.Positions`; None: as before)."""
        saved = self.positions_override
        if positions is not None and positions.lineno is not None:
            self.positions_override = positions
        try:
            yield
        finally:
            self.positions_override = saved

    def emit(self, instr: Instr) -> None:
        self._emit(instr)

    def emit_call(self, nargs: int, kw_names: tuple[str, ...] = ()) -> None:
        self._emit(*versions.emit_call(nargs, kw_names))

    # --- primitives ------------------------------------------------------------------------------
    def load_local(self, name: str, is_cell: bool = False) -> None:
        self._emit(Instr("LOAD_DEREF", CellVar(name)) if is_cell else Instr("LOAD_FAST", name))

    def load_deref(self, name: str) -> None:
        self._emit(Instr("LOAD_DEREF", FreeVar(name)))

    def load_global(self, name: str) -> None:
        self._emit(versions.emit_load_global(name))

    def load_attr(self, name: str) -> None:
        self._emit(versions.emit_load_attr(name))

    def load_const(self, value: Any) -> None:
        self._emit(Instr("LOAD_CONST", value))

    def subscr(self) -> None:
        self._emit(Instr("BINARY_SUBSCR"))

    def push_null(self) -> None:
        self._emit(Instr("PUSH_NULL"))

    def call_const(self, fn: Any, emit_args: Callable[[], Any], nargs: int) -> None:
        """Call the constant `fn` with `nargs` arguments pushed by `emit_args`."""
        self.push_null()
        self.load_const(fn)
        emit_args()
        self._emit(*versions.emit_call(nargs))

    def call_on_top_with_arg(self) -> None:
        """[callable, arg] on the stack -> call it, discard the result."""
        self._emit(
            Instr("PUSH_NULL"),
            Instr("SWAP", 3),
            Instr("SWAP", 2),
            *versions.emit_call(1),
            Instr("POP_TOP"),
        )

    def call_on_top(self, fn: Any) -> None:
        """Replace the value on top of the stack by fn(value)."""
        self._emit(
            Instr("PUSH_NULL"),
            Instr("SWAP", 2),
            Instr("LOAD_CONST", fn),
            Instr("SWAP", 2),
            *versions.emit_call(1),
        )

    def call_method_on_top(self, name: str) -> None:
        """Replace the object on top of the stack by obj.name()."""
        self._emit(versions.emit_load_method(name), *versions.emit_call(0))

    def load_sources(self, sources: Sequence[Source]) -> None:
        """Load each source in order; a prefix shared by several is computed once into a local."""
        uses: dict[Source, int] = {}
        for src in sources:
            for prefix in src.chain()[:-1]:
                uses[prefix] = uses.get(prefix, 0) + 1
        temps: dict[Source, str] = {}

        def load(src: Source) -> None:
            if src in temps:
                self._emit(Instr("LOAD_FAST", temps[src]))
                return
            base = getattr(src, "base", None)
            if base is None:
                src.emit_load(self)
            else:
                load(base)
                src.emit_step(self)  # type: ignore[attr-defined]
            if uses.get(src, 0) > 1:
                temps[src] = f"___src{len(temps)}"
                self._emit(Instr("COPY", 1), Instr("STORE_FAST", temps[src]))

        for src in sources:
            load(src)

    def build(self, kind: type, n: int) -> None:
        op = {tuple: "BUILD_TUPLE", list: "BUILD_LIST", dict: "BUILD_MAP"}[kind]
        self._emit(Instr(op, n))

    def reconstruct(
        self, vt: VariableTracker, wrap_function: Callable[[Any], Any] | None = None
    ) -> None:
        """Push the value `vt` stands for. An object made in the frame is built once and then
        reloaded, so two references to it stay one object. `wrap_function` replaces a plain
        user function by what it returns (a graph break's callee, compiled on its own)."""
        if isinstance(vt, (TensorVariable, SymNodeVariable)) and vt.node in self.output_index:
            self._emit(Instr("LOAD_FAST", GRAPH_OUT))
            self.load_const(self.output_index[vt.node])
            self.subscr()
            return
        if isinstance(vt, SymNodeVariable) and vt.node in self.python_values:
            self._emit(Instr("LOAD_FAST", self.python_value(vt.node)))
            return
        if wrap_function is not None:
            fn = getattr(vt, "fn", None)
            if isinstance(vt, UserFunctionVariable):
                if vt.source is not None and fn.__closure__:
                    # the same code may come with other cells next time (a nested function
                    # made again): run the compiled callee with the live function's cells
                    wrapped, source = wrap_function(fn), vt.source

                    def closure() -> None:
                        self.load_const(wrapped)
                        source.emit_load(self)
                        self.load_attr("__closure__")

                    self.call_const(with_closure, closure, 2)
                    return
                self.load_const(wrap_function(fn))
                return
            if isinstance(vt, NNModuleVariable):
                if vt.shared:  # any instance of its class: the one this call holds, wrapped
                    self.call_const(wrap_function, lambda: self.reconstruct(vt), 1)
                    return
                self.load_const(wrap_function(vt.obj))
                return
            if isinstance(vt, UserMethodVariable) and isinstance(vt.fn, UserFunctionVariable):
                self.call_const(
                    types.MethodType,
                    lambda: (self.load_const(wrap_function(vt.fn.fn)), self.reconstruct(vt.obj)),
                    2,
                )
                return
        memo = self._built.get(id(vt))
        if memo is not None:
            self._emit(Instr("LOAD_FAST", memo))
            return
        vt.reconstruct(self)
        if vt.source is None and isinstance(vt, _BUILT_ONCE) and id(vt) not in self._built:
            # (an object whose state refers back to itself was remembered while being built)
            name = self._new_obj_name()
            self._built[id(vt)] = name
            self._keep.append(vt)
            self._emit(Instr("COPY", 1), Instr("STORE_FAST", name))

    def python_value(self, node: Any) -> str:
        """The local holding the symbolic int `node` the code computes from its inputs'
        sizes and values (`python_values`), computed the first time it is asked for: a caller
        asks before the writes that could change those inputs are replayed."""
        computed = self._python_value_locals.get(node)
        if computed is not None:
            return computed
        fn, inputs = self.python_values[node]

        def load_inputs() -> None:
            for source, dim in inputs:
                if dim is None:
                    source.emit_load(self)
                else:
                    self.call_const(operator.methodcaller("size", dim), source_loader(source), 1)

        def source_loader(source: Any) -> Callable[[], None]:
            return lambda: source.emit_load(self)

        self.call_const(fn, load_inputs, len(inputs))
        name = self._python_value_locals[node] = self._new_obj_name()
        self._emit(Instr("STORE_FAST", name))
        return name

    def _new_obj_name(self) -> str:
        """A local never used before in this code: `_built` loses entries after a branch and
        can hold one object under two names, so its size is no counter."""
        self._obj_count += 1
        return f"___obj{self._obj_count}"

    def remember(self, vt: VariableTracker) -> str:
        """Store the object on top of the stack (popped) as the one `vt` stands for: a later
        reconstruct of `vt`, even while its own state is being built, loads it."""
        name = self._new_obj_name()
        self._built[id(vt)] = name
        self._keep.append(vt)
        self._emit(Instr("STORE_FAST", name))
        return name

    def load_fast(self, name: str) -> None:
        self._emit(Instr("LOAD_FAST", name))

    @contextlib.contextmanager
    def branch(self) -> Iterator[None]:
        """Code for one of several alternative paths (the two arms of a jump at a break): an
        object it builds is stored for reuse on that path only, never loaded on another."""
        built, computed = dict(self._built), dict(self._python_value_locals)
        try:
            yield
        finally:
            self._built, self._python_value_locals = built, computed

    # --- cells ---------------------------------------------------------------------------------
    def store_frame_cell(self, name: str, contents: VariableTracker | None) -> None:
        """Put the traced contents of the frame's cell `name` into its real cell (once)."""
        if name in self._cells_stored:
            return
        self._cells_stored.add(name)
        if contents is not None:
            self.reconstruct(contents)
            self._emit(Instr("STORE_DEREF", CellVar(name)))

    def load_cell(self, cell: Any) -> None:
        """Push the real cell object a closure being rebuilt refers to."""
        from framejit.frontend.inlining import _RealCell
        from framejit.frontend.sources import AttrSource, FreeVarSource
        from framejit.frontend.variables.base import CellVariable

        if isinstance(cell, CellVariable):
            name = self.frame_cells.get(id(cell))
            if name is not None:  # a cell of this frame
                self.store_frame_cell(name, cell.contents)
                self._emit(Instr("LOAD_CLOSURE", CellVar(name)))
                return
            # A cell of an inlined call that has returned: only closures still reach it, so one
            # new real cell holding its contents stands for it.
            memo = self._built.get(id(cell))
            if memo is not None:
                self._emit(Instr("LOAD_FAST", memo))
                return
            if cell.contents is None:
                self.call_const(types.CellType, lambda: None, 0)
            else:
                self.call_const(types.CellType, lambda: self.reconstruct(cell.contents), 1)
            name = self._new_obj_name()
            self._built[id(cell)] = name
            self._keep.append(cell)
            self._emit(Instr("COPY", 1), Instr("STORE_FAST", name))
            return
        if isinstance(cell, _RealCell):
            src = cell.source
            if isinstance(src, FreeVarSource):
                self._emit(Instr("LOAD_CLOSURE", FreeVar(src.name)))
                return
            if isinstance(src, AttrSource) and src.attr == "cell_contents":
                self.load_sources([src.base])  # the cell itself
                return
            if src is None:
                self.load_const(cell.cell)
                return
        raise Unsupported("reconstruct", "a closure cell", type(cell).__name__)

    # --- graph breaks --------------------------------------------------------------------------
    def run_original(self, inst: Any, kw_names: tuple[str, ...]) -> None:
        """Execute the instruction the translator could not capture, unchanged."""
        with self.at_positions(getattr(inst, "positions", None)):
            if inst.opname == "CALL":
                self._emit(*versions.emit_call(inst.arg, kw_names))
            else:
                from framejit.frontend.breaks import original_instr

                self._emit(original_instr(self.code, inst.offset))

    def pop_jump_if(self, truth: bool) -> Label:
        label = Label()
        self._emit(versions.emit_pop_jump_if(truth, label))
        return label

    def place(self, label: Label) -> None:
        self.instructions.append(label)

    def append_items(self, items: Sequence[Any]) -> None:
        """Append `bytecode` items as they are (labels, TryBegin/TryEnd, copied instructions)."""
        self.instructions.extend(items)

    def wrap_with_exit(self) -> None:
        """[exit, entered] after a BEFORE_WITH that ran for real -> [ContextExit(exit), entered]."""
        from framejit.frontend.variables.contexts import ContextExit

        self._emit(Instr("SWAP", 2))
        self.call_on_top(ContextExit)
        self._emit(Instr("SWAP", 2))

    def call_resume(
        self, target: Any, kinds: tuple[str, ...], local_values: Sequence[VariableTracker | str]
    ) -> None:
        """Save the stack (len(kinds) items, see breaks.resume_code) into temporaries, call
        `target` with them, the live locals (a VT, or the name of a local already stored in its
        own slot) and the frame's cells (the cell objects), and return its result."""
        for i in reversed(range(len(kinds))):
            self._emit(Instr("STORE_FAST", f"___save{i}"))
        self.push_null()
        # A resume function's own code hands the call back to the `run_resumes` that called
        # it; the user's frame makes the calls through one
        self.load_const(ResumeCall if resumes(self.code) else run_resumes)
        if self.code.co_freevars:
            # this frame's own cells, not those of the function it was compiled for: a nested
            # function is made again, with new cells, at each call of its parent
            def closure() -> None:
                self.load_const(target)
                for name in self.code.co_freevars:
                    self._emit(Instr("LOAD_CLOSURE", FreeVar(name)))
                self.build(tuple, len(self.code.co_freevars))

            self.call_const(with_closure, closure, 2)
        else:
            self.load_const(target)
        for i, kind in enumerate(kinds):
            if kind in _LEFT_OF:  # what the iterator has left, as a tuple or a range
                load = Instr("LOAD_FAST", f"___save{i}")
                self.call_const(_LEFT_OF[kind], lambda load=load: self._emit(load), 1)
            elif kind == "value":
                self._emit(Instr("LOAD_FAST", f"___save{i}"))
        for vt in local_values:
            if isinstance(vt, str):
                self._emit(Instr("LOAD_FAST", vt))
            else:
                self.reconstruct(vt)
        for name in self.code.co_cellvars:
            self._emit(Instr("LOAD_CLOSURE", CellVar(name)))
        self._clear_locals()
        nargs = len(kinds) - kinds.count("null") + len(local_values) + len(self.code.co_cellvars)
        self.build(list, nargs)  # emptied by the call (`call_taking`)
        self._emit(*versions.emit_call(2))
        self._emit(Instr("RETURN_VALUE"))

    def _clear_locals(self) -> None:
        """Drop this frame's hold on every value before the tail call: the resume function
        got what it needs as arguments, and a value it lets go of (a tensor the user reassigns,
        a graph output it no longer uses) must die as it would in eager, not stay alive in this
        frame's arguments or temporaries (the graph's output tuple) until the frame returns."""
        code = self.code
        names = dict.fromkeys(argnames_of(code))
        for inst in self.instructions:
            if isinstance(inst, Instr) and inst.name == "STORE_FAST":
                names[inst.arg] = None
        cells = set(code.co_cellvars) | set(code.co_freevars)
        for name in names:
            if name not in cells:
                self._emit(Instr("LOAD_CONST", None), Instr("STORE_FAST", name))

    # --- the whole body --------------------------------------------------------------------------
    def call_graph(
        self, compiled: Any, inputs: Sequence[Source], on_error: GraphError | None = None
    ) -> None:
        """Call the compiled graph with its inputs; `on_error`: what an exception it raises gets
        (see the module docstring). Must be emitted on an empty stack, before anything else that
        changes state (the handler's exception-table depth is 0)."""
        if on_error is None:
            self.call_const(compiled, lambda: self.load_sources(inputs), len(inputs))
            self._emit(Instr("STORE_FAST", GRAPH_OUT))
            return
        try_begin = TryBegin(Label(), False, 0)
        self.instructions.append(try_begin)
        self.call_const(compiled, lambda: self.load_sources(inputs), len(inputs))
        self._emit(Instr("STORE_FAST", GRAPH_OUT))
        self.instructions.append(TryEnd(try_begin))
        self._tail.extend(self._graph_error_handler(try_begin.target, on_error))

    def _graph_error_handler(self, label: Label, on_error: GraphError) -> list[Any]:
        """[exc] -> restore the global state; rerun eagerly (an Exception, when allowed) and
        return its result, or re-raise the exception as it is."""
        reraise = Label()
        items: list[Any] = [
            label,
            Instr("PUSH_NULL"),
            Instr("LOAD_CONST", restore_global_state),
            Instr("LOAD_CONST", on_error.state),
            *versions.emit_call(1),
            Instr("POP_TOP"),
        ]
        if on_error.rerun is not None:
            code = self.code
            from framejit.frontend.breaks import passed_cells

            passed = passed_cells(code)
            args: list[Instr] = []
            for name in argnames_of(code):
                if name in passed:  # a resume function's cell, passed as the cell object
                    args.append(Instr("LOAD_CLOSURE", CellVar(name)))
                elif name in code.co_cellvars:
                    args.append(Instr("LOAD_DEREF", CellVar(name)))
                else:
                    args.append(Instr("LOAD_FAST", name))
            if code.co_freevars:
                closure = [Instr("LOAD_CLOSURE", FreeVar(n)) for n in code.co_freevars]
                closure.append(Instr("BUILD_TUPLE", len(code.co_freevars)))
            else:
                closure = [Instr("LOAD_CONST", None)]
            items += [
                Instr("LOAD_CONST", Exception),
                Instr("CHECK_EXC_MATCH"),
                versions.emit_pop_jump_if(False, reraise),
                Instr("PUSH_NULL"),  # [exc] -> [NULL, rerun, exc]
                Instr("SWAP", 2),
                Instr("LOAD_CONST", on_error.rerun),
                Instr("SWAP", 2),
                *args,
                Instr("BUILD_TUPLE", len(args)),
                *closure,
                *versions.emit_call(3),
                Instr("RETURN_VALUE"),
            ]
        items += [reraise, Instr("RERAISE", 0)]
        return items

    def return_value(self, vt: VariableTracker) -> None:
        self.reconstruct(vt)
        self._emit(Instr("RETURN_VALUE"))

    def finish(self) -> types.CodeType:
        """A code object with the original's signature around the emitted body."""
        code = self.code
        bc = Bytecode()
        bc.name = code.co_name
        bc.qualname = code.co_qualname
        bc.filename = code.co_filename
        bc.first_lineno = code.co_firstlineno
        bc.argcount = code.co_argcount
        bc.posonlyargcount = code.co_posonlyargcount
        bc.kwonlyargcount = code.co_kwonlyargcount
        nargs = _total_args(code)
        bc.argnames = list(code.co_varnames[:nargs])
        bc.cellvars = list(code.co_cellvars)
        bc.freevars = list(code.co_freevars)
        bc.flags = code.co_flags
        from framejit.frontend.breaks import passed_cells

        passed = passed_cells(code)  # a resume function's cells arrive made
        prologue: list[Instr] = [
            Instr("MAKE_CELL", CellVar(n)) for n in code.co_cellvars if n not in passed
        ]
        if code.co_freevars:
            prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
        prologue.append(Instr("RESUME", 0))
        for inst in [*self.instructions, *self._tail]:
            # Generated instructions point at the line that made them; an instruction copied from
            # the user's code (a graph break's) keeps its own position, for tracebacks.
            if isinstance(inst, Instr) and (inst.location is None or inst.location.lineno is None):
                inst.lineno = self.lineno
        bc.extend(prologue + self.instructions + self._tail)
        try:
            from framejit.frontend.breaks import to_code

            return to_code(bc, code)
        except Exception as exc:  # a codegen bug; report it as a reason, not a crash
            raise Unsupported("reconstruct", "building the transformed code", str(exc)) from None


def _total_args(code: types.CodeType) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & 0x04:  # CO_VARARGS
        n += 1
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        n += 1
    return n


def argnames_of(code: types.CodeType) -> tuple[str, ...]:
    return tuple(code.co_varnames[: _total_args(code)])


def call_with_frame_args(fn: types.FunctionType, args: Sequence[Any]) -> Any:
    """`fn` called with its arguments as a frame holds them (`argnames_of` order: positional,
    keyword-only, then the `*args` tuple and the `**kwargs` dict)."""
    code = fn.__code__
    npos, end = code.co_argcount, code.co_argcount + code.co_kwonlyargcount
    positional = list(args[:npos])
    keywords = dict(zip(code.co_varnames[npos:end], args[npos:end]))
    if code.co_flags & 0x04:  # CO_VARARGS
        positional += args[end]
        end += 1
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        keywords.update(args[end])
    return fn(*positional, **keywords)


# --- when the compiled graph raises -------------------------------------------------------------


@dataclass(frozen=True)
class GraphError:
    """What the transformed code does when its graph call raises: put the global state back to
    `state` (the state its guards checked at entry), then `rerun` the frame eagerly (None: the
    graph writes to an input, the exception propagates)."""

    state: GlobalState
    rerun: EagerRerun | None


def restore_global_state(state: GlobalState) -> None:
    """Grad mode and autocast as `state` has them (a graph that raised inside its own `no_grad`
    or autocast region left them changed)."""
    if torch.is_grad_enabled() != state.grad_enabled:
        torch._C._set_grad_enabled(state.grad_enabled)
    for device, enabled, dtype in (
        ("cpu", state.autocast_cpu, state.autocast_cpu_dtype),
        ("cuda", state.autocast_cuda, state.autocast_cuda_dtype),
    ):
        if torch.is_autocast_enabled(device) != enabled:
            torch.set_autocast_enabled(device, enabled)
        if enabled and dtype is not None and torch.get_autocast_dtype(device) != dtype:
            torch.set_autocast_dtype(device, dtype)


# Errors of these types raised by framejit's own run-time code (CUDA graph trees, the AOT
# runners, guards) are its bugs, not the user's program failing: `_internal_origin`.
_BUG_TYPES = (AttributeError, NameError, TypeError, AssertionError, KeyError, IndexError)


@functools.cache
def _framejit_dirs() -> tuple[str, ...]:
    import os

    import framejit
    from framejit import backend, cudagraphs, frontend, guards

    return tuple(
        os.path.dirname(m.__file__) + os.sep
        for m in (framejit, frontend, backend, cudagraphs, guards)
        if m.__file__
    )


def _internal_origin(error: BaseException) -> str | None:
    """`file:line` when `error` is of a bug's type and was raised in framejit's own code (its
    innermost frame), else None."""
    if not isinstance(error, _BUG_TYPES):
        return None
    from framejit.backend.triton.bounds import IndexOutOfBounds

    if isinstance(error, IndexOutOfBounds):  # the user's index, found by a kernel's check
        return None
    tb = error.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    if filename.startswith("<eval_with_key>") and isinstance(error, NameError):
        # the Python code torch.fx generated for a graph framejit built: a name it reads was
        # never defined, so a node the graph uses was dropped
        return f"{filename}:{tb.tb_lineno} (graph code)"
    if not filename.startswith(_framejit_dirs()):
        return None
    return f"{filename}:{tb.tb_lineno}"


class EagerRerun:
    """The frame run again as plain Python: a copy of its code (never compiled: the frame hook
    skips it and no JitFunction holds it, so the rerun cannot re-enter the entry that failed),
    called with the frame's arguments in co_varnames order and the frame's closure. Functions it
    calls are compiled as usual."""

    def __init__(self, fn: types.FunctionType) -> None:
        code = fn.__code__
        self.code = code.replace()  # a new code object: its own (empty) hook state
        from framejit.frontend import hook

        if hook.available():
            hook.require().set_code_state(self.code, None)  # skip: always run as it is
        self.globals = fn.__globals__

    def __call__(self, error: BaseException, args: tuple[Any, ...], closure: Any) -> Any:
        if getattr(error, "framejit_rerun", True) is False:
            # about an earlier call (a deferred index check): running this one again eagerly
            # would lose it
            raise error
        where = _internal_origin(error)
        if where is not None:
            from framejit.config import config

            if config.raise_internal_errors:
                raise error
            log.warning(
                "framejit: internal error at %s while running the compiled graph of %s: %s: %s; "
                "the call ran again eagerly (please report this)",
                where,
                self.code.co_qualname,
                type(error).__name__,
                error,
            )
        elif log.isEnabledFor(logging.DEBUG):
            log.debug(
                "the compiled graph of %s raised %s: %s; running the frame again eagerly",
                self.code.co_qualname,
                type(error).__name__,
                error,
            )
        del error
        fn = types.FunctionType(self.code, self.globals, self.code.co_name, None, closure)
        return call_with_frame_args(fn, args)

    def __repr__(self) -> str:
        return f"<eager rerun of {self.code.co_qualname}>"
