"""Run a small program eagerly and under `framejit.jit`, and compare the two.

The corpus predicts how framejit does on code it has never seen, so every case is an
ordinary PyTorch program checked the same way (`check`):

- Inputs come from a zero-argument factory `make()`, called once under a fixed seed.
  Every run (one eager, two compiled, and a second eager run to pair with the second
  compiled one) gets its own `copy.deepcopy` of them, so in-place ops never leak.
- The thing compiled is either the program itself or what a zero-argument `build()`
  returns (a closure, a bound method, an `nn.Module`), built once under the same seed.
  An `nn.Module` is deep-copied for the eager runs; the compiled module shares the
  original's parameters, so their states are compared after each run.
- Compiled results must equal eager ones: tensors by `torch.testing.assert_close` (dtype,
  device, shape, values) plus `requires_grad`; containers, namedtuples, structseqs,
  `torch.Size`, dataclasses and Python scalars by exact type and value.
- Inputs the program mutates in place must end up equal to eager's mutated inputs.
- Identity: a tensor eager returns as-is (an input, a parameter or buffer, or one tensor
  returned twice) must be the same object in the compiled run (`identity=False` turns
  this off for a case).
- `framejit` compiles exactly `graphs` graphs over both compiled calls (or one of the
  counts, when `graphs` is a tuple): the second call reuses the first's entry.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import logging
import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

SEED = 0

# Graphs allowed for a program that does no tensor work at all (returns an input, a
# constant, or a number derived from shapes): there is nothing to compute, so compiling
# no graph and compiling one empty graph are both right.
EMPTY = (0, 1)

# Pass `fullgraph=True` when a case expects at most one graph, so a graph break fails
# with framejit's own message naming the construct instead of a bare count mismatch.
FULLGRAPH_WHEN_ONE_GRAPH = True

# `jit(dynamic=...)` for every case. tests/test_dynamic_corpus.py sets True: every size symbolic
# from the first call; results must still equal eager's, graph and break counts may differ
# (an op without symbolic-size support is a break there), so they are not checked.
DYNAMIC: bool | None = None

# Python floats compared as a float32 tensor's values are (`assert_close`'s float32 tolerances,
# or the case's), not exactly: set by tests/backend/triton/test_corpus_triton.py when the
# Triton kernels run on a GPU, where a float read from a kernel's result (`.item()` of a mean)
# may differ from eager's in its last bits (another reduction order, FMA contraction).
CLOSE_FLOATS = False


@dataclasses.dataclass
class Call:
    """Positional and keyword arguments for one call of a program."""

    args: tuple
    kwargs: dict


def call(*args: Any, **kwargs: Any) -> Call:
    return Call(args, kwargs)


def rand(*shape: int, dtype: torch.dtype = torch.float32, grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=grad)


def ints(high: int, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(0, high, shape, dtype=dtype)


def bools(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) > 0.5


# ---------------------------------------------------------------------------------------
# comparing results


def assert_same(actual: Any, expected: Any, path: str = "out", rtol=None, atol=None) -> None:
    """Compiled `actual` equals eager `expected`: same types all the way down, close tensors."""
    if type(actual) is not type(expected):
        raise AssertionError(
            f"{path}: type {type(actual).__qualname__} != eager {type(expected).__qualname__}"
        )
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(
            actual,
            expected,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m: f"{path}: {m}",
        )
        if actual.requires_grad != expected.requires_grad:
            raise AssertionError(
                f"{path}: requires_grad {actual.requires_grad} != eager {expected.requires_grad}"
            )
    elif isinstance(expected, nn.Module):
        assert_same(actual.state_dict(), expected.state_dict(), f"{path}.state_dict()", rtol, atol)
        if actual.training != expected.training:
            raise AssertionError(f"{path}.training {actual.training} != eager {expected.training}")
    elif dataclasses.is_dataclass(expected):
        for field in dataclasses.fields(expected):
            assert_same(
                getattr(actual, field.name),
                getattr(expected, field.name),
                f"{path}.{field.name}",
                rtol,
                atol,
            )
    elif isinstance(expected, (tuple, list)):
        if len(actual) != len(expected):
            raise AssertionError(f"{path}: length {len(actual)} != eager {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{i}]", rtol, atol)
    elif isinstance(expected, dict):
        if list(actual) != list(expected):
            raise AssertionError(f"{path}: keys {list(actual)} != eager {list(expected)}")
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}[{key!r}]", rtol, atol)
    elif type(expected).__eq__ is object.__eq__ and hasattr(expected, "__dict__"):
        # a plain user object (no __eq__ of its own): compare its attributes
        assert_same(vars(actual), vars(expected), f"{path}.__dict__", rtol, atol)
    elif isinstance(expected, float) and math.isnan(expected):
        if not math.isnan(actual):
            raise AssertionError(f"{path}: {actual!r} != eager nan")
    elif CLOSE_FLOATS and isinstance(expected, float):
        torch.testing.assert_close(
            actual,
            expected,
            rtol=1.3e-6 if rtol is None else rtol,
            atol=1e-5 if atol is None else atol,
            msg=lambda m: f"{path}: {actual!r} != eager {expected!r}: {m}",
        )
    elif actual != expected:
        raise AssertionError(f"{path}: {actual!r} != eager {expected!r}")


def tensor_leaves(value: Any, path: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor reachable through containers, dataclasses and modules, with its path."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, nn.Module):
        for name, tensor in value.named_parameters():
            yield f"{path}.{name}", tensor
        for name, tensor in value.named_buffers():
            yield f"{path}.{name}", tensor
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from tensor_leaves(getattr(value, field.name), f"{path}.{field.name}")
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from tensor_leaves(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensor_leaves(item, f"{path}[{key!r}]")


def assert_identity(
    out: Any, inputs: dict[str, Any], eager_out: Any, eager_inputs: dict[str, Any]
) -> None:
    """Where eager returned a tensor as-is (an input, or one tensor twice), so must compiled."""
    eager_input_paths: dict[int, str] = {}
    for name, value in eager_inputs.items():
        for path, tensor in tensor_leaves(value, name):
            eager_input_paths.setdefault(id(tensor), path)
    compiled_inputs = {
        path: tensor
        for name, value in inputs.items()
        for path, tensor in tensor_leaves(value, name)
    }
    eager_leaves = list(tensor_leaves(eager_out, "out"))
    compiled_leaves = dict(tensor_leaves(out, "out"))
    first_seen: dict[int, str] = {}
    for path, tensor in eager_leaves:
        got = compiled_leaves[path]
        if id(tensor) in eager_input_paths:
            source = eager_input_paths[id(tensor)]
            if got is not compiled_inputs[source]:
                raise AssertionError(
                    f"{path}: eager returns input {source} itself; compiled returns another tensor"
                )
        if id(tensor) in first_seen:
            earlier = first_seen[id(tensor)]
            if got is not compiled_leaves[earlier]:
                raise AssertionError(
                    f"{path}: eager returns the same tensor as {earlier}; compiled returns two"
                )
        else:
            first_seen[id(tensor)] = path


# ---------------------------------------------------------------------------------------
# running one case


def _arguments(make: Callable[[], Any]) -> Call:
    torch.manual_seed(SEED)
    made = make()
    if isinstance(made, Call):
        return made
    assert isinstance(made, tuple), "make() must return a tuple of arguments or call(...)"
    return Call(made, {})


def _run(fn: Callable, arguments: Call, grad: bool | None) -> tuple[Any, Call]:
    arguments = copy.deepcopy(arguments)
    with torch.set_grad_enabled(torch.is_grad_enabled() if grad is None else grad):
        out = fn(*arguments.args, **arguments.kwargs)
    return out, arguments


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelno, record.getMessage()))


@contextlib.contextmanager
def _captured_output() -> Iterator[dict[str, Any]]:
    """What a program prints, logs (every logger, DEBUG and up) and warns, in order."""
    seen: dict[str, Any] = {}
    stdout = io.StringIO()
    handler = _Records()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(stdout):
            warnings.simplefilter("always")
            yield seen
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    seen["stdout"] = stdout.getvalue()
    seen["logs"] = [r for r in handler.records if not r[0].startswith("framejit")]
    seen["warnings"] = [
        (w.category.__name__, str(w.message)) for w in caught if "framejit" not in str(w.message)
    ]


def _module_copy(module: nn.Module) -> nn.Module:
    """A deep copy for the eager runs, laid out as the original: a copied RNN's weights are
    separate tensors, no longer one chunk, and on CUDA cuDNN warns about that at every call."""
    copied = copy.deepcopy(module)
    for sub in copied.modules():
        if isinstance(sub, nn.RNNBase):
            sub.flatten_parameters()
    return copied


def _named(fn: Any, arguments: Call) -> dict[str, Any]:
    named: dict[str, Any] = {f"args[{i}]": a for i, a in enumerate(arguments.args)}
    named.update({f"kwargs[{k!r}]": v for k, v in arguments.kwargs.items()})
    if isinstance(fn, nn.Module):
        named["fn"] = fn
    return named


class _Any(tuple):
    """Any graph count (DYNAMIC runs)."""


counter_any = _Any()


def check(
    fn: Callable | None,
    make: Callable[[], Any],
    *,
    graphs: int | tuple[int, ...] = 1,
    build: Callable[[], Any] | None = None,
    grad: bool | None = None,
    identity: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    fullgraph: bool | None = None,
    output: bool = False,
    breaks: int | tuple[int, ...] | None = None,
    setup: Callable[[], Any] | None = None,
    observe: Callable[[], Any] | None = None,
    separate_eager: bool = False,
) -> None:
    """Compare `framejit.jit(fn)` with eager `fn` on inputs from `make()`; see the module doc.

    `build`, when given instead of `fn`, makes the thing to compile (under the fixed seed).
    `grad` runs every call with grad mode on (True) or off (False); None leaves it as is.

    Optional extras (all off by default):
    `output=True` compares what each call prints to stdout, logs and warns with eager's;
    `breaks` is the graph break count `framejit.explain` must report for one call;
    `setup()` runs before every call (eager and compiled), e.g. to reset global state;
    `observe()` runs after every call and its result must equal eager's;
    `separate_eager=True` calls `build()` again (same seed) for the eager side instead of
    sharing one object, for callables that carry their own state (closures with counters).
    """
    import framejit.testing  # also binds `framejit`; imported here so cases load without it

    if build is not None:
        assert fn is None, "give fn or build, not both"
        torch.manual_seed(SEED)
        fn = build()
    assert fn is not None
    arguments = _arguments(make)
    if separate_eager:
        assert build is not None, "separate_eager needs build"
        torch.manual_seed(SEED)
        eager_fn = build()
    else:
        eager_fn = _module_copy(fn) if isinstance(fn, nn.Module) else fn

    counter = framejit.testing.CompileCounter()
    if fullgraph is None:
        fullgraph = (
            FULLGRAPH_WHEN_ONE_GRAPH
            and max(graphs if isinstance(graphs, tuple) else (graphs,)) <= 1
        )
    if DYNAMIC is not None:
        fullgraph, graphs, breaks = False, counter_any, None
    compiled_fn = framejit.jit(fn, backend=counter, fullgraph=fullgraph, dynamic=DYNAMIC)

    def one_run(f: Callable) -> tuple[Any, Call, dict[str, Any], Any]:
        if setup is not None:
            setup()
        seen: dict[str, Any] = {}
        if output:
            with _captured_output() as seen:
                out, args = _run(f, arguments, grad)
        else:
            out, args = _run(f, arguments, grad)
        return out, args, seen, observe() if observe is not None else None

    for run in ("first call", "second call"):
        eager_out, eager_args, eager_seen, eager_state = one_run(eager_fn)
        out, args, seen, state = one_run(compiled_fn)
        where = f"{run}: "
        try:
            assert_same(out, eager_out, "out", rtol, atol)
            assert_same(args.args, eager_args.args, "args (after the call)", rtol, atol)
            assert_same(args.kwargs, eager_args.kwargs, "kwargs (after the call)", rtol, atol)
            if isinstance(fn, nn.Module):
                assert_same(fn, eager_fn, "module (after the call)", rtol, atol)
            if identity:
                assert_identity(out, _named(fn, args), eager_out, _named(eager_fn, eager_args))
            for kind in ("stdout", "logs", "warnings"):
                if seen.get(kind) != eager_seen.get(kind):
                    raise AssertionError(
                        f"{kind}: {seen.get(kind)!r} != eager {eager_seen.get(kind)!r}"
                    )
            assert_same(state, eager_state, "observe()", rtol, atol)
        except AssertionError as error:
            raise AssertionError(where + str(error)) from None

    allowed = graphs if isinstance(graphs, tuple) else (graphs,)
    assert allowed is counter_any or counter.frame_count in allowed, (
        f"framejit compiled {counter.frame_count} graph(s) over two calls; expected "
        + " or ".join(map(str, allowed))
    )

    if breaks is not None:
        if build is not None:
            torch.manual_seed(SEED)
            target = build()
        else:
            target = fn
        if setup is not None:
            setup()
        explained = copy.deepcopy(arguments)
        with (
            _captured_output(),
            torch.set_grad_enabled(torch.is_grad_enabled() if grad is None else grad),
        ):
            report = framejit.explain(target, *explained.args, **explained.kwargs)
        allowed_breaks = breaks if isinstance(breaks, tuple) else (breaks,)
        assert report.graph_break_count in allowed_breaks, (
            f"explain reports {report.graph_break_count} graph break(s) "
            f"{report.break_reasons}; expected " + " or ".join(map(str, allowed_breaks))
        )


# ---------------------------------------------------------------------------------------
# registering cases


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable | None
    build: Callable[[], Any] | None
    make: Callable[[], Any]
    options: dict
    marks: tuple = ()

    def run(self) -> None:
        check(self.fn, self.make, build=self.build, **self.options)


GRAD_MODES = {"no_grad": False, "grad": True}


class Corpus:
    """The cases of one file; `params()` feeds `pytest.mark.parametrize`, one id per case.

    `@corpus.program(make)` registers a function to compile as it is;
    `@corpus.builder(make)` registers a zero-argument factory of the thing to compile
    (a closure, a bound method, a module). `grad_modes=True` registers the case twice,
    once under `torch.no_grad()` and once with grad enabled (ids `name-no_grad`, `name-grad`).
    """

    def __init__(self, **defaults: Any) -> None:
        self.cases: list[Case] = []
        self.defaults = defaults  # options every case of this file gets unless it overrides

    def _add(self, name, fn, build, make, grad_modes: bool, options: dict) -> None:
        options = {**self.defaults, **options}
        marks: tuple = ()
        if "xfail" in options:  # xfail="framejit bug: ..." marks a known bug, strictly
            marks = (pytest.mark.xfail(strict=True, reason=options.pop("xfail")),)
        if any(case.name.split("-")[0] == name for case in self.cases):
            raise ValueError(f"case {name!r} registered twice")
        if grad_modes:
            for mode, grad in GRAD_MODES.items():
                self.cases.append(
                    Case(f"{name}-{mode}", fn, build, make, {**options, "grad": grad}, marks)
                )
        else:
            self.cases.append(Case(name, fn, build, make, options, marks))

    def program(
        self,
        make: Callable[[], Any],
        *,
        name: str | None = None,
        grad_modes: bool = False,
        **options: Any,
    ):
        def register(fn: Callable) -> Callable:
            self._add(name or fn.__name__, fn, None, make, grad_modes, options)
            return fn

        return register

    def builder(
        self,
        make: Callable[[], Any],
        *,
        name: str | None = None,
        grad_modes: bool = False,
        **options: Any,
    ):
        def register(build: Callable[[], Any]) -> Callable[[], Any]:
            self._add(name or build.__name__, None, build, make, grad_modes, options)
            return build

        return register

    def params(self) -> list:
        return [pytest.param(case, id=case.name, marks=case.marks) for case in self.cases]

    def __len__(self) -> int:
        return len(self.cases)


def all_cases() -> list[Any]:
    """Every program of the corpus as pytest params (ids `<file>-<case>`), for the modules that
    run the whole corpus another way (through aot_eager, through Triton, with symbolic sizes).
    The corpus folder must be on sys.path: its files import this module as `harness`."""
    import importlib
    import pathlib

    params = []
    for path in sorted(pathlib.Path(__file__).resolve().parent.glob("test_corpus_*.py")):
        module = importlib.import_module(path.stem)
        for param in module.corpus.params():
            params.append(pytest.param(*param.values, id=f"{path.stem[12:]}-{param.id}"))
    return params
