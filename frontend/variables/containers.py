"""Containers: tuples, lists, dicts, namedtuples, slices, dataclass instances and iterators.

Containers made inside the traced frame are mutable here (the translator mutates them in place,
as Python would). Containers read from outside the frame carry a Source; mutating those is a
Python-visible side effect, which this milestone refuses (`side_effect`).
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import DynamicItemSource, OffsetSource, Source
from framejit.frontend.variables.base import (
    ConstantVariable,
    VariableTracker,
    all_constant,
    constant_fold,
    note_mutation,
    note_undoable,
)

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator


def _const_index(tx: Translator, index: VariableTracker, what: str) -> Any:
    if not index.is_constant():
        raise Unsupported("unsupported_object", f"indexing a {what} with a {index.type_name()}")
    return index.as_constant()


def _key_variable(key: Any) -> VariableTracker:
    """A dict's key as a value of the trace (a class key is a ClassVariable)."""
    if isinstance(key, type):
        from framejit.frontend.variables.objects import ClassVariable

        return ClassVariable(key)
    return ConstantVariable(key)


class BaseSequence(VariableTracker):
    """Shared behaviour of tuples and lists: items are VTs."""

    kind: type = tuple

    def __init__(self, items: list[VariableTracker], source: Source | None = None) -> None:
        self.items = list(items)
        self.source = source

    def __repr__(self) -> str:
        return f"{self.kind.__name__}{self.items!r}"

    def python_type(self) -> type:
        return self.kind

    def is_constant(self) -> bool:
        return all(i.is_constant() for i in self.items)

    def as_constant(self) -> Any:
        return self.kind(i.as_constant() for i in self.items)

    def has_tensors(self) -> bool:
        return any(i.has_tensors() for i in self.items)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return list(self.items)

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def length(self) -> int:
        return len(self.items)

    def getitem(self, tx: Translator, index: VariableTracker) -> VariableTracker:
        key = _const_index(tx, index, self.kind.__name__)
        if isinstance(key, slice):
            return (
                ListVariable(self.items[key])
                if self.kind is list
                else TupleVariable(self.items[key])
            )
        try:
            return self.items[key]
        except (IndexError, TypeError) as exc:
            raise Unsupported.raised(f"{self.kind.__name__}[{key!r}]", exc) from None

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.functions import BoundMethodVariable

        if hasattr(self.kind, name):
            return BoundMethodVariable(self, name)
        raise Unsupported("unsupported_attr", f"{self.kind.__name__}.{name}")

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(self.length())
        if name in ("index", "count", "__contains__"):
            if not (self.is_constant() and all(a.is_constant() for a in args)):
                raise Unsupported("unsupported_call", f"{self.kind.__name__}.{name} on tensors")
            return ConstantVariable(
                getattr(self.as_constant(), name)(*[a.as_constant() for a in args])
            )
        return self.mutate(tx, name, args, kwargs)

    def mutate(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        raise Unsupported("unsupported_call", f"{self.kind.__name__}.{name}")

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:  # an object from outside the frame: the same object
            self.source.emit_load(cg)
            return
        for item in self.items:
            cg.reconstruct(item)
        cg.build(self.kind, len(self.items))


class TupleVariable(BaseSequence):
    kind = tuple


_VIEW_TYPES = {"keys": type({}.keys()), "values": type({}.values()), "items": type({}.items())}


class DictViewVariable(TupleVariable):
    """`d.keys()`, `d.values()`, `d.items()` of a dict of the trace: a live view, read each
    time it is used (a key added after the view was taken is seen), of the view's type. It
    reads as a tuple of the dict's current keys, values or pairs."""

    def __init__(self, mapping: DictVariable, view: str) -> None:
        self.mapping = mapping
        self.view = view
        self.source = None
        self.kind = _VIEW_TYPES[view]  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"dict_{self.view}({self.mapping!r})"

    @property
    def items(self) -> list[VariableTracker]:  # type: ignore[override]
        found = self.mapping.items
        if self.view == "keys":
            return [_key_variable(k) for k in found]
        if self.view == "values":
            return list(found.values())
        return [TupleVariable([_key_variable(k), v]) for k, v in found.items()]

    def as_constant(self) -> Any:
        values = {k: v.as_constant() for k, v in self.mapping.items.items()}
        return getattr(values, self.view)()  # a real view of a copy

    def getitem(self, tx: Translator, index: VariableTracker) -> VariableTracker:
        raise Unsupported.raised(
            f"dict_{self.view}[...]", TypeError(f"'dict_{self.view}' object is not subscriptable")
        )

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "__len__":
            return ConstantVariable(len(self.mapping.items))
        if self.view != "values" and self.is_constant() and all_constant(args, kwargs):
            # `keys() & other`, `isdisjoint`, `in`: on a real view of the constant contents
            method = getattr(self.as_constant(), name, None)
            if method is not None:
                value = constant_fold(method, args, kwargs)
                return tx.wrap_constant_result(value)
        raise Unsupported("unsupported_call", f"dict_{self.view}.{name}")

    def reconstruct(self, cg: CodeGen) -> None:
        cg.call_const(
            dict_view, lambda: (cg.reconstruct(self.mapping), cg.load_const(self.view)), 2
        )


def dict_view(mapping: dict[Any, Any], view: str) -> Any:
    """`mapping.keys()` (or values, items): a view the transformed code rebuilds."""
    return getattr(mapping, view)()


def _symbol_plus_constant(expr: Any) -> tuple[Any, int]:
    """(symbol, k) for a sympy expression `symbol + k` (k an integer, 0 for the symbol alone);
    (None, 0) for anything else."""
    if expr.is_Symbol:
        return expr, 0
    if expr.is_Add and len(expr.args) == 2:
        const = [a for a in expr.args if a.is_Integer]
        symbols = [a for a in expr.args if a.is_Symbol]
        if len(const) == 1 and len(symbols) == 1:
            return symbols[0], int(const[0])
    return None, 0


class ItemReader:
    """How a list from outside the frame reads its length, its items one at a time, or all of
    them: each read adds its own guards (a rewound instruction drops them, so nothing here is
    cached)."""

    def __init__(self, length: Callable[[], int], item: Callable[[int], VariableTracker]) -> None:
        self.length = length
        self.item = item

    def all(self) -> list[VariableTracker]:
        return [self.item(i) for i in range(self.length())]


class ListVariable(BaseSequence):
    """A list. One read from outside the frame can leave its contents unread: then it is only
    type-guarded, appends are kept aside, and the replay appends them to the real list - so
    code that only appends (a log of losses, activations collected by a hook) does not
    specialize on how long the list is."""

    kind = list

    def __init__(
        self,
        items: list[VariableTracker],
        source: Source | None = None,
        reader: ItemReader | None = None,
    ) -> None:
        # reads (and guards) the real contents on first use, or only its length or one item;
        # None once they are read
        self._reader = reader
        self.appended: list[VariableTracker] = []  # appends made while the contents are unread
        super().__init__(items, source)

    @property
    def items(self) -> list[VariableTracker]:  # type: ignore[override]
        if self._reader is not None:
            reader, self._reader = self._reader, None
            self._items = reader.all() + self.appended
        return self._items

    @items.setter
    def items(self, value: list[VariableTracker]) -> None:
        self._items = list(value)

    @property
    def contents_read(self) -> bool:
        return self._reader is None

    def length(self) -> int:
        """len(): while the contents are unread, only the real list's length is guarded (a list
        of 2000 tensors whose length the code checks does not become 2000 graph inputs)."""
        if self._reader is not None:
            return self._reader.length() + len(self.appended)
        return len(self.items)

    def getitem(self, tx: Translator, index: VariableTracker) -> VariableTracker:
        if self._reader is not None and not self.appended:
            item = self._item_at_symbolic_index(tx, index)
            if item is not None:
                return item
            key = _const_index(tx, index, "list")
            if type(key) is int:  # one item read (and guarded), the others left unread
                n = self._reader.length()
                if -n <= key < n:
                    return self._reader.item(key % n)
        return super().getitem(tx, index)

    def _item_at_symbolic_index(
        self, tx: Translator, index: VariableTracker
    ) -> VariableTracker | None:
        """`xs[t]` with `t` an int argument that dynamic shapes made symbolic (a step function
        called with t = 0, 1, 2, ...): the item at each call's `t`, read through
        `DynamicItemSource` and guarded there, with `0 <= t < len(xs)` as shape guards, so
        one graph serves every step (it recompiled per `t`, up to the limit). None for any
        other index."""
        from framejit.frontend.variables.symbolic import SymNodeVariable  # (imports this module)

        if self.source is None or not isinstance(index, SymNodeVariable):
            return None
        value = index.value
        if type(value) is not torch.SymInt:
            return None
        symbol, offset = _symbol_plus_constant(value.node.expr)
        found = tx.output.dynamic.symbols.get(symbol)
        if found is None or found[1] is not None:  # an int argument's own symbol only
            return None
        n = self._reader.length()  # type: ignore[union-attr]
        if not 0 <= value.node.hint < n:
            return None  # out of range: the constant path raises eager's IndexError
        if not (bool(value >= 0) and bool(value < n)):  # recorded as shape guards
            return None
        at = found[0] if offset == 0 else OffsetSource(found[0], offset)
        return tx.wrap_source(DynamicItemSource(self.source, at))

    def replace_items(self, tx: Translator, items: list[VariableTracker]) -> None:
        """All the items replaced at once (heapq's reordering, bisect's insort): a mutation."""
        note_mutation(self)
        if self.source is not None:  # replayed on the real list after the graph
            tx.output.side_effects.changed_container(self)
        self.items = items

    def mutate(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        note_mutation(self)
        if self.source is not None:  # replayed on the real list after the graph
            tx.output.side_effects.changed_container(self)
        if not self.contents_read and name in ("append", "extend") and len(args) == 1:
            self.appended += [args[0]] if name == "append" else args[0].unpack(tx)
            return ConstantVariable(None)
        items = self.items
        if name == "append" and len(args) == 1:
            items.append(args[0])
        elif name == "extend" and len(args) == 1:
            items.extend(args[0].unpack(tx))
        elif name == "insert" and len(args) == 2:
            items.insert(_const_index(tx, args[0], "list"), args[1])
        elif name == "pop" and len(args) <= 1:
            return items.pop(_const_index(tx, args[0], "list") if args else -1)
        elif name == "reverse" and not args:
            items.reverse()
        elif name == "clear" and not args:
            items.clear()
        elif name == "copy" and not args:
            return ListVariable(items)
        elif name == "__setitem__" and len(args) == 2:
            key = _const_index(tx, args[0], "list")
            if isinstance(key, slice):
                items[key] = args[1].unpack(tx)
            else:
                items[key] = args[1]
        elif name == "__delitem__" and len(args) == 1:
            del items[_const_index(tx, args[0], "list")]
        elif (
            name == "sort" and self.is_constant() and all(v.is_constant() for v in kwargs.values())
        ):
            values = sorted(self.as_constant(), **{k: v.as_constant() for k, v in kwargs.items()})
            self.items = [ConstantVariable(v) for v in values]
        elif name == "sort" and not args:  # `lst.sort(key=lambda ...)`: as sorted() orders
            from framejit.frontend.variables.builtins import call_builtin

            self.items = call_builtin(tx, sorted, [ListVariable(list(items))], kwargs).items
        elif name == "remove" and len(args) == 1:
            for k, item in enumerate(items):
                if same_or_equal(tx, item, args[0]):
                    del items[k]
                    break
            else:
                raise Unsupported("exception", "list.remove(x)", "ValueError: x not in list")
        else:
            raise Unsupported("unsupported_call", f"list.{name}")
        return ConstantVariable(None)


def same_or_equal(tx: Translator, item: VariableTracker, x: VariableTracker) -> bool:
    """What a list's or tuple's `in` and `list.remove` ask of each item, in order: `item is x
    or item == x` (a user `__eq__` inlined; a tensor's `==` reads its values: a break)."""
    if tx.is_op(item, x):
        return True
    if item.is_constant() and x.is_constant():
        return bool(item.as_constant() == x.as_constant())
    return tx.compare_op(operator.eq, item, x).truth(tx)


class DequeVariable(ListVariable):
    """A `collections.deque` made in the frame: a list of VTs with deque's methods and its
    `maxlen` (appending to a full deque drops from the other end)."""

    kind = collections.deque

    def __init__(self, items: list[VariableTracker], maxlen: int | None = None) -> None:
        super().__init__(items)
        self.maxlen = maxlen
        self._trim(left=True)

    def as_constant(self) -> Any:
        return collections.deque((i.as_constant() for i in self.items), self.maxlen)

    def _trim(self, left: bool) -> None:
        """Keep at most `maxlen` items, dropping from the left (after appends on the right)
        or from the right (after appendleft)."""
        extra = len(self.items) - self.maxlen if self.maxlen is not None else 0
        if extra > 0:
            self.items = self.items[extra:] if left else self.items[:-extra]

    def getitem(self, tx: Translator, index: VariableTracker) -> VariableTracker:
        key = _const_index(tx, index, "deque")
        if not isinstance(key, int):
            raise Unsupported("exception", "deque[...]", "TypeError: sequence index must be int")
        return super().getitem(tx, index)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().getattr(tx, name)

    def mutate(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        note_mutation(self)
        items = self.items
        if name == "append" and len(args) == 1:
            items.append(args[0])
            self._trim(left=True)
        elif name == "appendleft" and len(args) == 1:
            items.insert(0, args[0])
            self._trim(left=False)
        elif name == "extend" and len(args) == 1:
            items.extend(args[0].unpack(tx))
            self._trim(left=True)
        elif name == "extendleft" and len(args) == 1:
            self.items = list(reversed(args[0].unpack(tx))) + items
            self._trim(left=False)
        elif name in ("pop", "popleft") and not args:
            if not items:
                raise Unsupported("exception", f"deque.{name}()", "IndexError")
            return items.pop(-1 if name == "pop" else 0)
        elif name == "rotate" and len(args) <= 1:
            n = _const_index(tx, args[0], "deque") if args else 1
            if items:
                n %= len(items)
                self.items = items[-n:] + items[:-n] if n else items
        elif name == "copy" and not args:
            return DequeVariable(list(items), self.maxlen)
        elif name in ("clear", "reverse", "insert", "__setitem__", "__delitem__"):
            if name == "insert" and self.maxlen is not None and len(items) >= self.maxlen:
                raise Unsupported("exception", "deque.insert", "IndexError: deque already full")
            return super().mutate(tx, name, args, kwargs)
        else:
            raise Unsupported("unsupported_call", f"deque.{name}")
        return ConstantVariable(None)

    def reconstruct(self, cg: CodeGen) -> None:
        def arguments() -> None:
            for item in self.items:
                cg.reconstruct(item)
            cg.build(list, len(self.items))
            cg.load_const(self.maxlen)

        cg.call_const(collections.deque, arguments, 2)


class NamedTupleVariable(BaseSequence):
    """An instance of a namedtuple class or of a torch.return_types structseq."""

    def __init__(self, cls: type, items: list[VariableTracker], source: Source | None = None):
        super().__init__(items, source)
        self.cls = cls

    def python_type(self) -> type:
        return self.cls

    def as_constant(self) -> Any:
        return self._make([i.as_constant() for i in self.items])

    def _make(self, values: list[Any]) -> Any:
        if self.cls.__module__ == "torch.return_types":
            return self.cls(values)
        return self.cls(*values)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        fields = getattr(self.cls, "_fields", None)
        if fields is not None and name in fields:
            return self.items[fields.index(name)]
        if self.cls.__module__ == "torch.return_types":
            descriptor = getattr(self.cls, name, None)
            if descriptor is not None and hasattr(descriptor, "__get__"):
                # structseq fields are member descriptors in field order
                order = [f for f in self.cls.__dict__ if not f.startswith("_")]
                members = [
                    f for f in order if type(self.cls.__dict__[f]).__name__ == "member_descriptor"
                ]
                if name in members:
                    return self.items[members.index(name)]
        if fields is not None and name in ("_replace", "_asdict"):
            from framejit.frontend.variables.functions import BoundMethodVariable

            return BoundMethodVariable(self, name)
        if fields is not None:
            # a method or property the NamedTuple class writes in Python: as for any class
            # (the class is fixed: it is this tracker's own)
            from framejit.frontend.variables.functions import (
                UserFunctionVariable,
                UserMethodVariable,
            )

            attr = next((k.__dict__[name] for k in self.cls.__mro__ if name in k.__dict__), None)
            if isinstance(attr, types.FunctionType):
                return UserMethodVariable(UserFunctionVariable(attr), self)
            if isinstance(attr, property) and isinstance(attr.fget, types.FunctionType):
                return UserFunctionVariable(attr.fget).call(tx, [self], {})
        return super().getattr(tx, name)

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fields = getattr(self.cls, "_fields", None)
        if fields is not None and name == "_replace" and not args:
            items = dict(zip(fields, self.items))
            unknown = set(kwargs) - set(fields)
            if unknown:
                raise Unsupported("exception", f"{self.cls.__name__}._replace", "ValueError")
            items.update(kwargs)
            return NamedTupleVariable(self.cls, [items[f] for f in fields])
        if fields is not None and name == "_asdict" and not args and not kwargs:
            return DictVariable(dict(zip(fields, self.items)))
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
            return
        if self.cls.__module__ == "torch.return_types":
            cg.call_const(self.cls, lambda: TupleVariable(self.items).reconstruct(cg), 1)
        else:
            cg.call_const(
                self.cls, lambda: [cg.reconstruct(i) for i in self.items], len(self.items)
            )


class DictVariable(VariableTracker):
    """A dict (or a dict subclass such as OrderedDict: `cls`) with constant keys."""

    def __init__(
        self,
        items: dict[Any, VariableTracker],
        source: Source | None = None,
        cls: type = dict,
        default_factory: VariableTracker | None = None,
    ) -> None:
        self.items = dict(items)  # constant keys -> VTs
        self.source = source
        self.cls = cls
        self.default_factory = default_factory  # a defaultdict's (None: missing keys raise)

    def __repr__(self) -> str:
        return f"{self.cls.__name__}{self.items!r}"

    def python_type(self) -> type:
        return self.cls

    def is_constant(self) -> bool:
        return all(v.is_constant() for v in self.items.values())

    def as_constant(self) -> Any:
        return self.cls({k: v.as_constant() for k, v in self.items.items()})

    def has_tensors(self) -> bool:
        return any(v.has_tensors() for v in self.items.values())

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def length(self) -> int:
        return len(self.items)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return [_key_variable(k) for k in self.items]

    def getitem(self, tx: Translator, key: VariableTracker) -> VariableTracker:
        k = _const_index(tx, key, "dict")
        if k not in self.items:
            if issubclass(self.cls, collections.Counter):
                return ConstantVariable(0)  # Counter.__missing__, which inserts nothing
            if self.default_factory is None:
                raise Unsupported.raised(f"dict[{k!r}]", KeyError(k))
            value = self.default_factory.call(tx, [], {})  # defaultdict: insert the default
            note_mutation(self)
            if self.source is not None:
                tx.output.side_effects.changed_container(self)
            self.items[k] = value
        return self.items[k]

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.functions import BoundMethodVariable

        if hasattr(dict, name) or (self.cls is not dict and hasattr(self.cls, name)):
            return BoundMethodVariable(self, name)
        raise Unsupported("unsupported_attr", f"{self.cls.__name__}.{name}")

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        items = self.items
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "get" and 1 <= len(args) <= 2:
            k = _const_index(tx, args[0], "dict")
            return items.get(k, args[1] if len(args) == 2 else ConstantVariable(None))
        if name in ("keys", "values", "items") and not args and not kwargs:
            return DictViewVariable(self, name)
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(_const_index(tx, args[0], "dict") in items)
        if name == "__len__":
            return ConstantVariable(len(items))
        if name == "copy" and not args:
            return DictVariable(items, cls=self.cls, default_factory=self.default_factory)
        if issubclass(self.cls, collections.Counter) and name in _COUNTER_METHODS:
            # on the real Counter of the constant counts; update/subtract change it in place
            if not (self.is_constant() and all_constant(args, kwargs)):
                raise Unsupported("unsupported_call", f"Counter.{name} of non-constant counts")
            counts = self.as_constant()
            value = constant_fold(getattr(counts, name), args, kwargs)
            if name in ("most_common", "total"):
                return tx.wrap_constant_result(value)
            note_mutation(self)
            if self.source is not None:
                tx.output.side_effects.changed_container(self)
            self.items = {k: ConstantVariable(v) for k, v in counts.items()}
            return ConstantVariable(None)
        if name in ("move_to_end", "popitem") and not (
            issubclass(self.cls, collections.OrderedDict) or (name == "popitem" and not args)
        ):
            raise Unsupported("unsupported_call", f"{self.cls.__name__}.{name}")
        note_mutation(self)
        if self.source is not None:  # replayed on the real dict after the graph
            tx.output.side_effects.changed_container(self)
        if name == "__setitem__" and len(args) == 2:
            items[_const_index(tx, args[0], "dict")] = args[1]
        elif name == "update" and len(args) <= 1:
            if args:
                other = args[0]
                if isinstance(other, DictVariable):
                    items.update(other.items)
                else:  # an iterable of (key, value) pairs, as dict() takes
                    for pair in other.unpack(tx):
                        kv = pair.unpack(tx)
                        if len(kv) != 2:
                            raise Unsupported("exception", "dict.update", "ValueError")
                        items[_const_index(tx, kv[0], "dict")] = kv[1]
            items.update(kwargs)
        elif name == "pop" and 1 <= len(args) <= 2:
            k = _const_index(tx, args[0], "dict")
            if k in items:
                return items.pop(k)
            if len(args) == 2:
                return args[1]
            raise Unsupported("exception", f"dict.pop({k!r}) raises KeyError")
        elif name == "setdefault" and 1 <= len(args) <= 2:
            k = _const_index(tx, args[0], "dict")
            return items.setdefault(k, args[1] if len(args) == 2 else ConstantVariable(None))
        elif name == "__delitem__" and len(args) == 1:
            del items[_const_index(tx, args[0], "dict")]
        elif name == "clear":
            items.clear()
        elif name in ("move_to_end", "popitem"):
            options = [*args, *kwargs.values()]
            if not all(o.is_constant() for o in options):
                raise Unsupported("unsupported_call", f"OrderedDict.{name} with these arguments")
            return self._reorder(name, [a.as_constant() for a in args], kwargs)
        else:
            raise Unsupported("unsupported_call", f"dict.{name}")
        return ConstantVariable(None)

    def _reorder(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> VariableTracker:
        """OrderedDict.move_to_end(key, last=True) / popitem(last=True), and dict.popitem()."""
        order = collections.OrderedDict((k, k) for k in self.items)
        try:
            result = getattr(order, name)(*args, **{k: v.as_constant() for k, v in kwargs.items()})
        except (KeyError, TypeError) as exc:
            raise Unsupported("exception", f"{self.cls.__name__}.{name}", repr(exc)) from None
        if name == "popitem":
            key = result[0]
            value = self.items.pop(key)
            return TupleVariable([ConstantVariable(key), value])
        self.items = {k: self.items[k] for k in order}
        return ConstantVariable(None)

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
            return

        def build() -> None:
            for k, v in self.items.items():
                cg.load_const(k)
                cg.reconstruct(v)
            cg.build(dict, len(self.items))

        if self.cls is dict:
            build()
        elif self.default_factory is not None:
            factory = self.default_factory
            cg.call_const(self.cls, lambda: (cg.reconstruct(factory), build()), 2)
        else:
            cg.call_const(self.cls, build, 1)


# Counter methods answered on the real Counter of constant counts (DictVariable.call_method)
_COUNTER_METHODS = frozenset({"most_common", "total", "update", "subtract"})


class SliceVariable(VariableTracker):
    """A slice with a non-constant part (constant slices are ConstantVariables)."""

    def __init__(self, parts: list[VariableTracker]) -> None:
        self.parts = parts

    def reconstruct(self, cg: CodeGen) -> None:
        cg.call_const(slice, lambda: [cg.reconstruct(p) for p in self.parts], len(self.parts))

    def python_type(self) -> type:
        return slice

    # A slice whose bounds are symbolic sizes: constant for Python (`as_constant` pins them).
    def is_constant(self) -> bool:
        return all(p.is_constant() for p in self.parts)

    def as_constant(self) -> Any:
        return slice(*(p.as_constant() for p in self.parts))


class DataclassVariable(VariableTracker):
    """An instance of a user dataclass created inside the frame."""

    def __init__(self, cls: type, fields: dict[str, VariableTracker]) -> None:
        self.cls = cls
        self.fields = fields

    def python_type(self) -> type:
        return self.cls

    def has_tensors(self) -> bool:
        return any(v.has_tensors() for v in self.fields.values())

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in self.fields:
            return self.fields[name]
        raise Unsupported("unsupported_attr", f"{self.cls.__name__}.{name}")

    def reconstruct(self, cg: CodeGen) -> None:
        init = [f.name for f in dataclasses.fields(self.cls) if f.init]
        if set(init) != set(self.fields):
            raise Unsupported("reconstruct", f"dataclass {self.cls.__name__} with non-init fields")
        cg.call_const(self.cls, lambda: [cg.reconstruct(self.fields[n]) for n in init], len(init))


class IteratorVariable(VariableTracker):
    """An iterator over a known list of items (range, list, zip, enumerate, dict keys...)."""

    def __init__(self, items: list[VariableTracker]) -> None:
        self.items = items
        self.index = 0
        self.private = False  # made by GET_ITER from a container: only its loop can advance it

    def python_type(self) -> type:
        return type(iter(()))

    def _advance_to(self, index: int) -> None:
        old = self.index
        note_undoable(lambda: setattr(self, "index", old))
        self.index = index

    def _before_taking(self) -> None:
        """Raise where Python's iterator would, before an item is taken (a subclass's check)."""

    def next(self) -> VariableTracker | None:
        self._before_taking()
        if self.index >= len(self.items):
            return None
        item = self.items[self.index]
        self._advance_to(self.index + 1)
        return item

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        self._before_taking()
        rest = self.items[self.index :]
        self._advance_to(len(self.items))
        return rest

    def reconstruct(self, cg: CodeGen) -> None:
        """An iterator over the items not consumed yet."""
        cg.call_const(iter, lambda: TupleVariable(self.items[self.index :]).reconstruct(cg), 1)


class ContainerIteratorVariable(IteratorVariable):
    """`iter()` of a list, dict or set of the trace, live as Python's iterators are: a list
    iterator sees items appended while it runs; a dict or set iterator raises RuntimeError at
    its next step once the container's size changed."""

    def __init__(
        self, tx: Translator, container: VariableTracker, keys: list[VariableTracker] | None = None
    ) -> None:
        """`keys`: what a dict or set iterator yields (a view's items; the container's own by
        default), taken now; a list iterator reads the list as it is at each step."""
        self.container = container
        self.index = 0
        self.private = False
        self.is_list = isinstance(container, ListVariable)
        self.size = None if self.is_list else len(container.items)  # type: ignore[attr-defined]
        self.what = "dictionary" if isinstance(container, DictVariable) else "Set"
        if not self.is_list and keys is None:
            keys = container.unpack(tx)
        self._keys = keys

    @property
    def items(self) -> list[VariableTracker]:  # type: ignore[override]
        return self.container.items if self.is_list else self._keys  # type: ignore[attr-defined,return-value]

    def _before_taking(self) -> None:
        if self.size is not None and len(self.container.items) != self.size:  # type: ignore[attr-defined]
            raise Unsupported.raised(
                "iterating", RuntimeError(f"{self.what} changed size during iteration")
            )

    def reconstruct(self, cg: CodeGen) -> None:
        if self.is_list:
            cg.call_const(
                list_iterator_at,
                lambda: (cg.reconstruct(self.container), cg.load_const(self.index)),
                2,
            )
            return

        def emit() -> None:
            cg.reconstruct(self.container)
            TupleVariable(self.items[self.index :]).reconstruct(cg)
            cg.load_const(self.size)
            cg.load_const(self.what)

        cg.call_const(checked_iterator, emit, 4)


def list_iterator_at(items: list[Any], index: int) -> Any:
    """A real list iterator over `items` that has taken `index` items already."""
    it = iter(items)
    it.__setstate__(index)  # type: ignore[attr-defined]
    return it


def checked_iterator(container: Any, rest: tuple[Any, ...], size: int, what: str) -> Any:
    """The rest of a dict's or set's iteration, raising as CPython's iterator does when the
    container's size changes."""
    for key in rest:
        if len(container) != size:
            raise RuntimeError(f"{what} changed size during iteration")
        yield key
    if len(container) != size:
        raise RuntimeError(f"{what} changed size during iteration")


def container_iterator(tx: Translator, value: VariableTracker) -> IteratorVariable | None:
    """The live iterator `iter(value)` gives for a list, dict or set, or a view of a dict
    (None for others)."""
    if type(value) is DictViewVariable:  # the view's items, with the dict's size check
        return ContainerIteratorVariable(tx, value.mapping, value.items)
    if type(value) is ListVariable or type(value) is SetVariable:
        return ContainerIteratorVariable(tx, value)
    if type(value) is DictVariable and value.cls in (dict, collections.OrderedDict):
        return ContainerIteratorVariable(tx, value)
    return None


_SET_WRITES = frozenset(
    {
        "add", "update", "discard", "remove", "pop", "clear", "intersection_update",
        "difference_update", "symmetric_difference_update", "__ior__", "__iand__", "__isub__",
        "__ixor__",
    }
)  # fmt: skip


class SetVariable(VariableTracker):
    """A set or frozenset of constants (the translator keeps a real Python set of them).

    It counts as a constant for the operations that only read it (`in`, `len`, `|`, `==`,
    `issubset`, iteration): `as_constant()` hands out a copy, so folding can never change it.
    Writes (`add`, `update`, `|=`, ...) go through `mutate`, which the undo log can rewind. A set
    read from outside the frame is guarded on its items in iteration order (the order a loop
    over it sees) and is read-only here: a write to it is a graph break."""

    def __init__(
        self, items: set[Any] | frozenset[Any], source: Source | None = None, readonly: bool = False
    ) -> None:
        self.items = items
        self.source = source
        self.readonly = readonly or source is not None  # a library's set, read without a source

    def __repr__(self) -> str:
        return f"Set({self.items!r})"

    def python_type(self) -> type:
        return type(self.items)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.items if type(self.items) is frozenset else set(self.items)

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def length(self) -> int:
        return len(self.items)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return [ConstantVariable(v) for v in self.items]

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in _SET_WRITES:
            from framejit.frontend.variables.functions import BoundMethodVariable

            return BoundMethodVariable(self, name)  # its call comes back to call_method
        return ConstantVariable(self.as_constant()).getattr(tx, name)

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name in _SET_WRITES:
            return self.mutate(tx, name, args, kwargs)
        return self.getattr(tx, name).call(tx, args, kwargs)

    def mutate(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if type(self.items) is frozenset:
            raise Unsupported("exception", f"frozenset.{name}", "AttributeError")
        if self.readonly and (self.source is None or name == "pop"):
            # `pop` takes an item by the real set's order; a library's set has no source
            raise Unsupported("side_effect", f"set.{name} on a set from outside the frame")
        if kwargs:
            raise Unsupported("unsupported_call", f"set.{name} with keyword arguments")
        values = []
        for a in args:
            if a.is_constant():
                values.append(a.as_constant())
                continue
            items = a.unpack(tx)  # `s.update(k for k in ...)`: its items must be constants
            if not all(i.is_constant() for i in items):
                raise Unsupported("unsupported_object", f"set.{name} of non-constant values")
            values.append([i.as_constant() for i in items])
        note_mutation(self)
        old = set(self.items)
        try:
            result = getattr(self.items, name)(*values)
        except Exception as exc:
            self.items = old
            raise Unsupported("exception", f"set.{name}", f"{type(exc).__name__}: {exc}") from None
        note_undoable(lambda: setattr(self, "items", old))
        if self.source is not None:  # a set passed in: the same call, made on it after the graph
            from framejit.frontend.variables.functions import BoundMethodVariable

            replay = (BoundMethodVariable(self, name), [ConstantVariable(v) for v in values], {})
            tx.output.side_effects.calls.append((*replay, tx.lineno))
        if name.startswith("__i"):
            return self
        return ConstantVariable(result)  # None, or the item `pop` removed

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
            return
        kind = type(self.items)
        cg.call_const(kind, lambda: cg.load_const(tuple(self.items)), 1)
