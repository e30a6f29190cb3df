"""Python-visible writes seen while tracing, replayed after the graph runs.

The translator never mutates real objects. When traced code writes an attribute of an object
from outside the frame, changes a list or dict passed in, assigns a global or a closure cell of
an enclosing function, or calls a logging/warnings function, the write is recorded here; later
reads in the same trace see the recorded value. The transformed code replays the final state
after the graph (and before a graph break's instruction, so code that runs for real sees it):

    attribute writes   obj.name = value            (in the order they were first made)
    list/dict contents lst[:] = [...]; dict cleared and refilled
    globals            STORE_GLOBAL name
    closure cells      cell.cell_contents = value
    logging/warnings   the recorded calls, in order, with the same arguments

Invariant: replaying the final state is equivalent to the writes made in order, because nothing
outside the frame can observe the intermediate states while the frame runs.
"""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from typing import TYPE_CHECKING, Any

import torch
from bytecode import FreeVar, Instr
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import Source
from framejit.frontend.variables.base import (
    ConstantVariable,
    ExternalCallableVariable,
    VariableTracker,
    change_count,
    note_change,
)
from framejit.guards.guard import storage_key

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.output_graph import OutputGraph
    from framejit.frontend.translator import Translator


class ReplayOutOfOrder(Unsupported):
    """A recorded call would be replayed after a change it must not see (a logging call whose
    list argument is appended to later in the graph): trace the frame again with a graph break
    at that call (`where`: its code and instruction offset), so it runs where eager runs it."""

    def __init__(self, where: tuple[Any, int], why: str) -> None:
        code, offset = where
        super().__init__("side_effect", f"a call at {code.co_qualname} offset {offset}", why)
        self.where = where


# Module-level functions whose calls are recorded and replayed instead of traced.
REPLAYED_FUNCTIONS = {
    warnings.warn,
    logging.debug,
    logging.info,
    logging.warning,
    logging.error,
    logging.critical,
    logging.exception,
    logging.log,
}
LOGGER_METHODS = frozenset(
    {
        "debug",
        "info",
        "warning",
        "warn",
        "error",
        "exception",
        "critical",
        "fatal",
        "log",
        "warning_once",
        "info_once",
    }
)


class ReplayedCallVariable(ExternalCallableVariable):
    """A logging or warnings function: calling it records the call for replay."""

    label = "Replayed"

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        where = (tx.code, tx.inst.offset)
        if where in tx.output.calls_run_in_place:
            raise Unsupported(
                "side_effect",
                f"{getattr(self.fn, '__qualname__', 'a logging call')}(...)",
                "what it reads changes later in the graph: it runs where it is",
            )
        effects = tx.output.side_effects
        effects.call_marks[len(effects.calls)] = (where, change_count(), len(tx.output.created))
        if self.fn is warnings.warn:
            located = _located_warning(tx, args, kwargs)
            if located is not None:
                tx.output.side_effects.calls.append((*located, tx.lineno))
                return ConstantVariable(None)
        logger, method = _logging_call(self.fn)
        if logger is not None and _reads_exc_info(method, kwargs) and _handles_traced(tx):
            # the replay runs after the graph, outside the clause: it would log no exception
            raise Unsupported(
                "side_effect",
                f"logging.{method}(...) in an `except` clause",
                "it logs the exception being handled, which only the running code has",
            )
        if logger is not None and tx.parent is not None:
            # logged in a function the trace inlined: the record names its file, line and
            # function (`%(funcName)s`, `%(filename)s:%(lineno)d`), not the compiled frame's
            where = functools.partial(
                log_at,
                logger,
                method,
                filename=tx.code.co_filename,
                lineno=tx.lineno,
                func=tx.code.co_name,
                root=self.fn is getattr(logging, method, None),
            )
            tx.output.side_effects.calls.append(
                (ConstantVariable(where), list(args), dict(kwargs), tx.lineno)
            )
            return ConstantVariable(None)
        tx.output.side_effects.calls.append((self, list(args), dict(kwargs), tx.lineno))
        return ConstantVariable(None)


def _reads_exc_info(method: str, kwargs: dict[str, VariableTracker]) -> bool:
    """Does this logging call log `sys.exc_info()` (`logger.exception(...)`, `exc_info=True`)?"""
    exc_info = kwargs.get("exc_info")
    if exc_info is None:
        return method == "exception"
    if not exc_info.is_constant():
        return False  # an exception or a tuple: rebuilt for the replay, or a break there
    value = exc_info.as_constant()
    return bool(value) and not isinstance(value, (tuple, BaseException))


def _handles_traced(tx: Translator) -> bool:
    """Is the traced code inside an `except` clause or `with` exit that it entered while
    tracing (in its frame or a caller it inlined), or in one a resume function began inside?"""
    t: Any = tx
    while t is not None:
        if getattr(t, "handled", None) or getattr(t, "handled_unknown", False):
            return True
        t = t.parent
    return False


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
    "log": None,
}


def _logging_call(fn: Any) -> tuple[logging.Logger | None, str]:
    """(the logger, the method) of a standard logging call: `logger.info`, `logging.warning`."""
    name = getattr(fn, "__name__", "")
    if name not in _LEVELS:
        return None, ""
    owner = getattr(fn, "__self__", None)
    if type(owner) is logging.Logger or type(owner) is logging.RootLogger:
        if getattr(type(owner), name, None) is getattr(logging.Logger, name, None):
            return owner, name
        return None, ""
    if fn is getattr(logging, name, None):
        return logging.root, name
    return None, ""


def log_at(
    logger: logging.Logger,
    method: str,
    *args: Any,
    filename: str,
    lineno: int,
    func: str,
    root: bool,
    **kwargs: Any,
) -> None:
    """A logging call made in a frame the trace inlined, as that frame would have made it:
    the same level, message, arguments and options, the record located at its line."""
    if root and not logging.root.handlers:
        logging.basicConfig()  # as logging.info() and friends do
    level = _LEVELS[method]
    if level is None:
        level, *args = args  # type: ignore[assignment]
    msg, *rest = args
    if not logger.isEnabledFor(level):
        return
    exc_info = kwargs.pop("exc_info", True if method == "exception" else None)
    extra = kwargs.pop("extra", None)
    stack_info = kwargs.pop("stack_info", False)
    kwargs.pop("stacklevel", None)
    if kwargs:
        raise TypeError(f"unexpected keyword arguments for Logger.{method}: {sorted(kwargs)}")
    if exc_info:
        if isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        elif not isinstance(exc_info, tuple):
            exc_info = sys.exc_info()
    sinfo = None
    if stack_info:
        import traceback

        sinfo = "Stack (most recent call last):\n" + "".join(traceback.format_stack()).rstrip()
    record = logger.makeRecord(
        logger.name, level, filename, lineno, msg, tuple(rest), exc_info, func, extra, sinfo
    )
    logger.handle(record)


_WARN_PARAMS = ("message", "category", "stacklevel", "source")


def _located_warning(
    tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> tuple[VariableTracker, list[VariableTracker], dict[str, VariableTracker]] | None:
    """`warnings.warn(message, category, stacklevel)` replayed where eager attributes it: the
    frame `stacklevel` levels up from the caller, which may be a function the trace inlined
    (gone at run time: its file and line are known now) or a frame above the compiled one
    (found at run time, past framejit's own frames). None: replayed as it was called."""
    if len(args) > len(_WARN_PARAMS) or set(kwargs) - set(_WARN_PARAMS):
        return None  # skip_file_prefixes (3.12) and the like: as called
    bound = dict(zip(_WARN_PARAMS, args)) | kwargs
    level_vt = bound.get("stacklevel", ConstantVariable(1))
    if not level_vt.is_constant() or not isinstance(level_vt.as_constant(), int):
        return None
    level = max(level_vt.as_constant(), 1)
    message = bound["message"] if "message" in bound else ConstantVariable(None)
    category = bound.get("category", ConstantVariable(None))
    source = bound.get("source", ConstantVariable(None))
    chain = []
    frame: Any = tx
    while frame is not None:
        chain.append(frame)
        frame = frame.parent
    if level <= len(chain):
        at = chain[level - 1]
        where = functools.partial(
            warn_at, filename=at.code.co_filename, lineno=at.lineno, module_globals=at.f_globals
        )
    else:
        where = functools.partial(warn_above, levels=level - len(chain))
    return ConstantVariable(where), [message, category, source], {}


def warn_at(
    message: Any,
    category: Any,
    source: Any,
    *,
    filename: str,
    lineno: int,
    module_globals: dict[str, Any],
) -> None:
    """`warnings.warn` as seen from a frame the trace inlined."""
    if isinstance(message, Warning):
        category = type(message)
    registry = module_globals.setdefault("__warningregistry__", {})
    module = module_globals.get("__name__", "<string>")
    # no module_globals: 3.12's warn_explicit would warn about a script's globals lacking
    # __spec__.loader; the source line is read from the file, as for eager's warning
    warnings.warn_explicit(
        message, category or UserWarning, filename, lineno, module, registry, None, source
    )


def warn_above(message: Any, category: Any, source: Any, *, levels: int) -> None:
    """`warnings.warn` attributed to the frame `levels` levels above the compiled one (its
    caller's frames at run time, past framejit's wrappers; a resume function and the compiled
    frame that called it are one frame of the user's)."""
    frame: Any = sys._getframe(1)
    for _ in range(levels):
        frame = _user_caller(frame)
        if frame is None:
            warnings.warn(message, category, stacklevel=1, source=source)
            return
    warn_at(
        message,
        category,
        source,
        filename=frame.f_code.co_filename,
        lineno=frame.f_lineno,
        module_globals=frame.f_globals,
    )


def _user_caller(frame: Any) -> Any:
    from framejit.frontend.breaks import resumes

    resumed = resumes(frame.f_code)
    frame = frame.f_back
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith("framejit"):
        frame = frame.f_back
    if resumed and frame is not None:  # the transformed frame that called the resume function
        return _user_caller(frame)
    return frame


def _replace_dict(target: dict[Any, Any], new: dict[Any, Any]) -> None:
    target.clear()
    target.update(new)


def _reachable(vt: VariableTracker, out: list[VariableTracker], depth: int = 0) -> None:
    """`vt` and what a call that receives it can read: items of lists, tuples and dicts,
    attributes of objects made in the frame."""
    if depth > 8 or any(v is vt for v in out):
        return
    out.append(vt)
    items = getattr(vt, "items", None)
    if isinstance(items, dict):
        children = list(items.values())
    elif isinstance(items, (list, tuple)):
        children = list(items)
    else:
        children = []
    attrs = getattr(vt, "attrs", None)
    if isinstance(attrs, dict):
        children += list(attrs.values())
    for child in children:
        if isinstance(child, VariableTracker):
            _reachable(child, out, depth + 1)


# Methods that may return their input itself but never write to it.
_RETURNS_SELF_UNWRITTEN = frozenset(
    {"contiguous", "to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long"}
    | {"short", "bool", "cpu", "cuda", "view_as", "expand_as", "reshape_as"}
)


def written_tensors(node: Any) -> list[torch.Tensor]:
    """The tensors (fake values) a graph node may write: the tensor arguments it returns as its
    result (in place, `out=`), or all of them for an op that returns nothing (setitem)."""
    from torch.utils._pytree import tree_leaves

    if node.op not in ("call_function", "call_method", "call_module"):
        return []
    tensors = [
        a.meta["val"]
        for a in tree_leaves((node.args, node.kwargs))
        if hasattr(a, "meta") and isinstance(a.meta.get("val"), torch.Tensor)
    ]
    value = node.meta.get("val")
    if value is None:
        return tensors
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if name in _RETURNS_SELF_UNWRITTEN:
        return []
    results = {id(v) for v in tree_leaves(value)}
    return [t for t in tensors if id(t) in results]


class SideEffects:
    def __init__(self) -> None:
        # id(object VT) -> (object VT, {attribute: value VT}); insertion order = first write
        self.attrs: dict[int, tuple[VariableTracker, dict[str, VariableTracker]]] = {}
        self.containers: dict[int, VariableTracker] = {}  # lists/dicts from outside, changed
        self.globals: dict[str, VariableTracker] = {}
        self.cells: dict[Source, tuple[str | None, VariableTracker]] = {}
        # (function, args, kwargs, the user line of the call)
        self.calls: list[
            tuple[VariableTracker, list[VariableTracker], dict[str, VariableTracker], int]
        ] = []
        # index in `calls` of a logging/warnings call -> (its code and offset, change_count()
        # and the number of graph nodes when it was made): see replay_out_of_order
        self.call_marks: dict[int, tuple[tuple[Any, int], int, int]] = {}

    def snapshot(self) -> tuple[Any, ...]:
        """What `restore` needs to forget every record made after this point (an instruction
        rewound at a break runs for real, with its own side effects)."""
        return (
            {k: (obj, dict(attrs)) for k, (obj, attrs) in self.attrs.items()},
            dict(self.containers),
            dict(self.globals),
            dict(self.cells),
            len(self.calls),
        )

    def restore(self, snap: tuple[Any, ...]) -> None:
        attrs, containers, globals_, cells, n_calls = snap
        self.attrs = {k: (obj, dict(a)) for k, (obj, a) in attrs.items()}
        self.containers = dict(containers)
        self.globals = dict(globals_)
        self.cells = dict(cells)
        del self.calls[n_calls:]
        for k in [k for k in self.call_marks if k >= n_calls]:
            del self.call_marks[k]

    # --- recording ------------------------------------------------------------------------------
    def store_attr(self, obj: VariableTracker, name: str, value: VariableTracker) -> None:
        if obj.source is None:
            raise Unsupported("side_effect", f"setting .{name} on an object with no source")
        note_change(obj)
        self.attrs.setdefault(id(obj), (obj, {}))[1][name] = value

    def replay_out_of_order(self, output: OutputGraph) -> None:
        """Raise ReplayOutOfOrder for the first logging/warnings call that its replay after
        the graph would show a later state than eager shows: an argument (or an object or
        list in it) changed after the call, an argument tensor written in place after it, or
        the logger or the warnings filters changed after it. Replaying final states is
        equivalent to the writes in order only while nothing reads the states in between;
        these calls read them."""
        for index, (where, changes, nodes) in self.call_marks.items():
            fn, args, kwargs, _ = self.calls[index]
            seen: list[VariableTracker] = []
            for vt in [fn, *args, *kwargs.values()]:
                _reachable(vt, seen)
            real = getattr(fn, "fn", None)
            for obj in (getattr(real, "__self__", None), warnings.filters):
                known = output.objects_by_id.get(id(obj)) if obj is not None else None
                if known is not None:
                    seen.append(known[1])
            if any(getattr(vt, "_changed_at", 0) > changes for vt in seen):
                raise ReplayOutOfOrder(where, "an object it reads changes later in the graph")
            storages = {storage_key(vt.fake) for vt in seen if hasattr(vt, "fake")}
            storages.discard(None)
            if storages and any(
                storage_key(t) in storages
                for node in output.created[nodes:]
                for t in written_tensors(node)
            ):
                raise ReplayOutOfOrder(where, "a tensor it reads is written later in the graph")

    def class_attr(self, cls: type, name: str) -> VariableTracker | None:
        """A write to `name` on the class `cls` recorded so far (from any of its trackers)."""
        from framejit.frontend.variables.objects import ClassVariable

        for obj, attrs in self.attrs.values():
            if name in attrs and isinstance(obj, ClassVariable) and obj.cls is cls:
                return attrs[name]
        return None

    def load_attr(self, obj: VariableTracker, name: str) -> VariableTracker | None:
        entry = self.attrs.get(id(obj))
        return entry[1].get(name) if entry is not None else None

    def changed_container(self, vt: VariableTracker) -> None:
        self.containers[id(vt)] = vt

    def values(self) -> list[VariableTracker]:
        """Every VT the replay will rebuild (their tensors must be graph outputs)."""
        out: list[VariableTracker] = []
        for obj, attrs in self.attrs.values():
            out += [obj, *attrs.values()]
        for vt in self.containers.values():
            if getattr(vt, "contents_read", True):
                out += list(vt.items.values()) if hasattr(vt.items, "values") else list(vt.items)
            else:
                out += list(vt.appended)
        out += list(self.globals.values())
        out += [v for _, v in self.cells.values()]
        for fn, args, kwargs, _ in self.calls:
            out += [fn, *args, *kwargs.values()]
        return out

    # --- replay ---------------------------------------------------------------------------------
    def emit(self, cg: CodeGen) -> None:
        from framejit.frontend.variables.containers import DictVariable, ListVariable

        for obj, attrs in self.attrs.values():
            for name, value in attrs.items():
                cg.reconstruct(value)
                cg.reconstruct(obj)
                cg.emit(Instr("STORE_ATTR", name))
        for vt in self.containers.values():
            if isinstance(vt, ListVariable) and not vt.contents_read:
                cg.reconstruct(vt)  # the real list, through its source: extend it
                cg.load_attr("extend")
                for item in vt.appended:
                    cg.reconstruct(item)
                cg.build(list, len(vt.appended))
                cg.call_on_top_with_arg()
            elif isinstance(vt, ListVariable):
                for item in vt.items:
                    cg.reconstruct(item)
                cg.build(list, len(vt.items))
                cg.reconstruct(vt)  # the real list, through its source
                cg.load_const(slice(None))
                cg.emit(Instr("STORE_SUBSCR"))
            elif isinstance(vt, DictVariable):
                cg.call_const(
                    _replace_dict,
                    lambda vt=vt: (cg.reconstruct(vt), DictVariable(vt.items).reconstruct(cg)),
                    2,
                )
                cg.emit(Instr("POP_TOP"))
        for name, value in self.globals.items():
            cg.reconstruct(value)
            cg.emit(Instr("STORE_GLOBAL", name))
        for source, (freevar, value) in self.cells.items():
            cg.reconstruct(value)
            if freevar is not None:  # a free variable of the frame itself
                cg.emit(Instr("STORE_DEREF", FreeVar(freevar)))
            else:
                source.emit_load(cg)
                cg.emit(Instr("STORE_ATTR", "cell_contents"))
        for fn, args, kwargs, line in self.calls:
            cg.line_override = line
            cg.push_null()
            cg.reconstruct(fn)
            for a in args:
                cg.reconstruct(a)
            for v in kwargs.values():
                cg.reconstruct(v)
            cg.emit_call(len(args) + len(kwargs), tuple(kwargs))
            cg.emit(Instr("POP_TOP"))
            cg.line_override = None
