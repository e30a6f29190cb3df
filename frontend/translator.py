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
import functools
import traceback
import types
import weakref
from typing import Any

import torch
from framejit.frontend.breaks import (
    BreakAtTheRaise,
    GraphBreak,
    _exception_table,
    can_break,
    can_resume_at,
)
from framejit.frontend.errors import FrameRunsAsPython, Location, Unsupported
from framejit.frontend.handlers import HANDLERS, unsupported_opcodes
from framejit.frontend.inlining import InliningMixin, _RealCell
from framejit.frontend.operators import OperatorsMixin
from framejit.frontend.output_graph import OutputGraph
from framejit.frontend.sources import (
    AttrSource,
    ConstSource,
    FreeVarSource,
    GlobalSource,
    ItemSource,
    Source,
)
from framejit.frontend.variables import builder
from framejit.frontend.variables.base import (
    CellVariable,
    ConstantVariable,
    ExceptionVariable,
    VariableTracker,
    begin_instruction,
    mutation_count,
    note_mutation,
    note_undoable,
    undo_mark,
    undo_to,
)
from framejit.frontend.variables.builder import CONSTANT_TYPES
from framejit.frontend.variables.containers import (
    DictVariable,
    ListVariable,
    SetVariable,
    TupleVariable,
)
from framejit.frontend.variables.objects import module_state

from framejit import logs
from framejit.config import config

# What a handler that only tidies up before re-raising is made of (Decoded.is_plain_cleanup).
_CLEANUP_OPS = frozenset(
    {"COPY", "POP_EXCEPT", "LOAD_CONST", "STORE_FAST", "DELETE_FAST", "SWAP", "POP_TOP", "NOP"}
)

_INTRINSIC_STOPITERATION_ERROR = 3  # CALL_INTRINSIC_1's operand (3.12)
MAX_STEPS = 2_000_000  # instructions per traced frame, inlined calls included


class Decoded:
    """A code object's instructions, decoded once."""

    def __init__(self, code: types.CodeType) -> None:
        self.instructions = list(dis.get_instructions(code))
        self.index_of = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.next_offset = {
            a.offset: b.offset for a, b in zip(self.instructions, self.instructions[1:])
        }
        self.code = code

    @functools.cached_property
    def exception_table(self) -> list[Any]:
        return _exception_table(self.code)  # read only when an inlined frame raises

    def handler_for(self, offset: int) -> Any:
        """The exception table entry that covers the instruction at `offset` (or None)."""
        for entry in self.exception_table:
            if entry.start <= offset < entry.end:
                return entry
        return None

    def is_except_clause(self, target: int) -> bool:
        """Does the handler at `target` start an `except X:` (or bare `except:`) clause, rather
        than a `with` block's exit or a `finally` body?"""
        k = self.index_of.get(target)
        if k is None or self.instructions[k].opname != "PUSH_EXC_INFO":
            return False
        for inst in self.instructions[k + 1 : k + 8]:
            if inst.opname == "CHECK_EXC_MATCH":
                return True
            if inst.opname == "POP_TOP":  # a bare `except:` drops the exception at once
                return inst is self.instructions[k + 1]
            if not inst.opname.startswith(("LOAD_", "BUILD_TUPLE", "PRECALL", "NOP")):
                return False
        return False

    def is_stop_iteration_guard(self, target: int) -> bool:
        """Is the handler at `target` the one 3.12 wraps a generator's body in, which turns a
        StopIteration into RuntimeError (PEP 479) and re-raises anything else unchanged?"""
        k = self.index_of.get(target)
        return (
            k is not None
            and self.instructions[k].opname == "CALL_INTRINSIC_1"
            and self.instructions[k].arg == _INTRINSIC_STOPITERATION_ERROR
        )

    def starts_handler(self, target: int) -> bool:
        """Does a handler body (`except`, `finally`, a `with` exit) start at `target`?"""
        k = self.index_of.get(target)
        return k is not None and self.instructions[k].opname == "PUSH_EXC_INFO"

    def is_with_exit(self, target: int) -> bool:
        """Does the handler at `target` call a `with` block's exit with the exception
        (PUSH_EXC_INFO, WITH_EXCEPT_START)?"""
        k = self.index_of.get(target)
        return (
            k is not None
            and k + 1 < len(self.instructions)
            and self.instructions[k].opname == "PUSH_EXC_INFO"
            and self.instructions[k + 1].opname == "WITH_EXCEPT_START"
        )

    def is_plain_cleanup(self, target: int) -> bool:
        """Does the handler at `target` only tidy up and re-raise (an `except E as e:` body's
        deletion of `e`, leaving an `except` clause, a 3.12 comprehension restoring its loop
        variable), so that skipping it changes nothing the trace models? A `with` block's
        `__exit__` and a `finally` body are not plain."""
        k = self.index_of.get(target)
        if k is None:
            return False
        for inst in self.instructions[k : k + 12]:
            if inst.opname == "RERAISE":
                return True
            if inst.opname not in _CLEANUP_OPS:
                return False
        return False


_decoded: weakref.WeakKeyDictionary[types.CodeType, Decoded] = weakref.WeakKeyDictionary()


def decode(code: types.CodeType) -> Decoded:
    d = _decoded.get(code)
    if d is None:
        d = _decoded[code] = Decoded(code)
    return d


def _refuse(opname: str, reason: str) -> Any:
    """The "handler" of an opcode the translator does not capture: it raises Unsupported."""

    def refuse(tx: Any, inst: Any) -> None:
        raise Unsupported("unsupported_opcode", opname, reason)

    return refuse


_USER_ERRORS = (ArithmeticError, LookupError, ValueError, TypeError, AttributeError)


class Translator(OperatorsMixin, InliningMixin):
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
        self.handling = 0  # `except` clauses entered and not yet left (PUSH_EXC_INFO, POP_EXCEPT)
        self.handled: list[VariableTracker] = []  # their exceptions, innermost last
        self.handled_unknown = False  # left a clause entered before the trace began
        # An inlined generator's frame (variables/generators.py): YIELD_VALUE stores the value
        # and pauses `run`, which the GeneratorVariable resumes for the next item.
        self.is_generator = False
        self.closing = False  # GeneratorExit thrown in by close(): `finally` bodies are traced
        self.paused = False
        self.yield_value: VariableTracker | None = None

    # --- the loop --------------------------------------------------------------------------------
    def run(self) -> VariableTracker:
        instructions = self.decoded.instructions
        unsupported = unsupported_opcodes()
        caught: tuple[Any, ...] | None = None  # see the root frame's `except` clauses below
        outer, self.output.current_tx = self.output.current_tx, self
        try:
            while self.return_value is None and not self.paused:
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
                if fn is None:  # a graph break where the instruction can run for real
                    fn = _refuse(inst.opname, unsupported.get(inst.opname, "unknown opcode"))
                if not self.breaks_allowed:
                    try:
                        self._step(fn, inst)
                    except Unsupported as exc:
                        if not self._catch(exc, inst):
                            raise
                    continue
                stack, local_vars, kw_names = list(self.stack), dict(self.locals), self.kw_names
                cells = dict(self.cells)
                contents = {n: c.contents for n, c in cells.items() if isinstance(c, CellVariable)}
                mark, mutations, undo = self.output.checkpoint(), mutation_count(), undo_mark()
                begin_instruction()
                try:
                    self._step(fn, inst)
                except Unsupported as raised:
                    if isinstance(raised, FrameRunsAsPython):
                        raise  # no break: the frame runs as Python (compile_frame)
                    exc = raised
                    if (
                        caught is not None
                        and exc.python_exception() is not None
                        and self._catch(exc, inst)
                    ):
                        continue  # raised in the clause (or re-raised): a handler further out
                    if caught is not None:
                        # The `except` clause we entered cannot be traced to its end: rewind to
                        # the instruction that raised and break there, as without the clause.
                        # Only if the clause changed no object made in the frame (a list it
                        # popped, an ExitStack's callbacks): a rewind restores the stack and
                        # locals, not their contents; else the frame is traced again with the
                        # break at that instruction, its clause never entered (BreakAtTheRaise).
                        clause_changed = mutation_count() != caught[11]
                        inst, exc, stack, local_vars, kw_names, cells, contents = caught[:7]
                        mark, undo, run_it, changed = caught[7:11]
                        if clause_changed:
                            where = (self.code, inst.offset)
                            if where not in self.output.calls_run_in_place:
                                raise BreakAtTheRaise(where, exc) from None
                            raise exc from None
                        if inst.positions is not None and inst.positions.lineno is not None:
                            self.lineno = inst.positions.lineno
                    else:
                        run_it = can_break(self, inst, exc, mutations)
                        changed = mutation_count() != mutations
                        if (
                            exc.python_exception() is not None
                            and (self.code, inst.offset) not in self.output.calls_run_in_place
                            and self._catch(exc, inst)
                        ):
                            # the root frame's own `except` clause takes it; keep what a break
                            # at this instruction needs, in case the clause cannot be traced
                            caught = (inst, exc, stack, local_vars, kw_names, cells, contents)
                            caught += (mark, undo, run_it, changed, mutation_count())
                            continue
                    self.output.rollback(mark)
                    self.output.guards.extend(exc.kept_guards)
                    if not run_it and not can_resume_at(self, inst, exc, changed):
                        raise exc from None
                    undo_to(undo)
                    for name, value in contents.items():  # a store into a cell, rewound
                        cells[name].contents = value
                    exc.stack.insert(0, self.location())
                    raise GraphBreak(
                        inst, exc, stack, local_vars, kw_names, cells, run_instruction=run_it
                    ) from None
                if (
                    caught is not None
                    and inst.opname == "POP_EXCEPT"
                    and self.handling == 0
                    and instructions[self.ip].opname != "RERAISE"
                ):
                    caught = None  # the clause ran to its end (not out through a re-raise)
        except Unsupported as exc:
            exc.stack.insert(0, self.location())
            raise
        finally:
            self.output.current_tx = outer
            # they hold an exception whose traceback holds this frame: a cycle that would keep
            # the frame's arguments alive until the garbage collector runs
            exc = caught = None  # noqa: F841 - see above
        return self.return_value

    def _catch(self, exc: Unsupported, inst: Any) -> bool:
        """The frame's own `except` clause around `inst` takes a Python exception the
        translator knows (`Mapping.get`'s `try: self[key] except KeyError`): jump to the handler
        as CPython would. A `with` block's exit is entered too: WITH_EXCEPT_START calls the
        exit (traced) with the exception, which it may suppress (`contextlib.suppress`).
        `finally` handlers are never entered while tracing. In the root frame, a clause that
        cannot be traced to its end (up to its POP_EXCEPT) is rewound: the frame breaks at the
        instruction that raised, which then runs for real."""
        exc_type = exc.python_exception()
        if exc_type is None:
            return False
        entry = self.decoded.handler_for(inst.offset)
        if entry is None:
            return False
        # a raise inside an `except` clause's body goes to the clause's tidying up (deleting
        # `err`, POP_EXCEPT), which is traced; its RERAISE hands the exception on outward
        leaves_clause = self.handling > 0 and self.decoded.is_plain_cleanup(entry.target)
        enters = leaves_clause or self.decoded.is_with_exit(entry.target)
        # a generator's close(): its `finally` bodies run, traced, and GeneratorExit leaves it
        enters = enters or (self.closing and self.decoded.starts_handler(entry.target))
        if not enters and not self.decoded.is_except_clause(entry.target):
            if not self.decoded.is_plain_cleanup(entry.target) and not (
                exc_type is not StopIteration and self.decoded.is_stop_iteration_guard(entry.target)
            ):
                # A `with` block's exit or a `finally` body would run here (`with
                # torch.no_grad(): raise ...` in a called function); they are not traced, so
                # no caller's `except` may take the exception: the call runs for real.
                exc.cleanup_skipped = True
            return False
        del self.stack[entry.depth :]
        if entry.lasti:
            self.push(ConstantVariable(inst.offset))
        # the exception object: the one a traced `raise` built, else one whose arguments are
        # unknown (a KeyError of a modelled dict lookup): reading them is a break
        value = getattr(exc, "exc_value", None)
        if value is None:
            known = getattr(exc, "exc_args", None)
            if known is not None and all(type(a) in builder.CONSTANT_TYPES for a in known):
                value = ExceptionVariable(exc_type, [ConstantVariable(a) for a in known])
            else:
                value = ExceptionVariable(exc_type, None)
        value.raised = True
        self.push(value)
        self.ip = self.decoded.index_of[entry.target]
        return True

    def _step(self, fn: Any, inst: Any) -> None:
        try:
            if config.debug_stack_check:
                self._checked_step(fn, inst)
            else:
                fn(self, inst)
        except _USER_ERRORS as exc:
            # A Python error while modelling the instruction: most often the user's code
            # raising what eager raises too (`[].pop()`, `max([])`, `{[1]: 2}`). A traced
            # `except` clause takes it, or the instruction runs for real at a graph break,
            # which is right whatever the cause. The graph_breaks log names framejit's line.
            if logs.enabled("graph_breaks"):
                where = traceback.extract_tb(exc.__traceback__)[-1]
                logs.artifact(
                    "graph_breaks",
                    f"{inst.opname} at {self.location()} raised {exc!r} "
                    f"(in {where.filename}:{where.lineno})",
                )
            raise Unsupported.raised(f"{inst.opname}", exc) from None

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
        if type(value) in (set, frozenset) and all(type(v) in CONSTANT_TYPES for v in value):
            return SetVariable(value)  # a new set, made by the folded function
        return self.wrap_value(value, None)

    def locals_dict(self) -> VariableTracker:
        """`locals()` in a function: one dict per frame that each call refreshes with the
        bound locals, cells and free variables, in the frame's order (as CPython's f_locals
        before 3.13). framejit's own names (a resume function's `___stack0`) are left out."""
        from framejit.frontend.variables.containers import DictVariable

        d = self.__dict__.get("_locals_dict")
        if d is None:
            d = self._locals_dict = DictVariable({})
        code = self.code
        items: dict[str, VariableTracker] = {}
        for name in dict.fromkeys((*code.co_varnames, *code.co_cellvars, *code.co_freevars)):
            if name.startswith("___"):
                continue
            cell = self.cells.get(name)
            if cell is None:
                if name in self.locals:
                    items[name] = realize(self, self.locals[name])
            elif not isinstance(cell, CellVariable) or cell.contents is not None:
                items[name] = self.load_deref(name)
        old = d.items
        note_undoable(lambda: setattr(d, "items", old))
        d.items = items
        return d

    def has_attr(self, vt: VariableTracker, name: str) -> bool:
        """`hasattr(vt, name)`: found the way `getattr` would find it."""
        try:
            vt.getattr(self, name)
        except Unsupported as exc:
            if exc.code == "exception":  # an AttributeError (guarded where it was raised)
                return False
            if hasattr(vt, "obj"):  # an object from outside the frame: ask the real one
                found = hasattr(vt.obj, name)
                if not found:
                    guard_missing_attribute(self, vt, name)
                return found
            if exc.code == "unsupported_attr":
                return False
            raise
        return True

    # --- globals and closures --------------------------------------------------------------------
    def load_global(self, name: str) -> VariableTracker:
        written = self.output.side_effects.globals.get(name)
        if written is not None and self.f_globals is self.output.fn.__globals__:
            return written
        if name in self.f_globals:
            if self.parent is None or self.f_globals is self.output.fn.__globals__:
                return self.wrap_source(GlobalSource(name))
            if (
                _trusted_globals(self.f_globals)
                and not module_state(self.f_globals[name])
                and not _module_flag(name, self.f_globals[name])
            ):
                try:
                    return self.wrap_value(self.f_globals[name], None)
                except Unsupported as exc:
                    if exc.code != "unsupported_object":
                        raise
                    # a library's table (a dict keyed by (device, dtype)): read through a
                    # source below, and guarded
            if self.fn_source is not None:
                return self.wrap_source(ItemSource(AttrSource(self.fn_source, "__globals__"), name))
            # a function reached by value (a method found on a class): its module's globals
            # dict, held by the compiled code, read and guarded like the frame's own globals
            module = str(self.f_globals.get("__name__", "?"))
            return self.wrap_source(
                ItemSource(ConstSource(self.f_globals, f"globals of {module}"), name)
            )
        builtins_dict = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_dict, types.ModuleType):
            builtins_dict = vars(builtins_dict)
        if name in builtins_dict:
            if not _trusted_globals(self.f_globals):
                # a global of that name defined later would shadow the builtin (a library's
                # globals are fixed, as everywhere: no guard on the hot path for them)
                module = str(self.f_globals.get("__name__", "?"))
                globals_source = ConstSource(self.f_globals, f"globals of {module}")
                self.output.require_absent(globals_source, name, self.location_text())
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
            note_mutation(cell)
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


def guard_missing_attribute(tx: Translator, vt: VariableTracker, name: str) -> None:
    """The trace found that an object from outside the frame has no attribute `name`
    (`hasattr` False, `getattr`'s default, an AttributeError caught): setting it later must
    compile again. Guarded where it would appear: the instance dict (and a module's
    parameters, buffers and submodules) and the class's own dict."""
    from framejit.frontend.sources import TypeSource

    obj, source = getattr(vt, "obj", None), getattr(vt, "source", None)
    if source is None or not isinstance(getattr(obj, "__dict__", None), dict):
        return
    where = tx.location_text()
    tx.output.require_absent(AttrSource(source, "__dict__"), name, where)
    if isinstance(obj, torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            tx.output.require_absent(AttrSource(source, table), name, where)
    tx.output.require_absent(AttrSource(TypeSource(source), "__dict__"), name, where)


def _module_flag(name: str, value: Any) -> bool:
    """A private scalar a library rebinds at run time to switch a behaviour
    (`torch.backends.mha._is_fastpath_enabled`, parametrize's `_cache_enabled`): read through a
    Source, guarded, where the library's other globals are fixed."""
    return name.startswith("_") and type(value) in (bool, int, float, str, type(None))


def _trusted_globals(f_globals: dict[str, Any]) -> bool:
    """Globals of library modules (torch, the standard library) are read without guards."""
    from framejit.frontend.variables.objects import TRUSTED_MODULE_ROOTS

    name = str(f_globals.get("__name__", ""))
    return name.split(".")[0] in TRUSTED_MODULE_ROOTS


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
