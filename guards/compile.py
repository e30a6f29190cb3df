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
        return "; actual: a TorchFunctionMode or TorchDispatchMode of the user's is active"
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


def _module_groups(ordered: Sequence[Guard]) -> list[list[Guard]] | None:
    """With the C++ accelerator, the check's steps: a module's MODULE_MATCH guard (the first of
    its step) with the module's own facts (`_module_fact_of`), checked in one `module_check`
    call in its place, where the module's base has been checked; every other guard alone.
    None without the accelerator."""
    if not cpp_tensor_guards() or not hasattr(_tensor_check, "module_spec"):
        return None
    units: list[list[Guard]] = []
    anchors: dict[Source, list[Guard]] = {}
    for g in ordered:
        units.append([g])
        if g.kind is GuardKind.MODULE_MATCH and type(g.expected[1]) is bool:
            anchors.setdefault(g.source, units[-1])
    steps: list[list[Guard]] = []
    for unit in units:
        module = _module_fact_of(unit[0])
        if module in anchors:
            anchors[module].append(unit[0])
        else:
            steps.append(unit)
    return steps


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


def _module_spec(group: list[Guard]) -> Any:
    """The C++ form of a MODULE_MATCH group: `module_check(m, spec)` holds exactly when each of
    the group's guards does."""
    match = group[0]
    module, training, *cls = match.expected
    absent: list[Any] = []
    tensors = []
    for g in group[1:]:
        if g.kind is GuardKind.KEYS_ABSENT:
            absent.extend(g.expected)
        elif g.kind is GuardKind.TENSOR_MATCH:
            tensors.append((g.source.base.attr, g.source.key, g.expected.spec))
    no_hooks = any(g.kind is GuardKind.MODULE_NO_HOOKS for g in group)
    return _tensor_check.module_spec(
        module, training, cls[0] if cls else None, no_hooks, tuple(absent), tuple(tensors)
    )


def _describe_group(group: list[Guard]) -> str:
    """The comment on a group's line: what module_check checks there."""
    facts = [f"is the module (training={group[0].expected[1]})"]
    for g in group[1:]:
        if g.kind is GuardKind.MODULE_NO_HOOKS:
            facts.append("no hooks")
        elif g.kind is GuardKind.KEYS_ABSENT:
            facts.append(f"__dict__ lacks {', '.join(map(repr, g.expected))}")
        else:
            facts.append(f"{g.source.base.attr}[{g.source.key!r}]")
    return f"{group[0].source}: {'; '.join(facts)}"


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

    def emit(units: list[list[Guard]], grouped: bool) -> list[tuple[list[str], str]]:
        """(temporaries to bind first, condition) for each unit: one guard, or (`grouped`) a
        module's MODULE_MATCH and its facts, checked in one module_check call."""
        unit_sources = [_sources_of(u[0]) if len(u) == 1 else [u[0].source] for u in units]
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

        steps: list[tuple[list[str], str]] = []
        for unit, sources in zip(units, unit_sources):
            pre: list[str] = []
            for src in sources:
                for s in src.chain():
                    if s not in temps and uses[s] > 1 and getattr(s, "base", None) is not None:
                        temp = f"___s{len(temps)}"
                        pre.append(f"{temp} = {render(s)}")
                        temps[s] = temp
            g = unit[0]
            x = render(g.source) if g.source is not None else ""
            if grouped and g.kind is GuardKind.MODULE_MATCH:
                check = f"{const(_tensor_check.module_check)}({x}, {const(_module_spec(unit))})"
                comment = f"  # {_describe_group(unit)}"
            else:
                check = g.check_expr(x, const, render)
                comment = f"  # {g.origin}" if g.origin else ""
            steps.append((pre, f"if not ({check}):{comment}"))
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
    for pre, cond in emit(groups, True) if groups else emit([[g] for g in ordered], False):
        check_lines += [f"        {p}" for p in pre]
        check_lines += [f"        {cond}", "            return False"]
    check_lines += ["    except Exception:", "        return False", "    return True"]
    # why_failed checks one guard at a time, in the same order, to name the first that fails
    why_lines = [f"def {name}_first_failure({params}):", *head]
    for index, (pre, cond) in enumerate(emit([[g] for g in ordered], False)):
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
