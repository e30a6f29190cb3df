"""Compile a list of guards into ONE generated Python function, and explain failures.

The generated function takes `(F, L_<arg0>, L_<arg1>, ...)`: the function object whose frame is
being entered (its `__globals__` and `__closure__` reach globals and free variables) and the
frame's arguments in `co_varnames` order. It returns True when every guard holds. Sources used
by more than one guard are loaded once into a temporary, in the order the guards need them, so a
temporary is only read after the guards on its base have passed. Any exception while checking
means "does not hold".

The source text is kept (`CompiledGuards.source`) so logs show exactly what runs, and a second
function built from the same lines returns the index of the first failing guard for
`why_failed`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from framejit.frontend.sources import (
    AttrSource,
    ConstSource,
    DictItemSource,
    GenericAttrSource,
    GlobalSource,
    ItemSource,
    MethodCallSource,
    Source,
    TypeSource,
    guard_param,
)
from framejit.guards.guard import (
    GlobalState,
    Guard,
    GuardKind,
    _const_or_literal,
    _pretty_const,
    _tensor_check,
    cpp_tensor_guards,
    user_mode_active,
)


@dataclass
class CompiledGuards:
    guards: list[Guard]
    check: Callable[..., bool]
    source: str
    argnames: tuple[str, ...]
    _first_failure: Callable[..., int] = field(repr=False)

    def why_failed(self, fn: Any, *args: Any) -> str | None:
        """The first guard that does not hold for these arguments, with its actual value."""
        index = self._first_failure(fn, *args)
        if index < 0:
            return None
        guard = self.guards[index]
        where = f" (from {guard.origin})" if guard.origin else ""
        actual = ""
        if guard.source is not None:
            actual = f"; actual: {_describe_actual(guard, fn, args, self.argnames)}"
        elif guard.kind is GuardKind.SHAPE_EXPR:
            tails = [
                (src, "" if dim is None else f".size()[{dim}]")
                for src, dim in dict.fromkeys(guard.expected.sizes)
            ]
            actual = "; actual: " + ", ".join(
                f"{src}{tail} = {_eval(src, fn, args, self.argnames, tail)}" for src, tail in tails
            )
        elif guard.kind is GuardKind.STATE_READ:
            getter, getter_args, getter_kwargs, _ = guard.expected
            try:
                actual = f"; actual: {getter(*getter_args, **dict(getter_kwargs))!r}"
            except Exception as exc:  # the getter raises now
                actual = f"; actual: <{type(exc).__name__}: {exc}>"
        elif guard.kind is GuardKind.GLOBAL_STATE:
            actual = _global_state_difference(guard.expected)
        return f"{guard}{where}{actual}"


def _global_state_difference(expected: GlobalState) -> str:
    """What differs between the state the entry was compiled with and the current one."""
    if user_mode_active():
        return "; actual: a user's TorchFunctionMode or TorchDispatchMode, or torch.jit.trace"
    current = GlobalState.current(expected.module_hooks)
    changed = [
        f"{f.name}={getattr(current, f.name)!r}"
        for f in dataclasses.fields(GlobalState)
        if f.compare and f.name != "module_hooks" and getattr(expected, f.name) is not None
        if getattr(current, f.name) != getattr(expected, f.name)
    ]
    return f"; actual: {', '.join(changed)}" if changed else ""


def _eval(src: Source, fn: Any, args: Sequence[Any], argnames: Sequence[str], tail: str) -> str:
    scope = {guard_param(n): v for n, v in zip(argnames, args)}
    scope["F"] = fn
    scope["G"] = getattr(fn, "__globals__", {})
    try:
        return repr(eval(src.guard_expr() + tail, scope))
    except Exception as exc:  # the value cannot even be reached
        return f"<{type(exc).__name__}: {exc}>"


def _describe_actual(guard: Guard, fn: Any, args: Sequence[Any], argnames: Sequence[str]) -> str:
    scope = {guard_param(n): v for n, v in zip(argnames, args)}
    scope["F"] = fn
    scope["G"] = getattr(fn, "__globals__", {})
    try:
        value = eval(guard.source.guard_expr(), scope)
    except Exception as exc:  # the value cannot even be reached
        return f"<{type(exc).__name__}: {exc}>"
    if guard.kind is GuardKind.TENSOR_MATCH and hasattr(value, "shape"):
        return (
            f"{type(value).__name__}(dtype={value.dtype}, device={value.device}, "
            f"shape={tuple(value.shape)}, stride={tuple(value.stride())}, "
            f"requires_grad={value.requires_grad})"
        )
    text = repr(value)
    return text if len(text) < 200 else text[:197] + "..."


# Cheap checks first; tensors last. Within a kind, the order the translator installed them,
# so a guard on a base comes before guards on its attributes.
_COST = {
    GuardKind.GLOBAL_STATE: 0,
    GuardKind.STATE_READ: 1,  # after GLOBAL_STATE: under a user mode nothing else is called
    GuardKind.ID_MATCH: 1,
    GuardKind.MODULE_MATCH: 1,
    GuardKind.TYPE_MATCH: 1,
    GuardKind.CONSTANT_MATCH: 1,
    GuardKind.LENGTH_CHECK: 2,
    GuardKind.DICT_KEYS: 2,
    GuardKind.KEYS_ABSENT: 2,
    GuardKind.MODULE_NO_HOOKS: 2,
    GuardKind.TENSOR_MATCH: 3,
    GuardKind.DUPLICATE_INPUT: 3,
    GuardKind.NO_ALIASING: 4,
    GuardKind.STORAGE_GROUPS: 4,
    GuardKind.SHAPE_EXPR: 4,
}


def _order(guards: Sequence[Guard]) -> list[Guard]:
    # Dedupe, then a stable sort by (cost, depth of the source). Reordering is safe: the check
    # is a conjunction, and a read that fails because its base changed counts as "fails".
    unique: list[Guard] = []
    seen: set[tuple[Any, ...]] = set()
    for g in guards:
        key = (g.source, g.kind, _hashable(g.expected))
        if key not in seen:
            seen.add(key)
            unique.append(g)
    return sorted(unique, key=lambda g: (_COST[g.kind], len(g.source.chain()) if g.source else 0))


def _hashable(value: Any) -> Any:
    try:
        hash(value)
        return value
    except TypeError:
        return id(value)


def _sources_of(g: Guard) -> list[Source]:
    out = [g.source] if g.source is not None else []
    if g.kind is GuardKind.DUPLICATE_INPUT:
        out.append(g.expected)
    elif g.kind is GuardKind.NO_ALIASING:
        out.extend(g.expected)
    elif g.kind is GuardKind.STORAGE_GROUPS:
        out.extend(g.expected[0])
    elif g.kind is GuardKind.SHAPE_EXPR:
        out.extend(src for src, _ in g.expected.sizes)
    return out


# The kinds of a module spec's facts, as guards/_tensor_check.cpp numbers them (FactKind).
_FACT_IS, _FACT_EQ, _FACT_TYPE, _FACT_LEN, _FACT_MODULE, _FACT_KEYS = range(6)
# How far from its module a fact's value may be (`type(m).forward.__code__`: three steps).
_MAX_FACT_STEPS = 3


@dataclass
class _ModuleGroup:
    """A module's MODULE_MATCH guard, checked with everything folded into it in one
    `module_check` call: its own facts (`_module_fact_of`), guards on values reached from it
    (`facts`: the path from the module and the guard), and its submodules' groups (`facts`
    too, with the path to the submodule)."""

    match: Guard
    own: list[Guard] = field(default_factory=list)
    facts: list[tuple[tuple[Any, ...], Guard | _ModuleGroup]] = field(default_factory=list)


def _module_groups(ordered: Sequence[Guard]) -> list[Guard | _ModuleGroup] | None:
    """With the C++ accelerator, the check's steps: each guard alone, except that a module's
    MODULE_MATCH guard becomes a group (`_ModuleGroup`) checked in one `module_check` call in
    its place, where the module's base has been checked. A guard on the module itself, or on a
    value a few attribute, item or `type()` steps from it (`_fact`), moves into the group of
    the nearest module it reaches, and so does a submodule's group. None without the
    accelerator."""
    if not cpp_tensor_guards() or not hasattr(_tensor_check, "module_spec"):
        return None
    with_facts = getattr(_tensor_check, "MODULE_FACTS", 0) >= 1
    anchors: dict[Source, _ModuleGroup] = {}
    for g in ordered:
        if g.kind is GuardKind.MODULE_MATCH and type(g.expected[1]) is bool:
            anchors.setdefault(g.source, _ModuleGroup(g))
    placed: set[int] = set()  # ids of the guards that went into a group
    for g in ordered:
        group = anchors.get(g.source) if g.source is not None else None
        if group is not None and group.match is g:
            continue
        module = _module_fact_of(g)
        if module in anchors:
            anchors[module].own.append(g)
            placed.add(id(g))
        elif with_facts and _fact(g) is not None:
            found = _path_to_module(g.source, anchors)
            if found is not None:
                anchors[found[0]].facts.append((found[1], g))
                placed.add(id(g))
    for source, group in anchors.items():
        step, base = _steps(source), getattr(source, "base", None)
        found = _path_to_module(base, anchors) if with_facts and step is not None else None
        if found is not None and len(found[1]) < _MAX_FACT_STEPS:
            parent, path = found
            anchors[parent].facts.append(((*path, *step), group))
            placed.add(id(group.match))
    steps: list[Guard | _ModuleGroup] = []
    for g in ordered:
        if id(g) in placed:
            continue
        group = anchors.get(g.source) if g.source is not None else None
        steps.append(group if group is not None and group.match is g else g)
    return steps


def _steps(src: Source) -> tuple[Any, ...] | None:
    """The one step from `src.base` to `src`, in module_spec's form: an attribute name, a
    1-tuple with an item's key, or None for `type(...)`; None (the tuple) for any other
    source, whose Python line is not a plain read."""
    t = type(src)
    if t is AttrSource:
        return (src.attr,)
    if t is ItemSource and type(src.key) in (int, str):
        return ((src.key,),)
    if t is TypeSource:
        return (None,)
    return None


def _path_to_module(
    src: Source | None, anchors: dict[Source, _ModuleGroup]
) -> tuple[Source, tuple[Any, ...]] | None:
    """The nearest grouped module `src` is read from, and the steps from it to `src`
    (`_steps`); `src` itself when it is one (no steps)."""
    path: tuple[Any, ...] = ()
    for _ in range(_MAX_FACT_STEPS + 1):
        if src is None:
            return None
        if src in anchors:
            return (src, path) if len(path) <= _MAX_FACT_STEPS else None
        step = _steps(src)
        if step is None:
            return None
        path = step + path
        src = src.base
    return None


def _fact(g: Guard) -> tuple[int, Any] | None:
    """`g` as a module spec's fact (kind, expected) when module_check can check it exactly as
    its Python line does: `x is c`, `type(x) is T`, `len(x) == n`, `list(x) == [keys]` (str
    and int keys; a build with MODULE_FACTS >= 2), and `type(x) is T and x == c` for an int, a
    str or a finite non-zero float (the lines for NaN and signed zeros say more). None for any
    other guard."""
    kind, exp = g.kind, g.expected
    if kind is GuardKind.ID_MATCH:
        return _FACT_IS, exp
    if kind is GuardKind.TYPE_MATCH and isinstance(exp, type):
        return _FACT_TYPE, exp
    if kind is GuardKind.LENGTH_CHECK and type(exp) is int and exp >= 0:
        return _FACT_LEN, exp
    if (
        kind is GuardKind.DICT_KEYS
        and getattr(_tensor_check, "MODULE_FACTS", 0) >= 2
        and all(type(k) in (str, int) for k in exp)
    ):
        return _FACT_KEYS, list(exp)
    if kind is GuardKind.CONSTANT_MATCH:
        if exp is None or exp is Ellipsis or exp is NotImplemented or type(exp) is bool:
            return _FACT_IS, exp
        if type(exp) in (int, str) or (type(exp) is float and math.isfinite(exp) and exp != 0):
            return _FACT_EQ, exp
    return None


def _module_fact_of(g: Guard) -> Source | None:
    """The module source whose `module_check` can check `g` exactly as its Python line does:
    `m`'s MODULE_NO_HOOKS, KEYS_ABSENT on `m.__dict__`, and TENSOR_MATCH (with a C++ spec) on
    `m._parameters[key]` or `m._buffers[key]`. None for any other guard."""
    src = g.source
    if g.kind is GuardKind.MODULE_NO_HOOKS:
        return src
    if g.kind is GuardKind.KEYS_ABSENT and type(src) is AttrSource and src.attr == "__dict__":
        return src.base
    if (
        g.kind is GuardKind.TENSOR_MATCH
        and g.expected.spec is not None
        and type(src) is ItemSource
        and type(src.base) is AttrSource
        and src.base.attr in ("_parameters", "_buffers")
    ):
        return src.base.base
    return None


def _module_spec(group: _ModuleGroup) -> Any:
    """The C++ form of a group: `module_check(m, spec)` holds exactly when each of the group's
    guards does."""
    match = group.match
    module, training, *cls = match.expected
    absent: list[Any] = []
    tensors = []
    for g in group.own:
        if g.kind is GuardKind.KEYS_ABSENT:
            absent.extend(g.expected)
        elif g.kind is GuardKind.TENSOR_MATCH:
            tensors.append((g.source.base.attr, g.source.key, g.expected.spec))
    no_hooks = any(g.kind is GuardKind.MODULE_NO_HOOKS for g in group.own)
    args = [module, training, cls[0] if cls else None, no_hooks, tuple(absent), tuple(tensors)]
    if group.facts:
        facts = []
        for path, fact in group.facts:
            if isinstance(fact, _ModuleGroup):
                facts.append((path, _FACT_MODULE, _module_spec(fact)))
            else:
                facts.append((path, *_fact(fact)))  # type: ignore[misc]
        args.append(tuple(facts))
    return _tensor_check.module_spec(*args)


def _describe_group(group: _ModuleGroup, depth: int = 0, name: str = "") -> list[str]:
    """What module_check checks for a group: its first line goes on the call's line, the rest
    (what was folded into it, a submodule's indented under it) as comments below it, where `m`
    is the group's module."""
    module, training, *cls = group.match.expected
    if module is None:  # shared by the instances of a layer class (frontend/dynamic.py)
        facts = [f"any {cls[0].__qualname__} (training={training})"]
    else:
        facts = [f"is the module (training={training})"]
    for g in group.own:
        if g.kind is GuardKind.MODULE_NO_HOOKS:
            facts.append("no hooks")
        elif g.kind is GuardKind.KEYS_ABSENT:
            facts.append(f"__dict__ lacks {', '.join(map(repr, g.expected))}")
        else:
            facts.append(f"{g.source.base.attr}[{g.source.key!r}]")
    module = str(group.match.source)
    lines = [f"{'  ' * depth}{name or module}: {'; '.join(facts)}"]
    for _, fact in group.facts:
        if isinstance(fact, _ModuleGroup):
            lines += _describe_group(fact, depth + 1, str(fact.match.source).replace(module, "m"))
        else:
            check = fact.check_expr(str(fact.source).replace(module, "m"), _pretty_const)
            origin = f"  ({fact.origin})" if fact.origin else ""
            lines.append(f"{'  ' * (depth + 1)}{check}{origin}")
    return lines


def compile_guards(
    guards: Sequence[Guard], argnames: Sequence[str], name: str = "guard"
) -> CompiledGuards:
    name = re.sub(r"\W", "_", name)
    ordered = _order(guards)
    consts: dict[int, tuple[str, Any]] = {}

    taken: set[str] = set()

    def const(obj: Any) -> str:
        """A readable name for `obj` inside the generated function (`___torch_float32`)."""
        entry = consts.get(id(obj))
        if entry is None:
            base = "___" + (re.sub(r"\W+", "_", _pretty_const(obj)).strip("_")[:48] or "c")
            name, i = base, 1
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            taken.add(name)
            entry = (name, obj)
            consts[id(obj)] = entry
        return entry[0]

    def emit(units: Sequence[Guard | _ModuleGroup]) -> list[tuple[list[str], str, list[str]]]:
        """(temporaries to bind first, condition, comment lines under it) for each unit: one
        guard, or a module's group, checked in one module_check call."""
        unit_sources = [
            [u.match.source] if isinstance(u, _ModuleGroup) else _sources_of(u) for u in units
        ]
        # Count how often each non-trivial source (and its prefixes) is reached.
        uses: Counter[Source] = Counter()
        for sources in unit_sources:
            for src in sources:
                for s in src.chain():
                    uses[s] += 1
        temps: dict[Source, str] = {}

        def render(src: Source) -> str:
            if src in temps:
                return temps[src]
            if isinstance(src, ConstSource):
                return const(src.value)
            if isinstance(src, GenericAttrSource):
                return f"object.__getattribute__({render(src.base)}, {src.attr!r})"
            if isinstance(src, AttrSource):
                return f"{render(src.base)}.{src.attr}"
            if isinstance(src, DictItemSource):
                return f"dict.__getitem__({render(src.base)}, {_const_or_literal(src.key, const)})"
            if isinstance(src, ItemSource):  # an enum or other object key is a named constant
                return f"{render(src.base)}[{_const_or_literal(src.key, const)}]"
            if isinstance(src, TypeSource):
                return f"type({render(src.base)})"
            if isinstance(src, MethodCallSource):
                return f"{render(src.base)}.{src.name}()"
            return src.guard_expr()

        steps: list[tuple[list[str], str, list[str]]] = []
        for unit, sources in zip(units, unit_sources):
            pre: list[str] = []
            for src in sources:
                for s in src.chain():
                    if s not in temps and uses[s] > 1 and getattr(s, "base", None) is not None:
                        temp = f"___s{len(temps)}"
                        pre.append(f"{temp} = {render(s)}")
                        temps[s] = temp
            notes: list[str] = []
            if isinstance(unit, _ModuleGroup):
                x = render(unit.match.source)
                check = f"{const(_tensor_check.module_check)}({x}, {const(_module_spec(unit))})"
                first, *notes = _describe_group(unit)
                comment = f"  # {first}"
            else:
                x = render(unit.source) if unit.source is not None else ""
                check = unit.check_expr(x, const, render)
                comment = f"  # {unit.origin}" if unit.origin else ""
            steps.append((pre, f"if not ({check}):{comment}", notes))
        return steps

    body: list[str] = []
    needs_globals = any(
        isinstance(src.root(), GlobalSource) for g in ordered for src in _sources_of(g)
    )
    if needs_globals:
        body.append("G = F.__globals__")
    params = ", ".join(["F", *(guard_param(n) for n in argnames)])
    head = [f"    {b}" for b in body]
    check_lines = [f"def {name}({params}):", *head, "    try:"]
    groups = _module_groups(ordered)
    for pre, cond, notes in emit(groups if groups is not None else ordered):
        check_lines += [f"        {p}" for p in pre]
        check_lines += [f"        {cond}", *(f"            # {n}" for n in notes)]
        check_lines.append("            return False")
    check_lines += ["    except Exception:", "        return False", "    return True"]
    # why_failed checks one guard at a time, in the same order, to name the first that fails
    why_lines = [f"def {name}_first_failure({params}):", *head]
    for index, (pre, cond, _) in enumerate(emit(ordered)):
        why_lines += ["    try:", *(f"        {p}" for p in pre)]
        why_lines += [f"        {cond}", f"            return {index}"]
        why_lines += ["    except Exception:", f"        return {index}"]
    why_lines.append("    return -1")
    check_src = "\n".join(check_lines) + "\n"
    why_src = "\n".join(why_lines) + "\n"
    scope: dict[str, Any] = {n: obj for n, obj in consts.values()}
    exec(compile(check_src, f"<framejit guards {name}>", "exec"), scope)  # noqa: S102
    exec(compile(why_src, f"<framejit guards {name} why>", "exec"), scope)  # noqa: S102
    compiled = CompiledGuards(
        guards=ordered,
        check=scope[name],
        source=check_src,
        argnames=tuple(argnames),
        _first_failure=scope[f"{name}_first_failure"],
    )
    return compiled
