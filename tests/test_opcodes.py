"""Opcode coverage: every opcode of this Python is handled or deliberately unsupported, and small
functions exercising each handled opcode give eager's result in one graph.

Each case asserts that the opcodes it is about really occur in the function's bytecode (nested
code objects included: comprehensions, inner functions), so a case cannot silently stop testing
its opcode when the compiler changes what it emits.
"""

from __future__ import annotations

import copy
import dis
import inspect
import math
import opcode
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from framejit.frontend.handlers import HANDLERS, unsupported_opcodes

import framejit
from framejit.testing import CompileCounter

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)
only_311 = pytest.mark.skipif(not PY311, reason="opcode exists only on Python 3.11")
only_312 = pytest.mark.skipif(not PY312, reason="opcode exists only on Python 3.12")
before_313 = pytest.mark.skipif(sys.version_info >= (3, 13), reason="KW_NAMES is gone in 3.13")


def opnames_in(fn: Any) -> set[str]:
    """Every opcode name in `fn`'s code and in the code objects nested in it."""
    names: set[str] = set()

    def walk(code: Any) -> None:
        names.update(inst.opname for inst in dis.get_instructions(code))
        for const in code.co_consts:
            if inspect.iscode(const):
                walk(const)

    walk(fn.__code__)
    return names


def binary_op_symbols(fn: Any) -> set[str]:
    return {i.argrepr for i in dis.get_instructions(fn) if i.opname == "BINARY_OP"}


def assert_same(got: Any, want: Any) -> None:
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.requires_grad == want.requires_grad
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_same(got[key], want[key])
    else:
        assert got == want


def check(
    fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]], *opnames: str, graphs: int = 1
) -> None:
    """`fn`'s bytecode holds `opnames`; jit gives eager's result (and eager's mutations of the
    arguments) on two calls, compiling `graphs` graphs."""
    present = opnames_in(fn)
    missing = [name for name in opnames if name not in present]
    assert not missing, f"{fn.__name__} has no {missing} on {sys.version_info[:2]}: {present}"
    torch.manual_seed(0)
    args = make_args()
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    for _ in range(2):
        eager_args, jit_args = copy.deepcopy(args), copy.deepcopy(args)
        want = fn(*eager_args)
        got = jitted(*jit_args)
        assert_same(got, want)
        assert_same(list(jit_args), list(eager_args))
    assert counter.frame_count == graphs


def t(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# --- coverage as a set difference --------------------------------------------------------------

MIN_PSEUDO = getattr(opcode, "MIN_PSEUDO_OPCODE", 256)


def real_opcodes() -> set[str]:
    """dis.opmap without 3.12's pseudo-instructions (SETUP_FINALLY, JUMP, LOAD_METHOD, ...),
    which the compiler replaces before bytecode is written."""
    return {name for name, op in dis.opmap.items() if op < MIN_PSEUDO}


def test_pseudo_opcodes_are_the_ones_dis_reports() -> None:
    pseudo = set(dis.opmap) - real_opcodes()
    if PY312:
        assert {"SETUP_FINALLY", "JUMP", "LOAD_METHOD", "POP_BLOCK"} <= pseudo
        assert all(opcode.opmap[name] >= MIN_PSEUDO for name in pseudo)
    else:
        assert pseudo == set()


def test_every_opcode_is_handled_or_listed_as_unsupported() -> None:
    missing = real_opcodes() - set(HANDLERS) - set(unsupported_opcodes())
    assert missing == set()


def test_handlers_and_unsupported_are_disjoint_real_opcodes() -> None:
    unsupported = unsupported_opcodes()
    assert set(HANDLERS) <= set(dis.opmap)
    assert set(unsupported) <= set(dis.opmap)
    assert set(HANDLERS).isdisjoint(unsupported)
    assert all(isinstance(reason, str) and reason for reason in unsupported.values())


# --- BINARY_OP -----------------------------------------------------------------------------------

FLOAT_OPS = ["+", "-", "*", "/", "//", "%", "**", "@"]
INT_OPS = ["&", "|", "^", "<<", ">>"]


def _binary_fn(symbol: str, inplace: bool) -> Callable[..., Any]:
    body = f"    x {symbol}= y\n    return x\n" if inplace else f"    return x {symbol} y\n"
    scope: dict[str, Any] = {}
    exec(f"def binary(x, y):\n{body}", scope)  # noqa: S102 - one operator per function
    return scope["binary"]


def _operands(symbol: str) -> tuple[Any, ...]:
    if symbol in INT_OPS:
        return torch.randint(0, 64, (3, 3)), torch.randint(0, 3, (3, 3))
    return torch.randn(3, 3), torch.rand(3, 3) + 0.5


@pytest.mark.parametrize("inplace", [False, True], ids=["binary", "inplace"])
@pytest.mark.parametrize("symbol", FLOAT_OPS + INT_OPS)
def test_binary_op_on_tensors(symbol: str, inplace: bool) -> None:
    fn = _binary_fn(symbol, inplace)
    assert binary_op_symbols(fn) == {symbol + "=" if inplace else symbol}
    check(fn, lambda: _operands(symbol), "BINARY_OP")


@pytest.mark.parametrize("symbol", ["+", "-", "*", "/", "//", "%", "**"])
def test_binary_op_tensor_and_python_number(symbol: str) -> None:
    scope: dict[str, Any] = {}
    body = f"    return (x {symbol} n, 2 {symbol} n, n {symbol} x.abs().add(1))\n"
    exec(f"def binary(x, n):\n{body}", scope)  # noqa: S102 - one operator per function
    check(scope["binary"], lambda: (torch.randn(4), 3), "BINARY_OP")


def test_binary_op_on_sequences() -> None:
    def fn(x: torch.Tensor, xs: list[torch.Tensor]) -> Any:
        both = xs + [x]
        both += [x * 2]
        pair = (x,) * 2
        return torch.stack(both).sum(0), pair

    check(fn, lambda: (t(3), [t(3), t(3)]), "BINARY_OP")


# --- comparisons, is, in, unary ----------------------------------------------------------------


def compare(x: torch.Tensor, y: torch.Tensor) -> Any:
    return x < y, x <= y, x == y, x != y, x > y, x >= y, x.shape[0] > 2, x.dim() == 2


def test_compare_op() -> None:
    check(compare, lambda: (t(3, 2), t(3, 2)), "COMPARE_OP")


def test_chained_comparison_uses_copy_and_swap() -> None:
    def fn(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * (1 if 0 < n < x.shape[0] else 2)

    check(fn, lambda: (t(5), 3), "COPY", "SWAP", "COMPARE_OP")


def is_none(x: torch.Tensor, y: Any) -> torch.Tensor:
    flag = y is None
    other = y is not None
    return x + 1 if flag and not other else x - 1


def test_is_op() -> None:
    check(is_none, lambda: (t(3), None), "IS_OP")
    check(is_none, lambda: (t(3), 5), "IS_OP")


def test_is_op_on_objects() -> None:
    def fn(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        same = x.dtype is dtype
        return x * 2 if same else x.to(dtype)

    check(fn, lambda: (t(3), torch.float32), "IS_OP")
    check(fn, lambda: (t(3), torch.float64), "IS_OP")


def contains(x: torch.Tensor, mode: str, d: dict[str, Any]) -> torch.Tensor:
    if mode in ("a", "b"):
        x = x + 1
    if mode not in ["c"]:
        x = x * 2
    if "k" in d:
        x = x + d["k"]
    return x


def test_contains_op() -> None:
    check(contains, lambda: (t(3), "a", {"k": 3}), "CONTAINS_OP")
    check(contains, lambda: (t(3), "c", {"k": 2}), "CONTAINS_OP")


def unary(x: torch.Tensor, flag: bool) -> Any:
    mask = x > 0
    return -x, ~mask, not flag, -x.shape[0]


def test_unary_ops() -> None:
    check(unary, lambda: (t(4), True), "UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_NOT")


def positive(x: torch.Tensor) -> torch.Tensor:
    return +x


@only_311
def test_unary_positive() -> None:
    check(positive, lambda: (t(3),), "UNARY_POSITIVE")


@only_312
def test_call_intrinsic_unary_positive() -> None:
    check(positive, lambda: (t(3),), "CALL_INTRINSIC_1")


# --- unpacking and building --------------------------------------------------------------------


def unpack(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2)
    (c, d), e = (a, b), 3
    return a + b + c * d + e


def test_unpack_sequence() -> None:
    check(unpack, lambda: (t(4),), "UNPACK_SEQUENCE")


def unpack_ex(x: torch.Tensor) -> Any:
    first, *middle, last = x.unbind(0)
    *init, tail = (1, 2, 3)
    return first + last + sum(middle), init, tail


def test_unpack_ex() -> None:
    check(unpack_ex, lambda: (t(5, 2),), "UNPACK_EX")


def builds(x: torch.Tensor, y: torch.Tensor, key: str) -> Any:
    pair = (x, y)
    items = [x, y]
    mapping = {key: x, "other": y}
    return pair[0] + items[1] + mapping[key], pair, items, mapping


def test_build_tuple_list_map() -> None:
    check(builds, lambda: (t(3), t(3), "k"), "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP")


def const_key_map(x: torch.Tensor, y: torch.Tensor) -> Any:
    d = {"a": x, "b": y}
    return d["a"] * d["b"], d


def test_build_const_key_map() -> None:
    check(const_key_map, lambda: (t(3), t(3)), "BUILD_CONST_KEY_MAP")


def slices(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[::2][:n] + x[1 : n + 1 : 1]


def test_build_slice() -> None:
    check(slices, lambda: (t(8), 3), "BUILD_SLICE", "BINARY_SUBSCR")


def two_part_slices(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[1:3] = x[0:2] * 2
    return y


@only_312
def test_binary_slice_and_store_slice() -> None:
    check(two_part_slices, lambda: (t(6),), "BINARY_SLICE", "STORE_SLICE")


def formatted(x: torch.Tensor, n: int, name: str) -> torch.Tensor:
    label = f"{name}-{n:03d}-{n!r}-{3.5:.1f}"
    return x * len(label)


def test_build_string_and_format_value_on_constants() -> None:
    check(formatted, lambda: (t(3), 7, "layer"), "BUILD_STRING", "FORMAT_VALUE")


def sets(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
    return x * len({a, b, 1})


def test_build_set() -> None:
    check(sets, lambda: (t(3), 2, 2), "BUILD_SET")


def set_comprehension(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * len({i % 3 for i in range(n)})


def test_set_add() -> None:
    check(set_comprehension, lambda: (t(3), 5), "SET_ADD")


def returns_a_set(x: torch.Tensor, a: int, b: int) -> Any:
    return x + 1, {a, b}


def test_set_built_in_the_frame_is_returned_as_a_set() -> None:
    check(returns_a_set, lambda: (t(3), 1, 2), "BUILD_SET")


def list_extend(x: torch.Tensor, ys: list[torch.Tensor]) -> torch.Tensor:
    items = [x, *ys, x]
    return torch.stack(items).sum(0)


def test_list_extend() -> None:
    check(list_extend, lambda: (t(3), [t(3), t(3)]), "LIST_EXTEND")


def star_tuple(x: torch.Tensor, ys: tuple[torch.Tensor, ...]) -> torch.Tensor:
    both = (*ys, *ys)
    return x + sum(both)


@only_311
def test_list_to_tuple() -> None:
    check(star_tuple, lambda: (t(3), (t(3), t(3))), "LIST_TO_TUPLE")


@only_312
def test_call_intrinsic_list_to_tuple() -> None:
    check(star_tuple, lambda: (t(3), (t(3), t(3))), "CALL_INTRINSIC_1")


def dict_merge(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    def combine(a: torch.Tensor, b: torch.Tensor, c: float = 1.0) -> torch.Tensor:
        return a * b + c

    kwargs = {"b": y}
    return combine(x, **kwargs, c=2.0)


def test_dict_merge() -> None:
    check(dict_merge, lambda: (t(3), t(3)), "DICT_MERGE", "CALL_FUNCTION_EX")


def dict_update(x: torch.Tensor, y: torch.Tensor) -> Any:
    extra = {"b": y}
    d = {"a": x, **extra}
    return d["a"] + d["b"], d


def test_dict_update() -> None:
    check(dict_update, lambda: (t(3), t(3)), "DICT_UPDATE")


def delete_subscr(x: torch.Tensor) -> Any:
    d = {"a": x, "b": x * 2}
    del d["a"]
    items = [x, x + 1]
    del items[0]
    return d, items


def test_delete_subscr() -> None:
    check(delete_subscr, lambda: (t(3),), "DELETE_SUBSCR")


# --- calls -------------------------------------------------------------------------------------


def star_call(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    args = (x, y)
    return torch.add(*args, alpha=2)


def test_call_function_ex() -> None:
    check(star_call, lambda: (t(3), t(3)), "CALL_FUNCTION_EX")


def keywords(x: torch.Tensor) -> torch.Tensor:
    return torch.sum(x, dim=0, keepdim=True) + x.mean(dim=1, keepdim=True)


@before_313
def test_kw_names() -> None:
    check(keywords, lambda: (t(3, 4),), "KW_NAMES", "CALL")


@only_311
def test_precall() -> None:
    check(keywords, lambda: (t(3, 4),), "PRECALL")


def closure(x: torch.Tensor, k: float) -> torch.Tensor:
    def inner(y: torch.Tensor) -> torch.Tensor:
        return y * k + x

    return inner(x)


def test_make_function_with_closure() -> None:
    check(
        closure,
        lambda: (t(3), 2.0),
        "MAKE_FUNCTION",
        "LOAD_CLOSURE",
        "LOAD_DEREF",
        "MAKE_CELL",
        "COPY_FREE_VARS",
    )


def store_deref(x: torch.Tensor) -> torch.Tensor:
    k = 1

    def inner(y: torch.Tensor) -> torch.Tensor:
        return y * k

    k = 3
    return inner(x)


def test_store_deref() -> None:
    check(store_deref, lambda: (t(3),), "STORE_DEREF", "LOAD_DEREF")


def with_defaults(x: torch.Tensor) -> torch.Tensor:
    def inner(y: torch.Tensor, scale: float = 2.0, *, shift: float = 1.0) -> torch.Tensor:
        return y * scale + shift

    return inner(x) + inner(x, 3.0, shift=0.5)


def test_make_function_with_defaults() -> None:
    check(with_defaults, lambda: (t(3),), "MAKE_FUNCTION")


def comprehensions(x: torch.Tensor) -> Any:
    scaled = [x * i for i in range(3)]
    by_key = {i: x + i for i in range(2)}
    return sum(scaled), by_key


def test_comprehensions() -> None:
    check(comprehensions, lambda: (t(3),), "LIST_APPEND", "MAP_ADD")


@only_312
def test_inlined_comprehension_load_fast_and_clear() -> None:
    check(comprehensions, lambda: (t(3),), "LOAD_FAST_AND_CLEAR", "END_FOR")


def import_inside(x: torch.Tensor) -> torch.Tensor:
    import math

    return x * math.pi + math.sqrt(4.0)


def test_import_name() -> None:
    check(import_inside, lambda: (t(3),), "IMPORT_NAME")


def import_from(x: torch.Tensor) -> torch.Tensor:
    from math import sqrt

    from torch.nn import functional

    return functional.relu(x) * sqrt(2.0)


def test_import_from() -> None:
    check(import_from, lambda: (t(3),), "IMPORT_NAME", "IMPORT_FROM")


# --- attributes, subscripts, locals --------------------------------------------------------------


def attributes(x: torch.Tensor) -> torch.Tensor:
    return x.T.relu() + x.shape[0] + math.e


def test_load_attr() -> None:
    check(attributes, lambda: (t(3, 3),), "LOAD_ATTR", "LOAD_GLOBAL")


@only_311
def test_load_method() -> None:
    check(attributes, lambda: (t(3, 3),), "LOAD_METHOD")


def subscripts(x: torch.Tensor, i: int) -> torch.Tensor:
    y = x.clone()
    y[0] = x[1] * 2
    y[:, i] = 0.0
    y[x[:, 0] > 100] = 1.0
    return y


def test_binary_subscr_and_store_subscr_on_tensors() -> None:
    check(subscripts, lambda: (t(4, 3), 1), "BINARY_SUBSCR", "STORE_SUBSCR")


def inplace_on_input(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x[0] = y.sum()
    x += 1
    return x * 2


def test_store_subscr_and_inplace_op_on_an_input() -> None:
    check(inplace_on_input, lambda: (t(3), t(2)), "STORE_SUBSCR", "BINARY_OP")


def delete_fast(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    del y
    y = x * 2
    return y


def test_delete_fast() -> None:
    check(delete_fast, lambda: (t(3),), "DELETE_FAST")


def maybe_unbound(x: torch.Tensor, flag: bool) -> torch.Tensor:
    if flag:
        y = x + 1
    return y


@only_312
def test_load_fast_check() -> None:
    check(maybe_unbound, lambda: (t(3), True), "LOAD_FAST_CHECK")


def returns_constant(x: torch.Tensor) -> None:
    x.mul_(2)


@only_312
def test_return_const() -> None:
    check(returns_constant, lambda: (t(3),), "RETURN_CONST")


# pytest rewrites `assert` in test modules, so this function is compiled from text.
_ASSERTION_SOURCE = """
def assertion(x):
    assert x.dim() == 1, "expects a vector"
    return x + 1
"""


def test_load_assertion_error_on_a_passing_assert() -> None:
    scope: dict[str, Any] = {}
    exec(compile(_ASSERTION_SOURCE, "<assertion>", "exec"), scope)  # noqa: S102
    check(scope["assertion"], lambda: (t(3),), "LOAD_ASSERTION_ERROR")


# --- loops and jumps ---------------------------------------------------------------------------


def for_loops(x: torch.Tensor, ys: list[torch.Tensor]) -> torch.Tensor:
    out = x
    for i in range(3):
        out = out + i
    for y in ys:
        out = out * y
    for i, y in enumerate(ys):
        out = out - i * y
    return out


def test_for_iter_and_get_iter() -> None:
    check(for_loops, lambda: (t(3), [t(3), t(3)]), "FOR_ITER", "GET_ITER", "JUMP_BACKWARD")


def while_loop(x: torch.Tensor, n: int) -> torch.Tensor:
    i = 0
    while i < n:
        x = x + 1
        i += 1
    return x


def test_while_loop() -> None:
    names = ("POP_JUMP_BACKWARD_IF_TRUE",) if PY311 else ("JUMP_BACKWARD",)
    check(while_loop, lambda: (t(3), 4), *names)


def break_continue(x: torch.Tensor) -> torch.Tensor:
    for i in range(10):
        if i % 2:
            continue
        if i > 5:
            break
        x = x + i
    return x


def test_break_and_continue() -> None:
    check(break_continue, lambda: (t(3),), "JUMP_BACKWARD", "FOR_ITER")


def branches(x: torch.Tensor, flag: bool, bias: Any) -> torch.Tensor:
    if flag:
        x = x + 1
    else:
        x = x - 1
    if bias is not None:
        x = x + bias
    if bias is None:
        x = x * 2
    return x


@only_311
def test_pop_jump_forward_311() -> None:
    for args in (lambda: (t(3), True, None), lambda: (t(3), False, t(3))):
        check(
            branches,
            args,
            "POP_JUMP_FORWARD_IF_FALSE",
            "POP_JUMP_FORWARD_IF_NONE",
            "POP_JUMP_FORWARD_IF_NOT_NONE",
            "JUMP_FORWARD",
        )


@only_312
def test_pop_jump_312() -> None:
    for args in (lambda: (t(3), True, None), lambda: (t(3), False, t(3))):
        check(branches, args, "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")


def short_circuit(x: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
    value = a and b
    other = a or b
    return x * (value + other)


@only_311
def test_jump_if_or_pop() -> None:
    check(short_circuit, lambda: (t(3), 2, 3), "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP")
    check(short_circuit, lambda: (t(3), 0, 3), "JUMP_IF_FALSE_OR_POP")


@only_312
def test_short_circuit_values_312() -> None:
    check(short_circuit, lambda: (t(3), 2, 3), "COPY", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE")
    check(short_circuit, lambda: (t(3), 0, 3), "COPY")


def try_without_exception(x: torch.Tensor) -> torch.Tensor:
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    return y * 2


def test_try_block_that_does_not_raise_is_captured() -> None:
    check(try_without_exception, lambda: (t(3),), "PUSH_EXC_INFO", "CHECK_EXC_MATCH")


# --- unsupported opcodes: the frame runs eagerly, the log says which and where -----------------


def with_block(x: torch.Tensor, cm: Any) -> torch.Tensor:
    y = x + 1
    with cm:
        y = y * 2
    return y


def catches(x: torch.Tensor, error: Exception) -> torch.Tensor:
    try:
        raise error
    except ValueError:
        y = x - 1
    return y


def generator(x: torch.Tensor) -> Any:
    for i in range(3):
        yield x * i


LAST_INPUT: Any = None


def writes_a_global(x: torch.Tensor) -> torch.Tensor:
    global LAST_INPUT
    LAST_INPUT = x
    return x + 1


class Box:
    pass


def sets_an_attribute(x: torch.Tensor, box: Box) -> torch.Tensor:
    box.value = x * 2
    return x + 1


def deletes_a_cell(x: torch.Tensor) -> torch.Tensor:
    y = 1

    def read() -> torch.Tensor:
        return y  # noqa: F821 - a cell the function deletes (DELETE_DEREF)

    del y
    return x * 2


# Opcodes with no break point (a class statement is a break: test_graph_breaks.py; `match` is
# captured: test_match.py).
UNSUPPORTED_CASES = [
    pytest.param(deletes_a_cell, lambda: (t(3),), "DELETE_DEREF", "del y", id="del-cell"),
]


@pytest.mark.parametrize(("fn", "make_args", "opname", "text"), UNSUPPORTED_CASES)
def test_unsupported_opcode_runs_eagerly(
    fn: Callable[..., Any],
    make_args: Callable[[], tuple[Any, ...]],
    opname: str,
    text: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert opname in opnames_in(fn)
    assert opname in unsupported_opcodes() and opname not in HANDLERS
    framejit.set_logs(graph_breaks=True)
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    args = make_args()
    for _ in range(2):
        want, got = fn(*args), jitted(*args)
        if inspect.isgenerator(want):
            want, got = list(want), list(got)
        assert_same(got, want)
    assert counter.frame_count == 0
    err = capsys.readouterr().err
    lines, start = inspect.getsourcelines(fn)
    line = start + next(i for i, source in enumerate(lines) if text in source)
    assert "[framejit:graph_breaks]" in err
    assert f"`{opname}`" in err
    assert f"{__file__}:{line}" in err
    assert err.count("[framejit:graph_breaks] running") == 1  # the eager entry is reused


def test_raise_inside_try_runs_the_handler_as_python() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(catches, backend=counter)
    x = t(3)
    for _ in range(2):
        assert_same(jitted(x, ValueError("boom")), catches(x, ValueError("boom")))
    with pytest.raises(KeyError, match="other"):
        jitted(x, KeyError("other"))


def test_with_over_an_unknown_context_manager_enters_it_for_real_at_a_break(
    capsys: pytest.CaptureFixture[str],
) -> None:
    framejit.set_logs(graph_breaks=True)
    counter = CompileCounter()
    jitted = framejit.jit(with_block, backend=counter)
    x = t(3)
    lock = threading.Lock()  # a C context manager: not inlined
    for _ in range(2):
        assert_same(jitted(x, lock), with_block(x, lock))
    assert counter.frame_count == 2  # `x + 1` before the block; `y * 2` inside it
    assert not lock.locked()
    err = capsys.readouterr().err
    assert "`with` over a lock" in err
    assert f"{__file__}:{inspect.getsourcelines(with_block)[1] + 2}" in err


def grad_mode_blocks(x: torch.Tensor, w: torch.Tensor) -> Any:
    with torch.no_grad():
        frozen = x * w
    with torch.enable_grad():
        live = x * w
    with torch.set_grad_enabled(False):
        off = live * 2
    return frozen, live, off


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_grad_mode_with_blocks_are_captured(backend: str) -> None:
    assert "BEFORE_WITH" in opnames_in(grad_mode_blocks)
    jitted = framejit.jit(grad_mode_blocks, backend=backend)
    x, w = t(3), t(3).requires_grad_()
    for _ in range(2):
        got, want = jitted(x, w), grad_mode_blocks(x, w)
        assert_same(got, want)
        assert [g.requires_grad for g in got] == [v.requires_grad for v in want]
    assert torch.is_grad_enabled()
    assert framejit.explain(grad_mode_blocks, x, w).graph_count == 1


def test_a_bare_set_grad_enabled_persists_like_eager() -> None:
    def switches_off(x: torch.Tensor) -> torch.Tensor:
        torch.set_grad_enabled(False)
        return x * 2

    jitted = framejit.jit(switches_off, backend=CompileCounter())
    try:
        assert not jitted(t(3).requires_grad_()).requires_grad
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)


def test_a_generator_function_itself_runs_eagerly_and_stays_a_generator() -> None:
    counter = CompileCounter()
    jitted = framejit.jit(generator, backend=counter)
    x = t(3)
    for _ in range(2):
        got = jitted(x)
        assert inspect.isgenerator(got)
        assert_same(list(got), list(generator(x)))
    assert counter.frame_count == 0


def consumes_generators(x: torch.Tensor) -> torch.Tensor:
    total = sum(x * i for i in range(3))
    return torch.stack(list(generator(x))) + total


def test_generators_consumed_in_the_frame_are_captured() -> None:
    assert "RETURN_GENERATOR" in {i.opname for i in dis.get_instructions(generator)}
    assert {"RETURN_GENERATOR", "YIELD_VALUE"} <= set(HANDLERS)
    counter = CompileCounter()
    jitted = framejit.jit(consumes_generators, backend=counter)
    x = t(3)
    for _ in range(2):
        assert_same(jitted(x), consumes_generators(x))
    assert counter.frame_count == 1


def test_global_and_attribute_writes_are_replayed_after_the_graph(
    capsys: pytest.CaptureFixture[str],
) -> None:
    framejit.set_logs(graph_breaks=True)
    assert "STORE_GLOBAL" in opnames_in(writes_a_global)
    assert "STORE_ATTR" in opnames_in(sets_an_attribute)
    box = Box()
    global_counter, attr_counter = CompileCounter(), CompileCounter()
    jitted_global = framejit.jit(writes_a_global, backend=global_counter)
    jitted_attr = framejit.jit(sets_an_attribute, backend=attr_counter)
    for _ in range(3):
        x = t(3)
        assert_same(jitted_global(x), x + 1)
        assert LAST_INPUT is x
        assert_same(jitted_attr(x, box), x + 1)
        assert_same(box.value, x * 2)
    assert global_counter.frame_count == 1 and attr_counter.frame_count == 1
    assert "[framejit:graph_breaks]" not in capsys.readouterr().err


def test_raising_like_eager() -> None:
    def raises(x: torch.Tensor, error: Exception) -> torch.Tensor:
        x = x + 1
        raise error

    jitted = framejit.jit(raises, backend="eager")
    with pytest.raises(KeyError, match="missing"):
        jitted(t(3), KeyError("missing"))
