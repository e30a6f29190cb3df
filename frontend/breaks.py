"""Graph breaks: compile what was captured, run one instruction for real, resume in new code.

When the root frame's translator meets an instruction it cannot capture, it rewinds that
instruction (OutputGraph.rollback) and raises GraphBreak with the stack and locals as they were
before it. compile_frame then emits code that

    runs the graph captured so far,
    rebuilds the stack the instruction expects (graph outputs, constants, Sources),
    executes the instruction itself, unchanged,
    stores what is on the stack into temporaries and calls a resume function with them and
    the frame's live locals; its result is the frame's result.

A resume function is the original code with a prologue that pushes the saved stack and jumps to
the instruction after the break (for a conditional jump: one resume function per branch). It is
handed to `wrap_resume` (jit) so it is compiled in its turn when it first runs.

Loops. A break inside a resume function, at an instruction it copied from the user's code, gets
the resume function of the user's code at that instruction (`_to_root`), so a loop whose body
breaks in every iteration resumes in one and the same code (its compiled entries reused, its
ints symbolic after automatic dynamic) instead of a new resume function per iteration. A `for`
loop over a range hands over the range it has left (`RangeIteratorVariable`: a guard on the
next bound, not on each value); an iterator over other known items is passed as its items and
keeps the old way (a new resume function per iteration, up to `config.max_resume_depth`). The
call is made without nesting: the user's frame calls its resume function through
`codegen.run_resumes`, and a resume function returns the next call (`codegen.ResumeCall`)
instead of making it, so a loop of any length runs at a constant Python stack depth. The
arguments travel in a list that is emptied as the resume function's frame starts
(`codegen.call_taking`), and its prologue moves the saved stack out of its argument slots: as
in the frame that broke, a value the resumed code drops (a generator left by `break`) dies then.

Breaks inside `try` and `with` blocks. The resume function is the whole original code, so the
rest of a protected block keeps its handlers. The instruction that runs for real in the
transformed code is protected too: it sits in a `try` range whose handler is a copy of the
original code (`body_and_handler`), entered with the live locals stored in their own slots, so an
exception it raises reaches the same `except`/`finally`/`__exit__` as in eager, in the same frame,
and the rest of the frame then runs as plain Python (the exception path is not captured).
A `with` over a context the translator does not model breaks at BEFORE_WITH: the context is
entered for real and its exit is passed on wrapped in a ContextExit, which the translator never
calls (the exit is a graph break of its own, run for real).

Cells. The frame's cells are handed to a resume function as the cell objects themselves, as
arguments in the cells' own slots (the resume code has no MAKE_CELL for them), so a closure made
before the break and the resumed frame share them; the translator reads them through
`CellArgSource`.

Invariants:
- Only an instruction that changed nothing but the stack and the graph may be rewound: if it
  mutated a container or cell made in the frame, there is no break (the frame runs eagerly).
- Breaks happen at root-frame instructions; a break inside an inlined call happens at the root
  frame's call instruction, and the callee is handed to `wrap_resume` too, so it is compiled on
  its own.
- The stack layout after the instruction is known statically: which items are NULL, and how many
  items the instruction pops and pushes (BREAK_EFFECTS).
"""

from __future__ import annotations

import dis
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bytecode import Bytecode, CellVar, Instr, Label, TryBegin, TryEnd
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import RANGE_SUFFIX, LocalSource, source_class
from framejit.frontend.variables.base import NULL, VariableTracker, mutation_count

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


def _call_effect(inst: Any) -> tuple[int, int]:
    return inst.arg + 2, 1


def _call_ex_effect(inst: Any) -> tuple[int, int]:
    return 3 + (inst.arg & 1), 1


def _format_effect(inst: Any) -> tuple[int, int]:
    return (2 if inst.arg & 0x04 else 1), 1


# opname -> (items popped, items pushed) when it runs and does not jump.
BREAK_EFFECTS: dict[str, Callable[[Any], tuple[int, int]]] = {
    "CALL": _call_effect,
    "CALL_FUNCTION_EX": _call_ex_effect,
    "STORE_ATTR": lambda inst: (2, 0),
    "STORE_SUBSCR": lambda inst: (3, 0),
    "STORE_GLOBAL": lambda inst: (1, 0),
    "DELETE_SUBSCR": lambda inst: (2, 0),
    "DELETE_ATTR": lambda inst: (1, 0),
    "BINARY_SUBSCR": lambda inst: (2, 1),
    "BINARY_OP": lambda inst: (2, 1),
    "COMPARE_OP": lambda inst: (2, 1),
    "CONTAINS_OP": lambda inst: (2, 1),
    "UNARY_NEGATIVE": lambda inst: (1, 1),
    "UNARY_INVERT": lambda inst: (1, 1),
    "UNARY_NOT": lambda inst: (1, 1),
    "FORMAT_VALUE": _format_effect,
    "BUILD_STRING": lambda inst: (inst.arg, 1),
    "IMPORT_NAME": lambda inst: (2, 1),
    "RAISE_VARARGS": lambda inst: (inst.arg, 0),
    "BEFORE_WITH": lambda inst: (1, 2),  # context -> its exit, what __enter__ returned
    "LOAD_BUILD_CLASS": lambda inst: (0, 1),  # a class statement inside the function
    "DELETE_GLOBAL": lambda inst: (0, 0),
}
# Conditional jumps on a value's truth: both branches pop the condition.
TRUTH_JUMPS = {
    "POP_JUMP_IF_TRUE": True,
    "POP_JUMP_IF_FALSE": False,
    "POP_JUMP_FORWARD_IF_TRUE": True,
    "POP_JUMP_FORWARD_IF_FALSE": False,
    "POP_JUMP_BACKWARD_IF_TRUE": True,
    "POP_JUMP_BACKWARD_IF_FALSE": False,
}
NOT_BREAKABLE = {"unsupported_control_flow"}


@dataclass
class GraphBreak(Exception):
    """Raised by the root Translator: break before `inst`, with the state before it."""

    inst: Any
    reason: Unsupported
    stack: list[VariableTracker]
    locals: dict[str, VariableTracker]
    kw_names: tuple[str, ...]
    cells: dict[str, Any]  # the frame's cells and free variables (CellVariable for its own)
    # False: the instruction cannot run on its own here (inside a `try`, or an opcode that
    # is part of a larger construct such as a `with`): the resume function starts at it and
    # runs it itself, with the code around it.
    run_instruction: bool = True


class BreakAtTheRaise(Unsupported):
    """An exception the trace raised left the frame through an `except` clause or a `with`
    exit that changed objects made in the frame (an ExitStack's callbacks popped), which a
    rewind to the raising instruction would not restore: trace the frame again with a graph
    break at that instruction (`where`: its code and offset), so it raises for real and the
    real handlers run, as in eager."""

    def __init__(self, where: tuple[Any, int], reason: Unsupported) -> None:
        code, offset = where
        super().__init__(
            reason.code,
            f"a raise at {code.co_qualname} offset {offset}",
            "it leaves the frame through a clause that changed objects made in the frame",
        )
        self.where = where


def can_resume_at(tx: Translator, inst: Any, exc: Unsupported, changed: bool) -> bool:
    """Whether to compile the graph so far and resume *at* the instruction (not after it).
    `changed`: the instruction changed a container or cell made in the frame before it failed.

    Worth it only when something was captured before it: a resume function that starts at an
    instruction it cannot capture runs eagerly, so this never loops."""
    return exc.code not in NOT_BREAKABLE and not changed and tx.output.op_count() > 0


def resume_offset(decoded: Any, offset: int) -> int:
    """Where to resume to run the instruction at `offset` again: before the KW_NAMES and
    PRECALL (3.11) that belong to a CALL, which carry no stack effect of their own."""
    instructions = decoded.instructions
    k = decoded.index_of[offset]
    if instructions[k].opname != "CALL":
        return offset
    while k > 0 and instructions[k - 1].opname in ("PRECALL", "KW_NAMES"):
        k -= 1
    return instructions[k].offset


def can_break(tx: Translator, inst: Any, exc: Unsupported, mutations_before: int) -> bool:
    if exc.code in NOT_BREAKABLE or mutation_count() != mutations_before:
        return False
    return inst.opname in BREAK_EFFECTS or inst.opname in TRUTH_JUMPS


# --- resume functions ---------------------------------------------------------------------------

# resume code -> (name and qualname of the user's function it continues, chain depth)
_resume_origin: weakref.WeakKeyDictionary[types.CodeType, tuple[str, str, int]] = (
    weakref.WeakKeyDictionary()
)
_resume_cache: weakref.WeakKeyDictionary[types.CodeType, dict[Any, types.CodeType]] = (
    weakref.WeakKeyDictionary()
)
_PROLOGUE = ("MAKE_CELL", "COPY_FREE_VARS", "RESUME")


def _instruction_index(code: types.CodeType, offset: int) -> int:
    """Index of the instruction at `offset` among the code's `bytecode` Instrs. An offset of an
    EXTENDED_ARG (a jump target, or the instruction after a break, can be one) names the
    instruction it prefixes: `bytecode` folds the prefix into that Instr."""
    index = 0
    for inst in dis.get_instructions(code):
        if inst.opname == "EXTENDED_ARG":
            if inst.offset == offset:
                return index
            continue
        if inst.offset == offset:
            return index
        index += 1
    raise ValueError(f"no instruction at offset {offset} of {code.co_qualname}")


def _body(code: types.CodeType, index: int) -> tuple[list[Any], Label, TryBegin | None]:
    """The code as `bytecode` items without its MAKE_CELL/COPY_FREE_VARS/RESUME prologue, a label
    placed before the instruction number `index`, and the TryBegin (among the items) whose range
    holds that instruction."""
    target = Label()
    body: list[Any] = []
    seen = 0
    skipping_prologue = True
    current: TryBegin | None = None
    active: TryBegin | None = None
    pending: TryBegin | None = None
    offsets = [i.offset for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"]
    table = _exception_table(code)
    for item in Bytecode.from_code(code):
        if isinstance(item, TryBegin):
            current = pending = item
        elif isinstance(item, TryEnd):
            current = None
        elif isinstance(item, Instr):
            if pending is not None:
                # The handler's stack depth as the original table has it (`bytecode` would
                # recompute it by flow from the code's start, which a resume function skips).
                entry = next((e for e in table if e.start <= offsets[seen] < e.end), None)
                if entry is not None:  # (none: as `bytecode` read it)
                    pending.stack_depth, pending.push_lasti = entry.depth, entry.lasti
                pending = None
            if skipping_prologue and item.name in _PROLOGUE:
                seen += 1
                continue
            skipping_prologue = False
            if seen == index:
                body.append(target)
                active = current
            seen += 1
        body.append(item)
    return body, target, active


def _exception_table(code: types.CodeType) -> list[Any]:
    parse = getattr(dis, "_parse_exception_table", None)
    if parse is None:  # not on this Python: versions.py pins 3.11 and 3.12, which have it
        raise Unsupported("reconstruct", "reading the exception table", "no dis support")
    return list(parse(code))


def to_code(bc: Bytecode, original: types.CodeType) -> types.CodeType:
    """`bc` as a code object, with the exception table's depths as set on its TryBegins. The
    stack size is at least the original's: code copied from it may be reached only through
    exception handlers the flow analysis does not follow."""
    from bytecode import ControlFlowGraph

    size = ControlFlowGraph.from_bytecode(bc).compute_stacksize(
        compute_exception_stack_depths=False
    )
    return bc.to_code(
        stacksize=max(size, original.co_stacksize + 2), compute_exception_stack_depths=False
    )


def body_and_handler(code: types.CodeType, offset: int) -> tuple[list[Any], TryBegin] | None:
    """For an instruction inside a `try`/`with` range: a copy of the code's body (to append to
    the transformed code) and a new TryBegin to put around the instruction where it runs for
    real, whose handler is the copy's handler of that range. None outside any range."""
    if not code.co_exceptiontable:
        return None
    body, _, active = _body(code, _instruction_index(code, offset))
    if active is None:
        return None
    return body, TryBegin(active.target, active.push_lasti, active.stack_depth)


# resume code -> names of the cells it receives as arguments (cell objects, no MAKE_CELL)
_passed_cells: weakref.WeakKeyDictionary[types.CodeType, tuple[str, ...]] = (
    weakref.WeakKeyDictionary()
)


def passed_cells(code: types.CodeType) -> tuple[str, ...]:
    """The cell variables a resume function receives as cell objects in their own slots."""
    return _passed_cells.get(code, ())


@source_class
class CellArgSource(LocalSource):
    """A cell object passed to a resume function as the argument `name` (its cell's slot)."""

    def __str__(self) -> str:
        return f"L[{self.name!r}] (cell)"

    def emit_load(self, cg: Any) -> None:
        cg.emit(Instr("LOAD_CLOSURE", CellVar(self.name)))


def is_stack_slot(name: str) -> bool:
    """A resume function's argument that carries an item of the broken frame's stack."""
    return name.startswith("___stack")


def resume_code(
    code: types.CodeType,
    offset: int,
    kinds: tuple[str, ...],
    local_names: tuple[str, ...],
) -> types.CodeType:
    """`code` restarted at the instruction at `offset` with a stack of len(kinds) items, then
    `local_names`, then the frame's cells (every cell variable, as the cell object) as
    arguments. A stack item's kind is "null" (pushed as NULL), "value" (passed as argument
    ___stack<i>), "iter" (passed as a tuple of the items left; the prologue turns it back into
    an iterator, so a loop that broke resumes capturable) or "range" (what a loop over a range
    has left, passed as a range in ___stack<i>_range; the translator walks it lazily,
    RangeIteratorVariable). The cells keep their slots and get no MAKE_CELL, so closures made
    before the break share them with the resumed frame. A resume function of a resume function
    is the user's code's own at the same instruction (`_to_root`)."""
    depth = _resume_origin.get(code, ("", "", 0))[2]
    if "iter" not in kinds:
        # an iterator of known items would be guarded item by item: its loop keeps making new
        # resume functions, up to config.max_resume_depth
        code, offset = _to_root(code, offset)
    key = (offset, kinds, local_names)
    per_code = _resume_cache.setdefault(code, {})
    cached = per_code.get(key)
    if cached is not None:
        return cached
    index = _instruction_index(code, offset)
    body, target, active = _body(code, index)
    stack_args = [
        f"___stack{i}{RANGE_SUFFIX if kind == 'range' else ''}"
        for i, kind in enumerate(kinds)
        if kind != "null"
    ]
    prologue: list[Any] = []
    if code.co_freevars:
        prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
    prologue.append(Instr("RESUME", 0))
    for i, kind in enumerate(kinds):
        if kind == "null":
            prologue.append(Instr("PUSH_NULL"))
        else:
            slot = f"___stack{i}{RANGE_SUFFIX * (kind == 'range')}"
            prologue.append(Instr("LOAD_FAST", slot))
            if kind in ("iter", "range"):
                prologue.append(Instr("GET_ITER"))
            # the stack is its only owner, as in the frame that broke, and `locals()` of the
            # resume function run as Python shows the user's names only
            prologue.append(Instr("DELETE_FAST", slot))
    if active is None:
        prologue.append(Instr("JUMP_FORWARD", target))
    else:
        # the jump lands inside a `try` range: it goes through a range of its own with the
        # same handler, so the stack-size analysis reaches the handler (a body that only ends
        # in `raise` reaches it no other way) with its depth
        stub = TryBegin(active.target, active.push_lasti, active.stack_depth)
        prologue += [stub, Instr("JUMP_FORWARD", target), TryEnd(stub)]
    bc = Bytecode()
    root_name, root_qualname, _ = _resume_origin.get(code, (code.co_name, code.co_qualname, 0))
    real = list(dis.get_instructions(code))
    start = next(k for k, i in enumerate(real) if i.offset == offset)
    line = next(
        (i.positions.lineno for i in real[start:] if i.positions and i.positions.lineno),
        code.co_firstlineno,
    )
    # named as the user's function (tracebacks, logging's funcName and warnings show it);
    # the qualified name says where it resumes
    bc.name = root_name
    bc.qualname = f"{root_qualname}{_RESUME_MARK}{line}>"
    bc.filename = code.co_filename
    bc.first_lineno = code.co_firstlineno
    bc.argnames = [*stack_args, *local_names, *code.co_cellvars]
    bc.argcount = len(bc.argnames)
    bc.posonlyargcount = 0
    bc.kwonlyargcount = 0
    bc.freevars = list(code.co_freevars)
    bc.cellvars = list(code.co_cellvars)
    bc.flags = code.co_flags & ~(0x04 | 0x08)  # no *args / **kwargs: everything is positional
    bc.extend(prologue + body)
    try:
        new = to_code(bc, code)
    except Exception as exc:  # a bug here must not break the user's program
        raise Unsupported("reconstruct", "building a resume function", str(exc)) from None
    per_code[key] = new
    _resume_origin[new] = (root_name, root_qualname, depth + 1)
    _passed_cells[new] = tuple(code.co_cellvars)
    # the prologue's instructions (a jump into a `try` adds TryBegin/TryEnd markers, not code)
    offsets = _offset_map(new, code, sum(isinstance(item, Instr) for item in prologue))
    if offsets is not None:
        _resume_root[new] = (code, offsets)
    return new


# resume code -> (the code it was made from, its offsets -> that code's offsets)
_resume_root: weakref.WeakKeyDictionary[types.CodeType, tuple[types.CodeType, dict[int, int]]] = (
    weakref.WeakKeyDictionary()
)


def _to_root(code: types.CodeType, offset: int) -> tuple[types.CodeType, int]:
    """The user's code and offset that a resume function's instruction is a copy of (`code`
    and `offset` themselves for the user's code). A break at an instruction of a resume
    function then gets the resume function of the user's code at that instruction: a loop
    that breaks in every iteration resumes in the same code each time (compiled once, its
    entries reused) instead of in a new resume function of the last one."""
    while (root := _resume_root.get(code)) is not None and offset in root[1]:
        code, offset = root[0], root[1][offset]
    return code, offset


def _offset_map(new: types.CodeType, root: types.CodeType, prologue: int) -> dict[int, int] | None:
    """Offsets in `new` past its first `prologue` instructions -> the offsets of the
    instructions of `root` they copy (past root's own MAKE_CELL/COPY_FREE_VARS/RESUME). An
    EXTENDED_ARG's offset names the instruction it prefixes, as in `_instruction_index`. None
    when the two do not line up instruction for instruction."""
    ours: list[tuple[list[int], str]] = []  # (offsets naming it, opname) per instruction
    prefixes: list[int] = []
    for inst in dis.get_instructions(new):
        prefixes.append(inst.offset)
        if inst.opname != "EXTENDED_ARG":
            ours.append((prefixes, inst.opname))
            prefixes = []
    theirs = [i for i in dis.get_instructions(root) if i.opname != "EXTENDED_ARG"]
    while theirs and theirs[0].opname in _PROLOGUE:
        theirs.pop(0)
    ours = ours[prologue:]
    if len(ours) != len(theirs) or any(op != t.opname for (_, op), t in zip(ours, theirs)):
        return None
    return {at: t.offset for (names, _), t in zip(ours, theirs) for at in names}


_RESUME_MARK = ".<resume at line "


def resumes(code: types.CodeType) -> bool:
    """Is `code` a resume function's, or the compiled code made from one (both keep its
    qualified name)? Its frame and the frame that called it are one frame of the user's."""
    return _RESUME_MARK in code.co_qualname


def resume_depth(code: types.CodeType) -> int:
    """How many graph breaks led to this code (0 for a user's own code)."""
    entry = _resume_origin.get(code)
    return entry[2] if entry else 0


def original_instr(code: types.CodeType, offset: int) -> Instr:
    """The `bytecode` form of the instruction at `offset`, to run it unchanged."""
    index = _instruction_index(code, offset)
    instrs = [i for i in Bytecode.from_code(code) if isinstance(i, Instr)]
    return instrs[index].copy()


def resume_function(fn: types.FunctionType, code: types.CodeType) -> types.FunctionType:
    return types.FunctionType(code, fn.__globals__, code.co_name, None, fn.__closure__)


def stack_kind(item: VariableTracker | None, held: frozenset[int] = frozenset()) -> str:
    """How a stack item reaches a resume function (see `resume_code`). `held`: ids of the
    trackers the frame's locals hold."""
    from framejit.frontend.variables.containers import IteratorVariable
    from framejit.frontend.variables.generators import (
        DrainedItemsVariable,
        GetItemIterator,
        LazyIteratorVariable,
        RangeIteratorVariable,
        UserIteratorVariable,
    )

    if item is NULL:
        return "null"
    if isinstance(item, (UserIteratorVariable, GetItemIterator)):
        # a Python __next__ or __getitem__ may count or change state: the items are taken
        # when the code after the break asks for them, from the object itself
        return "value"
    if isinstance(getattr(item, "drained", item), DrainedItemsVariable):
        # a drained generator's items that re-check the generator's tensors at each step:
        # the object itself, never a tuple of its items taken now (`wrap_drained`)
        return "value"
    if isinstance(item, (IteratorVariable, LazyIteratorVariable)) and id(item) in held:
        # `it = iter(xs)` looped over: a local holds it too, so the resume function gets the
        # real iterator itself, the one object both hold (its loop then runs as Python)
        return "value"
    if isinstance(item, RangeIteratorVariable) or (
        type(item) is IteratorVariable and item.private and _int_steps(item.items[item.index :])
    ):
        return "range"
    return "iter" if isinstance(item, (IteratorVariable, LazyIteratorVariable)) else "value"


def _int_steps(items: list[VariableTracker]) -> bool:
    """Constant ints at equal, nonzero steps: what a loop over a range has left."""
    from framejit.frontend.variables.base import ConstantVariable

    if not items or not all(type(i) is ConstantVariable and type(i.value) is int for i in items):
        return False
    values = [i.value for i in items]
    step = values[1] - values[0] if len(values) > 1 else 1
    return step != 0 and all(b - a == step for a, b in zip(values, values[1:]))


def left_as_range(it: Any) -> range:
    """What iterator `it` has left, as a range (it is a range's iterator, or one over ints at
    equal steps: `stack_kind` "range")."""
    if type(it) is _RANGE_ITERATOR:
        _, (whole,), *done = it.__reduce__()  # 3.11: (range, index); 3.12: (range left, None)
        return whole[done[0] or 0 :] if done else whole
    values = tuple(it)
    step = values[1] - values[0] if len(values) > 1 else 1
    return range(values[0], values[-1] + step, step) if values else range(0)


_RANGE_ITERATOR = type(iter(range(0)))


def kept_stack(gb: GraphBreak) -> list[VariableTracker]:
    """The stack items the break leaves in place for the code after it: all of them when the
    resume function starts at the instruction itself, else those below what it consumes (a
    truth jump takes its condition)."""
    if not gb.run_instruction:
        return list(gb.stack)
    if gb.inst.opname in TRUTH_JUMPS:
        return list(gb.stack[:-1])
    return [vt for vt in layout_after(gb)[0] if vt is not None]


def layout_after(gb: GraphBreak) -> tuple[list[VariableTracker | None], int]:
    """The stack after the break instruction ran without jumping: known items (None = a value
    only the real run knows), and how many items the instruction consumed."""
    pops, pushes = BREAK_EFFECTS[gb.inst.opname](gb.inst)
    stack = gb.stack
    if gb.inst.opname == "CALL_FUNCTION_EX" and not (
        len(stack) >= pops and stack[len(stack) - pops] is NULL
    ):
        pops -= 1  # no NULL below the callable
    kept: list[VariableTracker | None] = list(stack[: len(stack) - pops])
    return kept + [None] * pushes, pops
