"""compile_frame: the one entrance to the frontend, shared by `jit` and the frame hook.

Given a function, the arguments of a frame about to run it and a backend, it traces the code,
compiles the captured graph with the backend, generates the transformed code and compiles the
guards, and returns a CacheEntry. When the code cannot be captured it returns an entry whose
"transformed" function is the original one (so the frame runs eagerly, guarded by what was
learned before the failure), or raises FullGraphError under fullgraph=True. Internal errors are
treated the same way unless `config.raise_internal_errors` is set: a user's program never fails
because framejit is on.
"""

from __future__ import annotations

import dataclasses
import dis
import io
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from bytecode import Instr
from framejit.frontend.breaks import (
    TRUTH_JUMPS,
    BreakAtTheRaise,
    CellArgSource,
    GraphBreak,
    body_and_handler,
    is_stack_slot,
    kept_stack,
    layout_after,
    passed_cells,
    resume_code,
    resume_depth,
    resume_function,
    resume_offset,
    stack_kind,
)
from framejit.frontend.codegen import CodeGen, EagerRerun, GraphError, argnames_of
from framejit.frontend.dynamic import DynamicInputs
from framejit.frontend.errors import FullGraphError, Unsupported
from framejit.frontend.inlining import _RealCell, real_cell, runs_as_python
from framejit.frontend.output_graph import NeedsPythonDispatch, OutputGraph
from framejit.frontend.side_effects import ReplayOutOfOrder, written_tensors
from framejit.frontend.sources import (
    AttrSource,
    FreeVarSource,
    GlobalSource,
    ItemSource,
    Source,
)
from framejit.frontend.translator import decode, root_translator
from framejit.frontend.variables.base import (
    NULL,
    CellVariable,
    DeferredNumberVariable,
    VariableTracker,
    forget_undo,
    undo_mark,
)
from framejit.frontend.variables.containers import (
    BaseSequence,
    DataclassVariable,
    DictVariable,
    IteratorVariable,
    ListVariable,
    SliceVariable,
)
from framejit.frontend.variables.contexts import AutocastExitVariable
from framejit.frontend.variables.functions import (
    BoundMethodVariable,
    NestedFunctionVariable,
    PartialVariable,
    UserMethodVariable,
)
from framejit.frontend.variables.generators import (
    GeneratorEscapes,
    LazyIteratorVariable,
    settle_at_break,
    settle_at_end,
)
from framejit.frontend.variables.objects import NewObjectVariable
from framejit.frontend.variables.symbolic import SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable
from framejit.frontend.warning_filters import ignoring_non_leaf_grad, ignoring_warnings
from framejit.guards import CacheEntry, Guard, GuardKind, compile_guards
from framejit.guards.guard import storage_key

from framejit import logs
from framejit.config import config

log = logs.get_logger("frontend")


@dataclass
class CapturedGraph:
    """What one compilation produced, for explain() and the logs."""

    gm: torch.fx.GraphModule
    inputs: list[str]  # the Source of each graph input, as text
    op_count: int


@dataclass
class CompileResult:
    entry: CacheEntry
    graphs: list[CapturedGraph] = field(default_factory=list)
    break_reasons: list[Unsupported] = field(default_factory=list)
    seconds: float = 0.0


# One compile at a time in the process: two threads tracing at once rewound each other's
# iterators and objects (variables/base.py's undo log is global), a wrong graph that stayed
# cached. Re-entrant: a compile may start another in the same thread.
_COMPILE_LOCK = threading.RLock()


def compile_frame(
    fn: types.FunctionType,
    args: tuple[Any, ...],
    backend: Any,
    fullgraph: bool = False,
    wrap_resume: Callable[[types.FunctionType], Any] | None = None,
    dynamic: bool | None = False,
    cache: Any = None,
    share_modules: bool = False,
) -> CompileResult:
    """Trace `fn`'s code for the frame arguments `args` (co_varnames order) and compile it.

    `wrap_resume` receives each resume function (and each callee a break runs for real) and
    returns what the transformed code should call instead: `jit` of it, so it is compiled when
    it runs. None: no graph breaks, a frame that cannot be captured whole runs eagerly.
    `dynamic` is jit's option (frontend/dynamic.py); `cache` is the code's CodeCache, whose
    history of input sizes drives automatic dynamic shapes, and with `share_modules`, of the
    modules the frame's arguments hold (`DynamicInputs.module_is_shared`).
    """
    from framejit.backend.aot.analysis import no_user_hooks

    eager_generators: dict[types.CodeType, str] = {}
    in_place: set[tuple[types.CodeType, int]] = set()
    # the translator's rewind log and counters are process-wide; the user's saved-tensor
    # hooks are meant for the real tensors of a run, not for the fakes of a trace
    with _COMPILE_LOCK, no_user_hooks():
        undo_base = undo_mark()
        while True:
            try:
                return _compile_frame_once(
                    fn,
                    args,
                    backend,
                    fullgraph,
                    wrap_resume,
                    dynamic,
                    cache,
                    eager_generators,
                    in_place,
                    share_modules,
                )
            except GeneratorEscapes as exc:
                # a generator made in the frame outlives what can be traced of it: trace again
                # with its function run as Python (variables/generators.py); one code per retry
                log.debug("tracing %s again with %s run as Python", fn.__qualname__, exc.gen_code)
                eager_generators = {**eager_generators, exc.gen_code: exc.detail}
            except (ReplayOutOfOrder, BreakAtTheRaise) as exc:
                # a logging/warnings call would see later state if replayed after the graph
                # (side_effects.py), or a raise leaves through a clause that cannot be rewound
                # (breaks.py): trace again with a graph break at that instruction
                log.debug("tracing %s again with a break at %s", fn.__qualname__, exc.construct)
                in_place = {*in_place, exc.where}
            except NeedsPythonDispatch as exc:
                # an op's C++ fake kernel pinned symbolic sizes before refusing them: trace
                # again with the op run through its Python decomposition (output_graph.py)
                log.debug("tracing %s again with %s decomposed", fn.__qualname__, exc.label)
            finally:
                forget_undo(undo_base)


MAX_GENERATOR_RETRIES = 8  # also the most calls moved to a graph break (ReplayOutOfOrder)


def _compile_frame_once(
    fn: types.FunctionType,
    args: tuple[Any, ...],
    backend: Any,
    fullgraph: bool,
    wrap_resume: Callable[[types.FunctionType], Any] | None,
    dynamic: bool | None,
    cache: Any,
    eager_generators: dict[types.CodeType, str],
    calls_run_in_place: set[tuple[types.CodeType, int]],
    share_modules: bool = False,
) -> CompileResult:
    start = time.perf_counter()
    code = fn.__code__
    argnames = argnames_of(code)
    frame_args = dict(zip(argnames, args))
    output = OutputGraph(fn, frame_args, DynamicInputs(dynamic, cache, frame_args, share_modules))
    output.eager_generators = eager_generators
    output.calls_run_in_place = calls_run_in_place
    tx = root_translator(code, fn, output, argnames)
    try:
        for name in passed_cells(code):  # a resume function's cells: real cells, read through them
            tx.locals.pop(name, None)
            tx.cells[name] = _RealCell(
                AttrSource(CellArgSource(name, True), "cell_contents"), output.frame_args[name]
            )
        for name, cell in list(tx.cells.items()):  # known by identity to inlined closures
            if isinstance(cell, _RealCell):
                tx.cells[name] = real_cell(tx, cell.source, cell.cell)
        tx.breaks_allowed = wrap_resume is not None and not fullgraph
        grad_at_entry = torch.is_grad_enabled()
        try:
            try:
                try:
                    with torch.fx.traceback.preserve_node_meta():
                        result = tx.run()
                finally:  # `with no_grad()` or set_grad_enabled in the trace changed the real mode
                    # autocast and inference-mode blocks left open (at a break inside one): the
                    # code after the graph enters them again itself, so the grad mode it sets is
                    # the one outside them (inference mode turns grad off while it lasts)
                    for ctx in reversed(output.open_contexts):
                        ctx.__exit__(None, None, None)
                    output.grad_at_exit = torch.is_grad_enabled()
                    torch._C._set_grad_enabled(grad_at_entry)
                entry, graphs = _finish(fn, code, output, tx, result, backend, argnames)
            except GraphBreak as gb:
                _log_break(code, gb.reason)
                entry, graphs = _finish_break(fn, code, output, gb, backend, argnames, wrap_resume)
                reason = _kept(gb.reason)
                return CompileResult(entry, graphs, [reason], time.perf_counter() - start)
        except Unsupported as exc:
            if (
                isinstance(exc, GeneratorEscapes)
                and exc.gen_code not in eager_generators
                and len(eager_generators) < MAX_GENERATOR_RETRIES
            ) or (
                isinstance(exc, (ReplayOutOfOrder, BreakAtTheRaise))
                and exc.where not in calls_run_in_place
                and len(calls_run_in_place) < MAX_GENERATOR_RETRIES
            ):
                raise
            if fullgraph:
                raise FullGraphError(f"fullgraph=True: {exc.describe()}") from None
            if logs.enabled("graph_breaks"):
                logs.artifact(
                    "graph_breaks", f"running {code.co_qualname} eagerly: {exc.describe()}"
                )
            entry = _eager_entry(fn, output, argnames, _kept(exc))
            return CompileResult(entry, [], [exc], time.perf_counter() - start)
        except (FullGraphError, NeedsPythonDispatch):
            raise
        except Exception as exc:
            if config.raise_internal_errors:
                raise
            log.warning(
                "framejit: internal error while compiling %s (%s:%d); running it eagerly: %s: %s",
                code.co_qualname,
                code.co_filename,
                code.co_firstlineno,
                type(exc).__name__,
                exc,
            )
            entry = _eager_entry(fn, OutputGraph(fn, {}), argnames, None)
            return CompileResult(entry, [], [], time.perf_counter() - start)
        return CompileResult(entry, graphs, [], time.perf_counter() - start)
    finally:
        # the trace's variables refer to one another (and to the translator) in cycles that
        # only the garbage collector frees: let go of the frame's real objects now, so one the
        # program drops later (a generator whose `finally` must run then) is not kept alive
        tx.locals.clear()
        tx.stack.clear()
        output.let_go()


def _kept(exc: Unsupported) -> Unsupported:
    """A reason kept in the cache entry, without its traceback or context: those hold the
    translator's frames, and through them the frame's arguments (tensors, generators whose
    `finally` must run when the program drops them)."""
    exc.__traceback__ = None
    exc.__context__ = None
    return exc


def _log_break(code: types.CodeType, reason: Unsupported) -> None:
    if logs.enabled("graph_breaks"):
        logs.artifact("graph_breaks", f"graph break in {code.co_qualname}: {reason.describe()}")


def _eager_entry(
    fn: types.FunctionType,
    output: OutputGraph,
    argnames: tuple[str, ...],
    reason: Unsupported | None,
) -> CacheEntry:
    guards = [*output.guards, *output.shape_guards(), _global_state_guard(output)]
    compiled = compile_guards(guards, argnames, name=f"guard_{fn.__code__.co_name}_eager")
    return CacheEntry(compiled, fn, fn.__code__, [], [reason] if reason else [])


def _global_state_guard(output: OutputGraph) -> Guard:
    """The state the frame was entered with (read before tracing: the trace and the backend may
    change grad mode while they run)."""
    state = dataclasses.replace(output.state_at_entry, module_hooks=output.calls_modules)
    return Guard(None, GuardKind.GLOBAL_STATE, state, "global state when the frame was compiled")


def _collect_outputs(
    vt: VariableTracker, out: list[TensorVariable], seen: set[int] | None = None
) -> None:
    """Tensors in the return value that the graph must return (not inputs returned as-is), and
    symbolic sizes (returned by the graph rather than pinned to the traced value). Objects are
    visited once: two made in the frame may refer to each other (`a.other = b; b.other = a`,
    torch.distributions' transforms and their inverses)."""
    if seen is None:
        seen = set()
    if id(vt) in seen:
        return
    seen.add(id(vt))
    if isinstance(vt, (TensorVariable, SymNodeVariable)):
        if vt.source is None and all(o.node is not vt.node for o in out):
            out.append(vt)
        return
    for item in _parts(vt):
        _collect_outputs(item, out, seen)


def _parts(vt: VariableTracker) -> list[VariableTracker]:
    """The values a rebuild of `vt` rebuilds with it (items, fields, attributes, cells)."""
    if isinstance(vt, ListVariable) and not vt.contents_read:
        return list(vt.appended)
    if isinstance(vt, BaseSequence):
        return list(vt.items)
    if isinstance(vt, DictVariable):
        return list(vt.items.values())
    if isinstance(vt, DataclassVariable):
        return list(vt.fields.values())
    if isinstance(vt, NewObjectVariable):  # its attributes, and a dict or list base's items
        base = [] if vt.base_items is None else _parts(vt.base_items)
        return [*vt.attrs.values(), *base]
    if isinstance(vt, IteratorVariable):
        return list(vt.items[vt.index :])
    if isinstance(vt, LazyIteratorVariable):
        return list(vt.reachable())
    if isinstance(vt, (BoundMethodVariable, UserMethodVariable)):
        return [vt.obj]  # `tensor.item` waiting for its call
    if isinstance(vt, PartialVariable):
        return [vt.fn, *vt.args, *vt.kwargs.values()]
    if isinstance(vt, SliceVariable):
        return list(vt.parts)
    if isinstance(vt, DeferredNumberVariable):  # `self.total + v`, computed after the graph
        return list(vt.operands)
    if isinstance(vt, NestedFunctionVariable):
        cells = [
            c.contents for c in vt.closure if isinstance(c, CellVariable) and c.contents is not None
        ]
        return [*vt.defaults, *vt.kwdefaults.values(), *cells]
    return []


def _load_before_writes(
    output: OutputGraph, cg: CodeGen, roots: list[VariableTracker], at_break: bool = False
) -> None:
    """Values read from outside the frame (`old = self.cache`, `v = lst.pop()`, `a = d["k"]`)
    that the code after the graph rebuilds, loaded from their sources before the writes are
    replayed and kept in temporaries: a write to the place they were read from (`self.cache =
    new`, the popped list replaced) must not change what they are, as in eager. At a graph
    break (`at_break`) always: the instruction that runs for real may write there too
    (`lr = opt.param_groups[0]["lr"]` before `sched.step()`)."""
    effects = output.side_effects
    if not at_break and not (
        effects.attrs or effects.containers or effects.globals or effects.cells
    ):
        return
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        vt = todo.pop()
        if id(vt) in seen:
            continue
        seen.add(id(vt))
        source = getattr(vt, "source", None)
        if isinstance(source, (AttrSource, ItemSource, GlobalSource, FreeVarSource)):
            cg.reconstruct(vt)
            cg.remember(vt)
        elif isinstance(vt, SymNodeVariable) and vt.node in cg.python_values:
            # a symbolic int the code computes from the places it was read from (`st.step +
            # 1`, OutputGraph.sizes_in_python): computed now, before they are written
            cg.python_value(vt.node)
        todo += _parts(vt)


def _compile_graph(
    code: types.CodeType,
    output: OutputGraph,
    outputs: list[TensorVariable],
    backend: Any,
    cg: CodeGen,
) -> list[CapturedGraph]:
    """Compile the graph captured so far (if it does anything) and emit the code calling it."""
    if not outputs and output.only_symbolic_ops():
        return []  # nothing, or only conditions on sizes the trace already decided
    in_python = output.sizes_in_python(outputs)
    if in_python is not None:  # integer arithmetic only: computed by the code, no graph
        cg.python_values.update(in_python)
        return []
    graph = output.graph
    graph.output(tuple(o.node for o in outputs))
    output.prune_symbolic()
    inputs, values = _used_inputs(output)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph, class_name=f"{code.co_name}_graph")
    _log_graph(code, gm, inputs)
    grad_mode = torch.is_grad_enabled()
    try:
        with ignoring_non_leaf_grad():  # a backend's FakeTensors of the inputs read their .grad
            compiled = backend(gm, values)
    finally:  # a backend that runs the graph (make_fx) runs its grad-mode nodes too
        torch._C._set_grad_enabled(grad_mode)
    if not callable(compiled):
        raise TypeError(
            f"backend {backend!r} returned {type(compiled).__name__}, expected a callable"
        )
    if output.warns:  # its ops' warnings are replayed at the user's lines (replay_op_warnings)
        compiled = _quietly(compiled)
    cg.output_index = {o.node: i for i, o in enumerate(outputs)}
    # If the graph raises at run time, the frame runs again eagerly (codegen.GraphError), unless
    # the graph writes to an input: a failed run may have half-written it.
    rerun = None if _writes_inputs(gm) else EagerRerun(output.fn)
    cg.call_graph(compiled, inputs, GraphError(output.state_at_entry, rerun))
    return [CapturedGraph(gm, [str(s) for s in inputs], output.op_count())]


def _used_inputs(output: OutputGraph) -> tuple[list[Source], list[Any]]:
    """The graph's inputs, less the tensors no node uses (a list's item the trace only guarded,
    a tensor whose static sizes alone were read, an input returned as it is): those are erased
    from the graph, so the backend does not take them and the call does not pass them. Their
    guards stay. A tensor with symbolic sizes is kept: its placeholder binds the symbols."""
    inputs: list[Source] = []
    values: list[Any] = []
    for (source, node), value in zip(output.placeholders, output.input_values):
        fake = node.meta.get("val")
        if not node.users and isinstance(fake, torch.Tensor) and not _symbolic(fake):
            output.graph.erase_node(node)
            continue
        inputs.append(source)
        values.append(value)
    return inputs, values


def _symbolic(fake: torch.Tensor) -> bool:
    return any(
        isinstance(n, torch.SymInt) for n in (*fake.shape, *fake.stride(), fake.storage_offset())
    )


_QUIET_LOCK = threading.RLock()


def _quietly(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """`compiled` run with warnings ignored: the graph's ops gave theirs while tracing, and they
    are replayed after it where eager gives them."""

    def run_quietly(*args: Any) -> Any:
        # the filter is process-wide: two threads interleaving their enter and exit could
        # leave "ignore" installed for good, so these runs take turns
        with _QUIET_LOCK, ignoring_warnings():
            return compiled(*args)

    return run_quietly


def _writes_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether running the graph may write to the memory of one of its inputs (or of a view of
    one): a tensor a node may write (`written_tensors`) over an input's storage. Unknown storage
    counts as written."""
    inputs = {
        storage_key(n.meta.get("val"))
        for n in gm.graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    }
    for node in gm.graph.nodes:
        for t in written_tensors(node):
            key = storage_key(t)
            if key is None or key in inputs:
                return True
    return False


def _entry(
    fn: types.FunctionType,
    code: types.CodeType,
    output: OutputGraph,
    cg: CodeGen,
    argnames: tuple[str, ...],
    graphs: list[CapturedGraph],
) -> CacheEntry:
    new_code = cg.finish()
    guards = [_global_state_guard(output), *output.guards, *output.shape_guards()]
    guards += output.aliasing_guards()
    guards += output.object_aliasing_guards()
    guards += output.absence_guards()
    compiled_guards = compile_guards(guards, argnames, name=f"guard_{code.co_name}")
    new_fn = types.FunctionType(
        new_code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__
    )
    new_fn.__kwdefaults__ = fn.__kwdefaults__
    _log_code(code, new_code, compiled_guards)
    return CacheEntry(compiled_guards, new_fn, new_code, [g.gm for g in graphs])


def _frame_cells(cells: dict[str, Any]) -> dict[str, CellVariable]:
    """The frame's own cells that the trace models (CellVariable), by name."""
    return {name: c for name, c in cells.items() if isinstance(c, CellVariable)}


def _finish(
    fn: types.FunctionType,
    code: types.CodeType,
    output: OutputGraph,
    tx: Any,
    result: VariableTracker,
    backend: Any,
    argnames: tuple[str, ...],
) -> tuple[CacheEntry, list[CapturedGraph]]:
    settle_at_end(output)
    output.side_effects.replay_out_of_order(output)
    outputs: list[TensorVariable] = []
    for vt in [result, *output.side_effects.values()]:
        _collect_outputs(vt, outputs)
    cg = CodeGen(code, tx.lineno)
    cg.frame_cells = {id(c): name for name, c in _frame_cells(tx.cells).items()}
    graphs = _compile_graph(code, output, outputs, backend, cg)
    _load_before_writes(output, cg, [result, *output.side_effects.values()])
    _emit_state_after_graph(output, cg)
    cg.return_value(result)
    return _entry(fn, code, output, cg, argnames, graphs), graphs


def _finish_break(
    fn: types.FunctionType,
    code: types.CodeType,
    output: OutputGraph,
    gb: GraphBreak,
    backend: Any,
    argnames: tuple[str, ...],
    wrap_resume: Callable[[types.FunctionType], Any],
) -> tuple[CacheEntry, list[CapturedGraph]]:
    """Graph so far -> the break instruction, run for real -> resume function(s).

    Inside a `try`/`with` range the instruction runs under a copy of the range's handler, with
    the live locals in their own slots, so an exception it raises is handled as in eager (the
    frame then goes on as plain Python); the resume functions carry the handlers themselves."""
    output.side_effects.replay_out_of_order(output)
    frame_cells = _frame_cells(gb.cells)
    cell_values = [c.contents for c in frame_cells.values() if c.contents is not None]
    roots = [*gb.stack, *gb.locals.values(), *cell_values, *output.side_effects.values()]
    settle_at_break(output, roots, kept_stack(gb))  # generators live after the break
    outputs: list[TensorVariable] = []
    for vt in roots:
        _collect_outputs(vt, outputs)
    for vt in reversed(gb.stack):  # autocast blocks the break interrupts: the graph leaves them
        if isinstance(vt, AutocastExitVariable):
            vt.ctx.close_in_graph(output)
    # the line of the instruction that breaks, in this frame (a break inside an inlined call
    # is located in the callee; tracebacks through this frame must show the call's line)
    positions = getattr(gb.inst, "positions", None)
    lineno = (positions.lineno if positions is not None else None) or (
        gb.reason.location.lineno if gb.reason.location else code.co_firstlineno
    )
    cg = CodeGen(code, lineno)
    cg.frame_cells = {id(c): name for name, c in frame_cells.items()}
    graphs = _compile_graph(code, output, outputs, backend, cg)
    _load_before_writes(output, cg, roots, at_break=True)
    _emit_state_after_graph(output, cg)  # the instruction that runs for real sees it
    for name, cell in frame_cells.items():  # closures and the resume function share the cells
        cg.store_frame_cell(name, cell.contents)
    inst = gb.inst
    # A resume function's own ___stack arguments are dead once its prologue pushed them.
    live: list[tuple[str, VariableTracker]] = [
        (name, vt)
        for name, vt in gb.locals.items()
        if vt is not NULL and not name.startswith("___stack")
    ]
    handler = body_and_handler(code, inst.offset) if gb.run_instruction else None
    local_values: list[VariableTracker | str] = [vt for _, vt in live]
    if handler is not None:  # the copied handler code reads the locals from their slots
        # every value built before any slot is written: one may read another's slot (a
        # deferred `total + v` reads the argument `total`)
        stored = [(n, vt) for n, vt in live if getattr(vt, "source", None) != _plain_local(n)]
        for _, vt in stored:
            cg.reconstruct(vt)
        for name, _ in reversed(stored):
            cg.emit(Instr("STORE_FAST", name))
        for name in argnames:  # an argument the frame deleted is unbound there too
            # (not a resume function's saved stack item: its prologue moves it onto the stack,
            # and the transformed code reloads it from the slot it still holds there)
            if name not in gb.locals and name not in code.co_cellvars and not is_stack_slot(name):
                cg.emit(Instr("DELETE_FAST", name))
        local_values = [name for name, _ in live]
    callee = _callee_index(gb) if gb.run_instruction else None
    if callee is not None and _called_as_it_is(_callee_function(gb.stack[callee]), code):
        callee = None  # an optimizer step, autograd, torch's own code: called as it is
    for i, vt in enumerate(gb.stack):
        cg.reconstruct(vt, wrap_function=wrap_resume if i == callee else None)

    held = frozenset(id(vt) for _, vt in live)  # an iterator a local holds too

    def resume_at(offset: int, layout: list[VariableTracker | None]) -> None:
        kinds = tuple(stack_kind(item, held) for item in layout)
        rcode = resume_code(code, offset, kinds, tuple(name for name, _ in live))
        target = resume_function(fn, rcode)
        if resume_depth(rcode) <= config.max_resume_depth:
            target = wrap_resume(target)
        else:  # a long chain (a loop that breaks): the rest runs as Python, hook or not
            target._framejit_disabled = True
        decoded = decode(code)
        at = decoded.instructions[decoded.index_of[offset]] if offset in decoded.index_of else None
        # at the instruction the resume function starts from: a traceback through this frame
        # then shows the line that raised, not the one that broke the graph
        with cg.branch(), cg.at_positions(getattr(at, "positions", None)):
            cg.call_resume(target, kinds, local_values)

    if handler is not None:
        cg.append_items([handler[1]])
    next_offset = decode(code).next_offset.get(inst.offset, -1)  # none after a final raise
    if not gb.run_instruction:  # the resume function starts at the instruction itself
        resume_at(resume_offset(decode(code), inst.offset), list(gb.stack))
    elif inst.opname in TRUTH_JUMPS:
        rest: list[VariableTracker | None] = list(kept_stack(gb))
        jump = cg.pop_jump_if(TRUTH_JUMPS[inst.opname])
        _end_try(cg, handler)
        resume_at(next_offset, rest)
        cg.place(jump)
        resume_at(inst.argval, rest)
    else:
        cg.run_original(inst, gb.kw_names)
        if inst.opname == "BEFORE_WITH":  # the exit is called for real, never traced
            cg.wrap_with_exit()
        _end_try(cg, handler)
        if inst.opname != "RAISE_VARARGS":
            layout, _ = layout_after(gb)
            after = decode(code).instructions[decode(code).index_of[next_offset]]
            if after.opname == "POP_TOP" and layout[-1] is None:
                # A result thrown away (print's None): drop it here, so the resume function
                # does not see (and guard) it.
                cg.emit(Instr("POP_TOP"))
                layout.pop()
                next_offset = tx_next_offset(code, next_offset)
            resume_at(next_offset, layout)
    if handler is not None:
        cg.append_items(handler[0])
    return _entry(fn, code, output, cg, argnames, graphs), graphs


def _plain_local(name: str) -> Source:
    from framejit.frontend.sources import LocalSource

    return LocalSource(name)


def _end_try(cg: CodeGen, handler: tuple[list[Any], Any] | None) -> None:
    if handler is not None:
        from bytecode import TryEnd

        cg.append_items([TryEnd(handler[1])])


def _emit_state_after_graph(output: OutputGraph, cg: CodeGen) -> None:
    """Replay Python writes; leave grad mode as the traced code left it."""
    output.side_effects.emit(cg)
    if output.grad_at_exit != torch.is_grad_enabled():
        cg.call_const(torch._C._set_grad_enabled, lambda: cg.load_const(output.grad_at_exit), 1)
        cg.emit(Instr("POP_TOP"))


def _called_as_it_is(fn: Any, caller: types.CodeType) -> bool:
    """A break's callee that is not compiled on its own: what the frame hook would never
    compile either (torch, the standard library, tool packages), torch's Python-only code, and
    the frame's own function called recursively (the `jit` wrapper around each level would
    take several Python frames per level of the user's recursion)."""
    from framejit.frontend.hook import skipped_by_rule

    if runs_as_python(fn):
        return True
    plain = getattr(fn, "__func__", fn)
    if getattr(plain, "__code__", None) is caller:
        return True
    return isinstance(plain, types.FunctionType) and bool(skipped_by_rule(plain))


def _callee_function(vt: VariableTracker) -> Any:
    """The plain function a break's callee stands for (None for anything else)."""
    fn = getattr(vt, "fn", None)
    return getattr(fn, "fn", fn)


def _callee_index(gb: GraphBreak) -> int | None:
    """Stack index of the callable a breaking CALL or CALL_FUNCTION_EX invokes (it is then
    compiled on its own): `fn(*args, **kwargs)` in a wrapper hands `fn` over too."""
    if gb.inst.opname == "CALL_FUNCTION_EX":
        from framejit.frontend.variables.functions import (
            UserFunctionVariable,
            UserMethodVariable,
        )

        index = len(gb.stack) - 2 - (gb.inst.arg & 1)  # below the args tuple (and kwargs)
        # plain functions and methods only: a module called as `module(*args)` is framejit's
        # own whole-module call (api.py's _call_module), which must not be wrapped again
        ok = index >= 0 and isinstance(gb.stack[index], (UserFunctionVariable, UserMethodVariable))
        return index if ok else None
    if gb.inst.opname != "CALL":
        return None
    first = len(gb.stack) - gb.inst.arg - 2
    return first + 1 if gb.stack[first] is NULL else first


def tx_next_offset(code: types.CodeType, offset: int) -> int:
    from framejit.frontend.translator import decode

    return decode(code).next_offset[offset]


def _log_graph(code: types.CodeType, gm: torch.fx.GraphModule, inputs: list[Source]) -> None:
    if logs.enabled("graph"):
        logs.artifact("graph", lambda: f"graph of {code.co_qualname}:\n{graph_table(gm)}")
    if logs.enabled("graph_code"):
        logs.artifact(
            "graph_code",
            lambda: f"# graph of {code.co_qualname}\n{gm.code.strip()}",
            language="python",
        )


def _log_code(code: types.CodeType, new_code: types.CodeType, guards: Any) -> None:
    if logs.enabled("bytecode"):
        logs.artifact(
            "bytecode",
            lambda: (
                f"original bytecode of {code.co_qualname} ({code.co_filename}:"
                f"{code.co_firstlineno}):\n{_dis(code)}\ntransformed bytecode:\n{_dis(new_code)}"
            ),
        )
    if logs.enabled("guards"):
        logs.artifact("guards", lambda: guard_report(code, guards))


def _dis(code: types.CodeType) -> str:
    buf = io.StringIO()
    dis.dis(code, file=buf, depth=0)
    return buf.getvalue()


def guard_report(code: types.CodeType, guards: Any) -> str:
    lines = [f"guards of {code.co_qualname} ({len(guards.guards)}):"]
    for g in guards.guards:
        lines.append(f"  {g}" + (f"    # {g.origin}" if g.origin else ""))
    return "\n".join(lines)


def graph_table(gm: torch.fx.GraphModule) -> str:
    rows = [("opcode", "name", "target", "args", "kwargs")]
    for n in gm.graph.nodes:
        target = (
            n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        )
        rows.append((n.op, n.name, str(target), str(n.args), str(n.kwargs)))
    widths = [min(60, max(len(r[i]) for r in rows)) for i in range(5)]
    out = []
    for j, r in enumerate(rows):
        out.append("  ".join(c[:60].ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
