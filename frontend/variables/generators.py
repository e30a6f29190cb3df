"""Generators made inside the traced frame, run lazily as Python runs them.

Calling a generator function that the translator inlines makes a `GeneratorVariable` that holds
the generator's own, suspended child Translator. Each `next()` (FOR_ITER, `next(g)`,
`enumerate(g)`'s next item) resumes the child up to its next YIELD_VALUE, so what the generator
does and what its consumer does between two items happen in Python's order: a generator that
appends to a list its consumer reads sees the consumer's state, and the other way round.
`list(g)`, `sum(g)`, `tuple(g)`, star-unpacking and the like drain it at once, as Python does.

A suspended generator cannot be rebuilt as a real generator after the graph (CPython has no way to
make a frame stopped at a given `yield`). So when one is still live at a graph break, or is
returned, or was left suspended inside a `try`/`with` of its own (whose `finally` Python runs
when the generator is closed), the translation is abandoned with `GeneratorEscapes`, and
`compile_frame` traces the frame again with that generator's code run as Python: its call is
then the graph break, and the resume function iterates over a real generator.

`enumerate`, `zip`, `map` and `filter` over a generator stay lazy too (`LazyIteratorVariable`).
"""

from __future__ import annotations

import functools
import operator
import types
import weakref
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.purity import scan
from framejit.frontend.variables.base import (
    ConstantVariable,
    ExceptionVariable,
    VariableTracker,
    note_undoable,
)
from framejit.frontend.variables.containers import IteratorVariable, TupleVariable
from framejit.frontend.variables.functions import BoundMethodVariable

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

MAX_ITEMS = 100_000  # items drained from one generator at once (`list(g)` of an endless one)


class GeneratorEscapes(Unsupported):
    """A generator made in the frame outlives what can be traced of it: trace the frame again
    with `code` (the generator function's code) run as Python."""

    def __init__(self, code: types.CodeType, why: str) -> None:
        super().__init__("generator", f"generator {code.co_qualname}", why)
        self.gen_code = code


class LazyIteratorVariable(VariableTracker):
    """An iterator whose items are computed when asked for, in the consumer's order."""

    looped = False  # FOR_ITER has taken items from it: the iterator of a `for` loop

    def next_item(self, tx: Translator) -> VariableTracker | None:
        """The next item, or None when the iterator is exhausted (StopIteration)."""
        raise NotImplementedError

    def python_type(self) -> type:
        return type(iter(()))

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        items: list[VariableTracker] = []
        while (item := self.next_item(tx)) is not None:
            items.append(item)
            if len(items) > MAX_ITEMS:
                raise Unsupported(
                    "generator", "an iterator yielding without end", f"over {MAX_ITEMS} items"
                )
        return items

    def truth(self, tx: Translator) -> bool:
        return True

    def reachable(self) -> list[VariableTracker]:
        """The values this iterator holds (for the graph's outputs at a break)."""
        return []

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__next__", "__iter__"):
            return BoundMethodVariable(self, name)  # its call comes back to call_method
        return super().getattr(tx, name)

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name in ("__next__", "__iter__") and not args and not kwargs:
            return _next_or_stop(tx, self) if name == "__next__" else self
        return super().call_method(tx, name, args, kwargs)


class GeneratorVariable(LazyIteratorVariable):
    """A generator object: the suspended translator of the generator function's frame."""

    NEW, SUSPENDED, DONE, RAISED, LOST = "new", "suspended", "done", "raised", "lost"
    DRAINED = "drained"  # run to its end ahead of a graph break; `drained` holds the items left
    DROPPED = "dropped"  # made by an instruction that a graph break rewound: it never existed

    def __init__(self, child: Translator, args: dict[str, VariableTracker] | None = None) -> None:
        self.child = child
        self.code = child.code
        self.args = dict(args or {})  # what it was called with, by parameter name
        self.yielded = 0  # items it has yielded
        self.state = self.NEW
        self.drained: IteratorVariable | None = None
        self.returned: VariableTracker = ConstantVariable(None)  # its `return` value, once done
        # may it be drained ahead of its consumer (drain_ahead)? Decided on what it was given
        self.why_not_drained = _why_not_drainable(child)
        # the translator whose `for` loop alone holds it (`for v in gen(x)`: made by the CALL
        # right before GET_ITER), where POP_TOP drops its last reference (`loop_iterator`)
        self.loop_of: Translator | None = None
        parent = child.parent
        self.made_at = parent.ip if parent is not None else -1  # the instruction after its CALL
        self.unclosed: str | None = None  # why a traced close() failed (check_left_open)
        child.output.generators.append(self)
        note_undoable(lambda: setattr(self, "state", self.DROPPED))

    def __repr__(self) -> str:
        return f"Generator({self.code.co_qualname}, {self.state})"

    def python_type(self) -> type:
        return types.GeneratorType

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("send", "close"):
            return BoundMethodVariable(self, name)
        return super().getattr(tx, name)

    def _set_state(self, state: str) -> None:
        self.state = state
        # A graph break that rewinds the instruction which advanced this generator cannot rewind
        # the generator's own frame: from then on its state is unknown, and it must run as Python.
        note_undoable(lambda: setattr(self, "state", self.LOST))

    def next_item(self, tx: Translator) -> VariableTracker | None:
        return self._resume(tx, ConstantVariable(None))

    def send_item(self, tx: Translator, sent: VariableTracker) -> VariableTracker | None:
        """`g.send(sent)`: the next item, or None once it returned (`self.returned`)."""
        if self.state == self.NEW and not (sent.is_constant() and sent.as_constant() is None):
            raise Unsupported("exception", "send() to a just-started generator", "TypeError")
        return self._resume(tx, sent)

    def _resume(self, tx: Translator, sent: VariableTracker) -> VariableTracker | None:
        if self.state in (self.DONE, self.RAISED):
            return None
        if self.state == self.DRAINED:
            assert self.drained is not None
            return self.drained.next()
        if self.state == self.LOST:
            raise GeneratorEscapes(self.code, "its state was lost at a graph break")
        child = self.child
        if self.state == self.SUSPENDED:
            child.stack[-1] = sent  # the value of the `yield` expression
        child.steps = tx.steps
        child.paused = False
        try:
            child.run()
        except Unsupported as exc:
            self._set_state(self.RAISED if exc.python_exception() is not None else self.LOST)
            if exc.python_exception() is StopIteration:
                # PEP 479: a StopIteration escaping a generator becomes a RuntimeError
                raise Unsupported("generator", "StopIteration raised inside a generator") from None
            raise
        finally:
            tx.steps = child.steps
        if child.paused:
            self._set_state(self.SUSPENDED)
            yielded = self.yielded
            self.yielded += 1
            note_undoable(lambda: setattr(self, "yielded", yielded))
            value, child.yield_value = child.yield_value, None
            return value
        self._set_state(self.DONE)
        if child.return_value is not None:
            self.returned = child.return_value
        return None

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "close" and not args and not kwargs:
            self.close(tx)
            return ConstantVariable(None)
        if name == "send" and len(args) == 1 and not kwargs:
            item = self.send_item(tx, args[0])
            if item is None:
                raise Unsupported("exception", "send() to an exhausted generator", "StopIteration")
            return item
        return super().call_method(tx, name, args, kwargs)

    def close(self, tx: Translator) -> None:
        """`close()` as Python runs it: GeneratorExit raised at the `yield` where the generator
        is suspended, so its own `finally` bodies and `with` exits run now, traced (their side
        effects take their place in the consumer's order). One that cannot be traced, or that
        yields again, raises GeneratorExit's escape: the generator then runs as Python."""
        if self.state == self.LOST:
            raise GeneratorEscapes(self.code, "its state was lost at a graph break")
        if self.state == self.NEW or (
            self.state == self.SUSPENDED and not _inside_block(self.child)
        ):
            self._set_state(self.DONE)
            return
        if self.state != self.SUSPENDED:
            return  # finished, or drained ahead (code without effects: nothing left to run)
        child = self.child
        if live_generators([*child.stack, *child.locals.values()]):
            # closing it drops the generators it iterates over (or delegates to with `yield
            # from`), each closed in its turn: not modelled
            self._escape("closed while it holds another generator")
        suspended_at = child.decoded.instructions[child.ip - 1].offset
        entry = child.decoded.handler_for(suspended_at)
        del child.stack[entry.depth :]
        if entry.lasti:
            child.push(ConstantVariable(suspended_at))
        exit_exc = ExceptionVariable(GeneratorExit, [])
        exit_exc.raised = True
        child.push(exit_exc)
        child.ip = child.decoded.index_of[entry.target]
        child.steps = tx.steps
        child.paused = False
        child.closing = True
        try:
            child.run()
        except Unsupported as exc:
            if exc.python_exception() is not GeneratorExit:
                self._escape(f"its close() ran what is not captured ({exc.describe()})")
        finally:
            tx.steps = child.steps
            child.closing = False
        if child.paused:  # Python: RuntimeError("generator ignored GeneratorExit")
            self._escape("it yielded again when closed")
        self._set_state(self.DONE)

    def _escape(self, why: str) -> None:
        self.unclosed = why  # the trace may go on past this instruction (a break at it)
        raise GeneratorEscapes(self.code, why)

    def reconstruct(self, cg: CodeGen) -> None:
        if self.state in (self.DONE, self.RAISED):
            cg.call_const(iter, lambda: cg.load_const(()), 1)  # an exhausted iterator
            return
        if self.state == self.DRAINED:
            assert self.drained is not None
            self.drained.reconstruct(cg)
            return
        raise GeneratorEscapes(self.code, "still running where the graph ends")

    def reachable(self) -> list[VariableTracker]:
        return [self.drained] if self.drained is not None else []

    def drain_ahead(self) -> None:
        """At a graph break, with this generator live and not finished: run it to its end now,
        inside the graph, and hand the rest of the frame an iterator over the items left. Only
        for a generator whose code has no effect (frontend/purity.py), that has no closure, was
        given only tensors and immutable constants, and draws no random numbers: what it yields
        then does not depend on when it runs. Any other raises GeneratorEscapes."""
        if self.state not in (self.NEW, self.SUSPENDED):
            return
        if self.why_not_drained is not None:
            raise GeneratorEscapes(self.code, f"live at a graph break ({self.why_not_drained})")
        output = self.child.output
        first = len(output.created)
        items: list[VariableTracker] = []
        watched = _tensors_in(list(self.args.values()))
        taken = self.yielded
        try:
            while True:
                if watched:
                    self._check_replayable(watched)
                item = self.next_item(self.child)
                if item is None:
                    break
                items.append(item)
                if len(items) > MAX_DRAINED:
                    raise Unsupported("generator", "a long generator", f"over {MAX_DRAINED} items")
        except Unsupported as exc:
            raise GeneratorEscapes(self.code, f"live at a graph break ({exc})") from None
        for node in output.created[first:]:
            if draws_random_numbers(node):
                why = f"live at a graph break (it draws random numbers: {node.target})"
                raise GeneratorEscapes(self.code, why)
        self.state = self.DRAINED
        if watched:
            self.drained = DrainedItemsVariable(items, watched, start=self, taken=taken)
        else:
            self.drained = IteratorVariable(items)

    def _check_replayable(self, watched: list[VariableTracker]) -> None:
        """Between two items, the generator may keep no tensor but the ones it was given and
        views of them: its next items then depend only on those (as they are when the items
        are taken) and on values that are not tensors, so a fresh run of it, with the items
        already taken skipped, yields what this one would (DrainedItems)."""
        from framejit.guards.guard import storage_key

        # views of those tensors are fine (`for row in x`): they show x's values as they are
        storages = {storage_key(w.fake) for w in watched} - {None}
        kept = [*self.child.locals.values(), *self.child.stack[:-1]]
        for t in _tensors_in(kept):
            if all(t is not w for w in watched) and storage_key(t.fake) not in storages:
                raise Unsupported("generator", "a generator that keeps tensors between items")

    def check_left_open(self) -> None:
        """Called when the trace ends: a generator suspended inside a `try`/`with` block of its
        own would run that block's `finally`/`__exit__` when Python closes it."""
        if self.unclosed is not None:
            raise GeneratorEscapes(self.code, self.unclosed)
        if self.state == self.SUSPENDED and _inside_block(self.child):
            raise GeneratorEscapes(self.code, "left suspended inside a try/with block")


MAX_DRAINED = 4096  # items a generator may yield when drained ahead of a graph break


def _tensors_in(vts: list[Any]) -> list[VariableTracker]:
    """The tensors among `vts` and inside the tuples, lists and dicts among them."""
    from framejit.frontend.variables.tensor import TensorVariable

    out: list[VariableTracker] = []
    todo, seen = list(vts), set()
    while todo:
        vt = todo.pop()
        if vt is None or id(vt) in seen:
            continue
        seen.add(id(vt))
        if isinstance(vt, TensorVariable):
            out.append(vt)
        items = getattr(vt, "items", None)
        if isinstance(items, list):
            todo.extend(items)
        elif isinstance(items, dict):
            todo.extend(items.values())
    return out


class DrainedItemsVariable(IteratorVariable):
    """The items left of a generator that was given tensors, drained ahead of a graph break.
    The consumer may change one of those tensors in place before it takes the next item (`x
    += 1` in the loop body), which a lazy generator would see. So each item taken in the trace
    first checks that none changed (their fake version counters); one that did ends the trace
    there (the frame runs as Python from its start). At run time it is a DrainedItems, which
    checks the real version counters the same way and, once one changed, runs the generator
    afresh. A resume function receives that object itself (`breaks.stack_kind`: "value") and
    sees it again as one of these (`wrap_drained`), with a guard that nothing changed."""

    def __init__(
        self,
        items: list[VariableTracker],
        watched: list[VariableTracker],
        start: GeneratorVariable | None = None,
        taken: int = 0,
        source: Any = None,
    ) -> None:
        super().__init__(items)
        self.watched = watched
        self.versions = [_fake_version(t) for t in watched]
        self.start, self.taken, self.source = start, taken, source

    def _before_taking(self) -> None:
        if any(_fake_version(t) != v for t, v in zip(self.watched, self.versions, strict=True)):
            raise Unsupported(
                "generator", "taking an item of a drained generator whose tensor was changed"
            )

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:  # the same object, the items the trace took skipped
            cg.call_const(
                DrainedItems.skip,
                lambda: (self.source.emit_load(cg), cg.load_const(self.index)),
                2,
            )
            return
        gen = self.start
        assert gen is not None
        names = list(gen.args)
        fn = types.FunctionType(gen.code, gen.child.f_globals, gen.code.co_name)
        start = functools.partial(start_generator, fn, names)
        taken = self.taken + self.index

        def emit() -> None:
            cg.load_const(start)
            cg.load_const(taken)
            TupleVariable(self.items[self.index :]).reconstruct(cg)
            TupleVariable(self.watched).reconstruct(cg)
            TupleVariable([gen.args[n] for n in names]).reconstruct(cg)

        cg.call_const(DrainedItems, emit, 5)


def _fake_version(t: Any) -> int:
    return int(t.fake._version)


def wrap_drained(tx: Translator, value: DrainedItems, source: Any) -> VariableTracker | None:
    """A DrainedItems handed to a resume function: its items left and the tensors it watches,
    read through `source`, while none of those changed (guarded); None when one did (then it
    is an opaque iterator, and a loop over it runs as Python)."""
    from framejit.frontend.sources import AttrSource, ItemSource, MethodCallSource
    from framejit.guards import GuardKind

    where = tx.location_text()
    tx.output.add_guard(source, GuardKind.TYPE_MATCH, DrainedItems, where)
    fresh = value.fresh()
    tx.output.add_guard(MethodCallSource(source, "fresh"), GuardKind.CONSTANT_MATCH, fresh, where)
    if not fresh:
        return None
    # items are read by their place in `items`, which skip() does not change (a trace's
    # sources are read again after it moved on)
    at, left = value.position(), value.left()
    tx.output.add_guard(MethodCallSource(source, "position"), GuardKind.CONSTANT_MATCH, at, where)
    tx.output.add_guard(MethodCallSource(source, "left"), GuardKind.CONSTANT_MATCH, left, where)
    every = AttrSource(source, "items")
    items = [tx.wrap_source(ItemSource(every, at + i)) for i in range(left)]
    watched = AttrSource(source, "watched")
    tensors = [tx.wrap_source(ItemSource(watched, i)) for i in range(len(value.watched))]
    return DrainedItemsVariable(items, tensors, source=source)


def start_generator(fn: types.FunctionType, names: list[str], values: tuple) -> Any:
    """`fn` called with the arguments it was bound to (parameter `names`, their `values`)."""
    from framejit.frontend.codegen import argnames_of, call_with_frame_args

    bound = dict(zip(names, values, strict=True))
    return call_with_frame_args(fn, [bound[n] for n in argnames_of(fn.__code__)])


class DrainedItems:
    """What a DrainedItemsVariable is at run time: the items computed ahead, handed out while
    the tensors the generator was given keep the version counters they had when it was made;
    once one changed, the generator's code run afresh (`start`) on the tensors as they are
    now, with the items already taken skipped."""

    __slots__ = ("_start", "_taken", "items", "_index", "watched", "_versions", "_args", "_real")

    def __init__(self, start: Any, taken: int, items: tuple, watched: tuple, args: tuple) -> None:
        self._start, self._taken, self.items, self._index = start, taken, items, 0
        self.watched, self._args, self._real = watched, args, None
        self._versions = tuple(t._version for t in watched)

    def fresh(self) -> bool:
        """No watched tensor changed, and the generator has not been run afresh."""
        return self._real is None and all(
            t._version == v for t, v in zip(self.watched, self._versions, strict=True)
        )

    def position(self) -> int:
        """How many of `items` were taken."""
        return self._index

    def left(self) -> int:
        return len(self.items) - self._index

    def skip(self, count: int) -> DrainedItems:
        """This iterator with `count` items taken (by a compiled trace that took them)."""
        self._index += count
        return self

    def __iter__(self) -> DrainedItems:
        return self

    def __next__(self) -> Any:
        if self._real is None:
            if self.fresh():
                if self._index >= len(self.items):
                    raise StopIteration
                self._index += 1
                return self.items[self._index - 1]
            real = self._start(self._args)
            for _ in range(self._taken + self._index):
                next(real)  # the items already handed out, computed again and dropped
            self._real = real
            self.items = ()
        return next(self._real)


_RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform",
                 "exponential", "cauchy", "geometric", "poisson", "rrelu")  # fmt: skip
_IMMUTABLE = (int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device)


def draws_random_numbers(node: Any) -> bool:
    if node.op == "call_module":
        name = node.target
    else:
        name = getattr(node.target, "__name__", str(node.target))
    return any(word in str(name).lower() for word in _RANDOM_WORDS)


def _immutable(vt: VariableTracker) -> bool:
    from framejit.frontend.variables.base import LazyNumberVariable
    from framejit.frontend.variables.symbolic import SymNodeVariable
    from framejit.frontend.variables.tensor import TensorVariable

    if isinstance(vt, (TensorVariable, SymNodeVariable, LazyNumberVariable)):
        return True
    if isinstance(vt, ConstantVariable):
        return _immutable_value(vt.value)
    if type(vt) is TupleVariable or type(vt).__name__ == "SizeVariable":
        return all(_immutable(i) for i in vt.items)
    if isinstance(vt, IteratorVariable) and vt.private:  # a generator expression's `.0`
        return all(_immutable(i) for i in vt.items[vt.index :])
    return False


def _immutable_value(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_immutable_value(v) for v in value)
    return isinstance(value, _IMMUTABLE)


_verdicts: weakref.WeakKeyDictionary[types.CodeType, str | None] = weakref.WeakKeyDictionary()


def _why_not_drainable(child: Translator) -> str | None:
    code = child.code
    if code.co_freevars:
        return "it reads variables of an enclosing function"
    for name, vt in child.locals.items():
        if not _immutable(vt):
            return f"its argument {name!r} is a {vt.type_name()}, which may change"
    if code not in _verdicts:
        fn = types.FunctionType(code, child.f_globals, code.co_name)
        _verdicts[code] = scan(fn, generator=True)
    return _verdicts[code]


def _inside_block(child: Translator) -> bool:
    """Is the suspended generator's current instruction inside a try/with block?"""
    offset = child.decoded.instructions[child.ip - 1].offset
    entry = child.decoded.handler_for(offset)
    if entry is None:
        return False
    # the generator's own implicit handler (3.12 wraps the whole body to turn StopIteration into
    # RuntimeError) is not a user block: its target re-raises through CALL_INTRINSIC_1
    target = child.decoded.instructions[child.decoded.index_of[entry.target]]
    # ... nor is 3.12's CLEANUP_THROW around a `yield from`, which only `throw()` reaches
    return target.opname not in ("CALL_INTRINSIC_1", "CLEANUP_THROW")


def loop_iterator(tx: Translator, value: VariableTracker) -> None:
    """GET_ITER of a generator that the instruction before it made (`for v in gen(x)`): only
    the loop's iterator slot holds it, so the POP_TOP that leaves the loop early (`break`,
    `return`) drops its last reference, and Python closes it there (`dropped`)."""
    if (
        isinstance(value, GeneratorVariable)
        and value.state == value.NEW
        and value.loop_of is None
        and value.child.parent is tx
        and value.made_at == tx.ip - 1
    ):
        value.loop_of = tx


def dropped(tx: Translator, value: VariableTracker) -> None:
    """POP_TOP of a loop's own generator (`loop_iterator`) that nothing else holds: as in
    Python, the generator is closed at once, before the code after the loop."""
    if (
        isinstance(value, GeneratorVariable)
        and value.loop_of is tx
        and all(v is not value for v in tx.stack)
        and all(v is not value for v in tx.locals.values())
    ):
        value.close(tx)


def real_generator_dropped(
    tx: Translator,
    value: VariableTracker | None,
    slot: str | None = None,
    kept: VariableTracker | None = None,
) -> None:
    """The root frame lets go of `value` (POP_TOP; a store over the local `slot`, with `kept`
    put in its place; `del`). A suspended real generator (one made by a call that ran as
    Python) that nothing else in the frame holds is closed there by Python, and its `finally`
    runs before what the frame does next: the trace cannot run it, so that instruction runs as
    Python. (The graph before it is compiled; the rest of the frame, a resume function that
    starts at the drop, runs uncompiled.)"""
    if tx.parent is not None or value is None:
        return
    gen = _real_object(tx, value)
    if type(gen) is not types.GeneratorType or not gen.gi_suspended:
        return
    others = [*tx.stack, *(v for name, v in tx.locals.items() if name != slot), kept]
    if any(v is not None and _real_object(tx, v) is gen for v in others):
        return
    raise Unsupported(
        "side_effect",
        "dropping a generator that runs as Python",
        "it is closed where the frame lets go of it, and its `finally` runs then",
    )


def _real_object(tx: Translator, vt: VariableTracker) -> Any:
    """The real object a frame's variable stands for, where the trace holds one: an argument
    not looked at yet, or an object from outside the frame."""
    from framejit.frontend.translator import _LazyArg
    from framejit.frontend.variables.objects import UserObjectVariable

    if isinstance(vt, _LazyArg):
        return tx.output.frame_args.get(getattr(vt.source, "name", None))
    if isinstance(vt, UserObjectVariable):
        return vt.obj
    return None


def _next_or_stop(tx: Translator, it: LazyIteratorVariable) -> VariableTracker:
    item = it.next_item(tx)
    if item is None:
        raise Unsupported("exception", "next() on an exhausted generator", "StopIteration")
    return item


def pull(tx: Translator, it: LazyIteratorVariable | IteratorVariable) -> VariableTracker | None:
    if isinstance(it, LazyIteratorVariable):
        return it.next_item(tx)
    return it.next()


def _pull_row(tx: Translator, inners: list[Any]) -> tuple[list[VariableTracker], bool]:
    """One item from each iterator in turn, up to the first that is done (as zip and map take
    them): the items taken, and whether every iterator had one."""
    row: list[VariableTracker] = []
    for inner in inners:
        item = pull(tx, inner)
        if item is None:
            return row, False
        row.append(item)
    return row, True


class RangeIteratorVariable(LazyIteratorVariable):
    """`iter(range(start, stop, step))` with a start and stop that may be symbolic ints: the
    loop iterator a resume function gets when a `for ... in range(...)` loop broke (passed as
    the `range` of what was left, see breaks.stack_kind). Its next item costs a guard on
    `start < stop`, not one on each value, so a loop whose body breaks in every iteration
    resumes in the same compiled code once the start is symbolic (automatic dynamic)."""

    def __init__(self, start: VariableTracker, stop: VariableTracker, step: int) -> None:
        self.start = start
        self.stop = stop
        self.step = step

    def __repr__(self) -> str:
        return f"RangeIterator({self.start}, {self.stop}, {self.step})"

    def python_type(self) -> type:
        return type(iter(range(0)))

    def reachable(self) -> list[VariableTracker]:
        return [self.start, self.stop]

    def next_item(self, tx: Translator) -> VariableTracker | None:
        before = operator.lt if self.step > 0 else operator.gt
        if not tx.compare_op(before, self.start, self.stop).truth(tx):
            return None
        item = self.start
        self.start = tx.binary_op(operator.add, item, ConstantVariable(self.step))
        note_undoable(lambda: setattr(self, "start", item))
        return item

    def reconstruct(self, cg: CodeGen) -> None:
        def bounds() -> None:
            cg.reconstruct(self.start)  # a symbolic one is a graph output
            cg.reconstruct(self.stop)
            cg.load_const(self.step)

        cg.call_const(iter, lambda: cg.call_const(range, bounds, 3), 1)


def _stops(exc: Unsupported, kinds: tuple[type[BaseException], ...]) -> bool:
    raised = exc.python_exception()
    return raised is not None and issubclass(raised, kinds)


class UserIteratorVariable(LazyIteratorVariable):
    """An iterator object whose class writes `__next__` in Python (an `__iter__` that returns
    self): each item is its `__next__` call, traced; the StopIteration it raises ends it."""

    def __init__(self, obj: VariableTracker) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        return f"UserIterator({self.obj!r})"

    def python_type(self) -> type:
        return self.obj.python_type()

    def reachable(self) -> list[VariableTracker]:
        return [self.obj]

    def next_item(self, tx: Translator) -> VariableTracker | None:
        try:
            return self.obj.call_method(tx, "__next__", [], {})
        except Unsupported as exc:
            if _stops(exc, (StopIteration,)):
                return None
            raise

    def reconstruct(self, cg: CodeGen) -> None:
        cg.reconstruct(self.obj)  # it is its own iterator: a resumed loop calls its __next__


def user_iterator(obj: VariableTracker) -> UserIteratorVariable | None:
    """`obj` as the iterator it is, when its class writes `__next__` in Python (an iterator
    object reached without `iter()`: given to `next()`, or a resume function's loop)."""
    from framejit.frontend.variables.objects import (
        NewObjectVariable,
        UserObjectVariable,
        python_function,
    )

    if isinstance(obj, (NewObjectVariable, UserObjectVariable)) and python_function(
        obj.python_type(), "__next__"
    ):
        return UserIteratorVariable(obj)
    return None


class GetItemIterator(LazyIteratorVariable):
    """`iter(obj)` of an object whose class has a Python `__getitem__` and no `__iter__`:
    obj[0], obj[1], ... until it raises IndexError (or StopIteration), as CPython iterates."""

    def __init__(self, obj: VariableTracker) -> None:
        self.obj = obj
        self.index = 0

    def __repr__(self) -> str:
        return f"GetItemIterator({self.obj!r}, {self.index})"

    def python_type(self) -> type:
        return type(iter([]))

    def reachable(self) -> list[VariableTracker]:
        return [self.obj]

    def next_item(self, tx: Translator) -> VariableTracker | None:
        try:
            item = self.obj.call_method(tx, "__getitem__", [ConstantVariable(self.index)], {})
        except Unsupported as exc:
            if _stops(exc, (IndexError, StopIteration)):
                return None
            raise
        index = self.index
        self.index += 1
        note_undoable(lambda: setattr(self, "index", index))
        return item

    def reconstruct(self, cg: CodeGen) -> None:
        from framejit.frontend.variables.objects import getitem_iter

        def emit() -> None:
            cg.reconstruct(self.obj)
            cg.load_const(self.index)

        cg.call_const(getitem_iter, emit, 2)


class LazyEnumerate(LazyIteratorVariable):
    def __init__(self, inner: LazyIteratorVariable | IteratorVariable, start: int) -> None:
        self.inner = inner
        self.count = start

    def reachable(self) -> list[VariableTracker]:
        return [self.inner]

    def python_type(self) -> type:
        return enumerate

    def next_item(self, tx: Translator) -> VariableTracker | None:
        item = pull(tx, self.inner)
        if item is None:
            return None
        count = self.count
        self.count += 1
        note_undoable(lambda: setattr(self, "count", count))
        return TupleVariable([ConstantVariable(count), item])

    def reconstruct(self, cg: CodeGen) -> None:
        def emit() -> None:
            cg.reconstruct(self.inner)
            cg.load_const(self.count)

        cg.call_const(enumerate, emit, 2)


class LazyZip(LazyIteratorVariable):
    def __init__(self, inners: list[Any], strict: bool) -> None:
        self.inners = inners
        self.strict = strict

    def reachable(self) -> list[VariableTracker]:
        return list(self.inners)

    def python_type(self) -> type:
        return zip

    def next_item(self, tx: Translator) -> VariableTracker | None:
        row, full = _pull_row(tx, self.inners)
        if full:
            return TupleVariable(row)
        if self.strict and (row or any(pull(tx, r) is not None for r in self.inners[1:])):
            raise Unsupported("exception", "zip(strict=True)", "ValueError: lengths differ")
        return None

    def reconstruct(self, cg: CodeGen) -> None:
        if self.strict:
            raise Unsupported("reconstruct", "a zip(strict=True) over a generator")

        def emit() -> None:
            for inner in self.inners:
                cg.reconstruct(inner)

        cg.call_const(zip, emit, len(self.inners))


class LazyMap(LazyIteratorVariable):
    def __init__(self, fn: VariableTracker, inners: list[Any]) -> None:
        self.fn = fn
        self.inners = inners

    def reachable(self) -> list[VariableTracker]:
        return [self.fn, *self.inners]

    def python_type(self) -> type:
        return map

    def next_item(self, tx: Translator) -> VariableTracker | None:
        row, full = _pull_row(tx, self.inners)
        return self.fn.call(tx, row, {}) if full else None

    def reconstruct(self, cg: CodeGen) -> None:
        def emit() -> None:
            cg.reconstruct(self.fn)
            for inner in self.inners:
                cg.reconstruct(inner)

        cg.call_const(map, emit, 1 + len(self.inners))


class LazyFilter(LazyIteratorVariable):
    def __init__(self, fn: VariableTracker, inner: Any) -> None:
        self.fn = fn
        self.inner = inner

    def reachable(self) -> list[VariableTracker]:
        return [self.fn, self.inner]

    def python_type(self) -> type:
        return filter

    def next_item(self, tx: Translator) -> VariableTracker | None:
        identity = self.fn.is_constant() and self.fn.as_constant() is None
        while (item := pull(tx, self.inner)) is not None:
            keep = item if identity else self.fn.call(tx, [item], {})
            if keep.truth(tx):
                return item
        return None

    def reconstruct(self, cg: CodeGen) -> None:
        def emit() -> None:
            cg.reconstruct(self.fn)
            cg.reconstruct(self.inner)

        cg.call_const(filter, emit, 2)


def settle_at_break(output: Any, roots: list[Any], kept: list[Any]) -> None:
    """Before a graph break is compiled. A generator that only a `for` loop on the stack iterates
    (`for b in batches(...)`) may be drained ahead: the code after the break can only take its
    next items. One that a variable holds could be sent to or thrown into: it stays live, and
    its reconstruct makes it run as Python. Then as at the end of any trace (settle_at_end)."""
    loops = [vt for vt in kept if isinstance(vt, LazyIteratorVariable) and vt.looped]
    held = {id(g) for g in live_generators([vt for vt in roots if all(vt is not i for i in loops)])}
    for gen in live_generators(loops):
        if id(gen) not in held:
            gen.drain_ahead()
    settle_at_end(output)


def settle_at_end(output: Any) -> None:
    """When a trace ends: no generator made in it may be left suspended inside its own
    try/with block."""
    for gen in output.generators:
        gen.check_left_open()


def live_generators(roots: list[Any]) -> list[GeneratorVariable]:
    """The generators reachable from `roots` (the stack, locals and cells at a graph break)."""
    found: list[GeneratorVariable] = []
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, GeneratorVariable):
            found.append(value)
        elif isinstance(value, LazyIteratorVariable):
            todo.extend(value.reachable())
        elif isinstance(value, VariableTracker):
            todo.extend(getattr(value, "__dict__", {}).values())
        elif isinstance(value, (list, tuple)):
            todo.extend(value)
        elif isinstance(value, dict):
            todo.extend(value.values())
    return found
