"""Patterns that model libraries (Hugging Face transformers and the like) use around their tensor
code: configs with their own `__getattribute__`, dict-subclass output dataclasses, registries,
wrappers that read `__code__` or `inspect.signature`, `torch.compiler.is_compiling()`,
environment switches, and library code that lives in site-packages.

Each case is written here in the library's style (transformers is not a test dependency) and is
compared with eager on real tensors; most also assert one graph and no break, since a break in
these wrappers costs a whole model its graph.
"""

from __future__ import annotations

import copy
import enum
import functools
import inspect
import os
import sys
import sysconfig
import types
import typing
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass

import pytest
import torch
from framejit.frontend import hook
from torch import nn

import framejit
from framejit.testing import CompileCounter


def run(fn, *args, graphs: int | None = 1, fullgraph: bool = False, **kwargs):
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter, fullgraph=fullgraph)
    got = jitted(*args, **kwargs)
    again = jitted(*args, **kwargs)
    if graphs is not None:
        assert counter.frame_count == graphs
    return got, again, counter


# --- configs ------------------------------------------------------------------------------------


class AliasConfig:
    """A config whose `__getattribute__` maps alias names (`hidden_size` -> `n_embd`)."""

    attribute_map = {"hidden_size": "n_embd", "num_heads": "n_head"}

    def __init__(self, n_embd: int, n_head: int, scale: float) -> None:
        self.n_embd = n_embd
        self.n_head = n_head
        self.scale = scale

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Tenfold:
    """A `__getattribute__` that answers differently from the generic lookup."""

    def __init__(self) -> None:
        self.v = 1.0

    def __getattribute__(self, key):
        if key == "v":
            return object.__getattribute__(self, "v") * 10
        return object.__getattribute__(self, key)


def uses_config(x, cfg, t):
    return x.view(-1, cfg.num_heads, cfg.hidden_size // cfg.num_heads) * cfg.scale + t.v


def test_custom_getattribute_is_inlined_and_guarded():
    x = torch.randn(2, 8)
    cfg, t = AliasConfig(8, 2, 0.5), Tenfold()
    got, _, counter = run(uses_config, x, cfg, t, fullgraph=True)
    torch.testing.assert_close(got, uses_config(x, cfg, t))
    jitted = framejit.jit(uses_config, backend=counter)
    cfg.scale, t.v = 3.0, 2.0  # read through the custom lookups: a guard fails, a recompile
    torch.testing.assert_close(jitted(x, cfg, t), uses_config(x, cfg, t))
    cfg.n_head = 4
    torch.testing.assert_close(jitted(x, cfg, t), uses_config(x, cfg, t))


class StrictConfig(AliasConfig):
    """`AliasConfig` with a field-validating `__setattr__` (huggingface_hub's strict dataclasses:
    validators looked up in a table keyed by `typing` constructs and classes)."""

    __annotations__ = {"n_embd": int, "n_head": int, "scale": float | None, "prefix": list[int]}

    def __setattr__(self, key, value):
        expected = type(self).__annotations__.get(key)
        if expected is not None:
            check = _VALIDATORS.get(typing.get_origin(expected))
            if check:
                check(key, value, typing.get_args(expected))
            elif isinstance(expected, type) and not isinstance(value, expected):
                raise TypeError(f"{key} must be {expected.__name__}")
        super().__setattr__(key, value)


def _union(key, value, args):
    if not isinstance(value, tuple(a for a in args if isinstance(a, type))):
        raise TypeError(f"{key}: {value!r} is none of {args}")


def _list_of(key, value, args):
    if not (isinstance(value, list) and all(isinstance(v, args[0]) for v in value)):
        raise TypeError(f"{key} must be a list of {args[0].__name__}")


_VALIDATORS = {typing.Union: _union, types.UnionType: _union, list: _list_of}


def edits_a_deep_copy(x, cfg, keep_copy: bool):
    twin = copy.deepcopy(cfg)
    for key in ("n_head", "prefix"):
        if hasattr(twin, key):
            value = getattr(twin, key)
            delattr(twin, key)
            setattr(twin, "num_" + key if key == "prefix" else key, value)
    twin.scale = twin.scale * 2 if twin.scale is not None else 1.0
    y = x.view(-1, twin.num_heads, twin.hidden_size // twin.num_heads) * twin.scale
    return (y, twin) if keep_copy else y


def test_config_with_its_own_getattribute_is_deep_copied_and_edited_in_the_frame():
    # transformers' get_text_config: deepcopy of the config, then delattr/setattr through its
    # own lookups and validators. Before, copying such a class was a graph break.
    x = torch.randn(2, 8)
    cfg = StrictConfig(8, 2, 0.5)
    cfg.prefix = [1, 2]
    got, _, counter = run(edits_a_deep_copy, x, cfg, False, fullgraph=True)
    torch.testing.assert_close(got, edits_a_deep_copy(x, cfg, False))
    assert cfg.scale == 0.5 and cfg.prefix == [1, 2]  # the original is untouched
    (y, twin), _, _ = run(edits_a_deep_copy, x, cfg, True, fullgraph=True)  # the copy escapes
    y_eager, twin_eager = edits_a_deep_copy(x, cfg, True)
    torch.testing.assert_close(y, y_eager)
    assert type(twin) is StrictConfig and vars(twin) == vars(twin_eager)
    assert twin.num_prefix == [1, 2] and twin.scale == 1.0 and twin.hidden_size == 8
    with pytest.raises(TypeError, match="must be int"):  # the validator still runs on the copy
        twin.n_head = "two"
    cfg.scale = None  # a value the traced code branched on: guarded, compiled again
    jitted = framejit.jit(edits_a_deep_copy, backend=counter)
    torch.testing.assert_close(jitted(x, cfg, False), edits_a_deep_copy(x, cfg, False))


def bad_field(x, cfg):
    twin = copy.deepcopy(cfg)
    twin.scale = "big"  # the validator raises, as in eager
    return x * 2


def test_validator_error_on_a_copied_config_is_raised_like_eager():
    cfg = StrictConfig(8, 2, 0.5)
    with pytest.raises(TypeError, match="none of"):
        bad_field(torch.ones(2), cfg)
    with pytest.raises(TypeError, match="none of"):
        framejit.jit(bad_field, backend="eager")(torch.ones(2), cfg)


_EPS = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6}
_CAST = {int: torch.int64, float: torch.float32, bool: torch.bool}


def dtype_keyed_tables(x, value):
    eps = _EPS[x.dtype]
    names = [str(k).split(".")[-1] for k in _EPS]  # iterating keys that are dtypes
    return (x + eps).to(_CAST[type(value)]), names


def test_dicts_keyed_by_dtypes_and_classes_are_read_and_guarded():
    x = torch.randn(4)
    (got, names), _, counter = run(dtype_keyed_tables, x, 2.5, fullgraph=True)
    expected, expected_names = dtype_keyed_tables(x, 2.5)
    torch.testing.assert_close(got, expected)
    assert names == expected_names
    jitted = framejit.jit(dtype_keyed_tables, backend=counter)
    for arg, v in ((x.half(), 3), (x, True)):  # another key: compiled again
        got, _ = jitted(arg, v)
        assert got.dtype == dtype_keyed_tables(arg, v)[0].dtype
        torch.testing.assert_close(got, dtype_keyed_tables(arg, v)[0])
    assert counter.frame_count == 3
    _EPS[torch.float32] = 1e-1  # the table's value changed: guarded
    try:
        torch.testing.assert_close(jitted(x, 2.5)[0], dtype_keyed_tables(x, 2.5)[0])
    finally:
        _EPS[torch.float32] = 1e-6


def reads_code_attributes(x, fn):
    names = fn.__code__.co_varnames
    if "scale" in names:
        return x * names.index("scale")
    return x


def _has_scale(a, b, scale):
    return a


def _no_scale(a):
    return a


def test_code_object_attributes_are_constants():
    x = torch.randn(3)
    for fn in (_has_scale, _no_scale, _has_scale):
        got, _, _ = run(reads_code_attributes, x, fn, graphs=None, fullgraph=True)
        torch.testing.assert_close(got, reads_code_attributes(x, fn))


# --- dict-subclass outputs ----------------------------------------------------------------------


class OutputMeta(type):
    """A metaclass that does not change how instances are made."""


class ModelOutput(OrderedDict, metaclass=OutputMeta):
    """A dict that is also a dataclass: fields that are not None are items too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if type(self) is not ModelOutput and not is_dataclass(self):
            raise TypeError("subclasses must be dataclasses")

    def __post_init__(self):
        class_fields = fields(self)
        for field in class_fields:
            v = self.__dict__.get(field.name)
            if v is not None:
                self[field.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in {f.name for f in fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclass
class BaseOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple | None = None


@dataclass
class LMOutput(ModelOutput):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple | None = None


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20)

    def encode(self, ids, output_hidden_states=False):
        h0 = self.embed(ids)
        h1 = torch.tanh(self.body(h0))
        return BaseOutput(
            last_hidden_state=h1, hidden_states=(h0, h1) if output_hidden_states else None
        )

    def forward(self, ids, labels=None, output_hidden_states=False, return_dict=True):
        out = self.encode(ids, output_hidden_states=output_hidden_states)
        logits = self.head(out.last_hidden_state) + out[0].mean()
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, 20), labels.view(-1))
        result = LMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)
        return result if return_dict else result.to_tuple()


def same_output(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys())
        assert a.__dict__.keys() == b.__dict__.keys()
        for k in a:
            same_output(a[k], b[k])
        for k, v in a.__dict__.items():
            same_output(v, b.__dict__[k])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same_output(x, y)
    else:
        assert a == b


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"labels": True},
        {"output_hidden_states": True},
        {"labels": True, "return_dict": False},
    ],
    ids=["plain", "labels", "hidden", "tuple"],
)
def test_dict_subclass_dataclass_outputs(kwargs):
    torch.manual_seed(0)
    model = TinyLM()
    ids = torch.randint(0, 20, (2, 5))
    if kwargs.get("labels"):
        kwargs = {**kwargs, "labels": torch.randint(0, 20, (2, 5))}
    got, again, _ = run(model, ids, fullgraph=True, **kwargs)
    expected = model(ids, **kwargs)
    same_output(got, expected)
    same_output(again, expected)
    if isinstance(got, LMOutput):
        assert got.to_tuple()[0] is got[0]  # rebuilt through the class's own methods
        assert (got.loss is None) == ("labels" not in kwargs)


def test_dict_subclass_output_trains_like_eager():
    torch.manual_seed(0)
    model = TinyLM()
    ids, labels = torch.randint(0, 20, (2, 5)), torch.randint(0, 20, (2, 5))
    jitted = framejit.jit(model, backend="aot_eager", fullgraph=True)
    jitted(ids, labels=labels).loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(ids, labels=labels).loss.backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)


class Registry(dict):
    """Keyed by class name; `get` of its own reaches dict's through super()."""

    def get(self, key):
        return super().get(str(key)) or {}


REGISTRY = Registry()


def reads_registry(x, model):
    flags = REGISTRY.get(type(model))
    out = x * 2
    for name in flags:
        out = out + len(name)
    return out


def test_outside_dict_subclass_reads_are_guarded():
    x, model = torch.randn(3), nn.Identity()
    counter = CompileCounter()
    jitted = framejit.jit(reads_registry, backend=counter, fullgraph=True)
    torch.testing.assert_close(jitted(x, model), reads_registry(x, model))
    REGISTRY[str(type(model))] = {"attentions": 1}  # the registry changed: a guard fails
    try:
        torch.testing.assert_close(jitted(x, model), reads_registry(x, model))
        assert counter.frame_count == 2
    finally:
        REGISTRY.clear()


class LayerView(Sequence):
    """A read-only sequence (collections.abc) built on the fly."""

    def __init__(self, layers) -> None:
        self._layers = layers

    def __len__(self) -> int:
        return len(self._layers)

    def __getitem__(self, i):
        return self._layers[i]


def iterates_sequence(x, model):
    for layer in LayerView(model.layers):
        x = layer(x)
    return x


def test_sequence_subclass_made_in_the_frame_iterates():
    model = nn.Module()
    model.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    x = torch.randn(2, 4)
    got, _, _ = run(iterates_sequence, x, model, fullgraph=True)
    torch.testing.assert_close(got, iterates_sequence(x, model))


# --- wrappers -----------------------------------------------------------------------------------


def config_defaults(func):
    """A decorator that reads the wrapped function's code and signature, then calls it with a
    kwargs dict it changed (as library wrappers do)."""

    def wrapper(self, *args, **kwargs):
        if "use_cache" in func.__code__.co_varnames:
            kwargs.setdefault("use_cache", False)
        n = len(inspect.signature(self.chunk).parameters)
        kwargs.pop("return_dict", None)
        return func(self, *args, **kwargs) * n

    return wrapper


class Wrapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def chunk(self, a, b):
        return a + b

    @config_defaults
    def forward(self, x, use_cache=True):
        y = self.fc(x)
        if type(self).forward is Wrapped.forward and not use_cache:
            y = y * 2
        return y


def test_library_wrapper_reading_code_and_signature():
    model, x = Wrapped(), torch.randn(2, 4)
    got, _, _ = run(model, x, return_dict=True, fullgraph=True)
    torch.testing.assert_close(got, model(x, return_dict=True))


def breaks_inside(x, **kwargs):
    kwargs.pop("flag", None)  # the callee changes its own kwargs dict, then breaks
    print("inside")
    return x + 1


def calls_breaking_callee(x):
    y = x * 2
    z = breaks_inside(y, flag=True)
    return z - 1


def test_break_in_callee_that_changed_its_own_dict_keeps_the_caller_compiled(capsys):
    x = torch.randn(3)
    got, _, counter = run(calls_breaking_callee, x, graphs=None)
    torch.testing.assert_close(got, calls_breaking_callee(x))
    assert counter.frame_count >= 2  # the caller's graphs around the call, not an eager frame
    assert capsys.readouterr().out.count("inside") == 3


def compiling_path(x):
    if torch.compiler.is_compiling():
        return x + 1
    return x - 1


def test_is_compiling_is_true_while_traced():
    x = torch.zeros(2)
    got, _, _ = run(compiling_path, x, fullgraph=True)
    torch.testing.assert_close(got, x + 1)
    torch.testing.assert_close(compiling_path(x), x - 1)


def environment_switch(x):
    if os.environ.get("FRAMEJIT_TEST_SWITCH", "0") == "1":
        return x + 1
    if "FRAMEJIT_TEST_OTHER" in os.environ:
        return x * 3
    return x - 1


def test_environment_reads_are_guarded(monkeypatch):
    x = torch.zeros(2)
    counter = CompileCounter()
    jitted = framejit.jit(environment_switch, backend=counter, fullgraph=True)
    monkeypatch.delenv("FRAMEJIT_TEST_SWITCH", raising=False)
    monkeypatch.delenv("FRAMEJIT_TEST_OTHER", raising=False)
    torch.testing.assert_close(jitted(x), x - 1)
    monkeypatch.setenv("FRAMEJIT_TEST_SWITCH", "1")
    torch.testing.assert_close(jitted(x), x + 1)
    monkeypatch.delenv("FRAMEJIT_TEST_SWITCH")
    monkeypatch.setenv("FRAMEJIT_TEST_OTHER", "")
    torch.testing.assert_close(jitted(x), x * 3)
    assert counter.frame_count == 3


# --- code in another module, and in site-packages -----------------------------------------------

_LIBRARY = """
import torch

SCALE = 2.0

def helper(x):
    return x * SCALE

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return helper(self.fc(x))
"""


@pytest.fixture
def library_module():
    """A module standing in for a library: its functions are reached through a class (no
    source of their own), so their globals are read through the module's dict."""
    mod = types.ModuleType("framejit_test_library")
    exec(compile(_LIBRARY, "<framejit_test_library>", "exec"), mod.__dict__)
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def test_globals_of_a_module_reached_by_value_are_guarded(library_module):
    block, x = library_module.Block(), torch.randn(2, 4)
    counter = CompileCounter()
    jitted = framejit.jit(block, backend=counter, fullgraph=True)
    torch.testing.assert_close(jitted(x), block(x))
    library_module.SCALE = 5.0  # the library's global changed: a guard fails, a recompile
    torch.testing.assert_close(jitted(x), block(x))
    assert counter.frame_count == 2


def _function_in(filename: str, module: str) -> types.FunctionType:
    code = compile("def f(x):\n    return x\n", filename, "exec")
    namespace = {"__name__": module}
    exec(code, namespace)
    return namespace["f"]


def test_hook_compiles_site_packages_libraries_but_not_tools_or_the_standard_library():
    purelib = sysconfig.get_path("purelib")
    stdlib = sysconfig.get_path("stdlib")
    assert (
        hook.skipped_by_rule(_function_in(os.path.join(purelib, "fakelib", "m.py"), "fakelib.m"))
        == ""
    )
    assert "standard library" in hook.skipped_by_rule(
        _function_in(os.path.join(stdlib, "json", "x.py"), "json.x")
    )
    assert "numpy" in hook.skipped_by_rule(
        _function_in(os.path.join(purelib, "numpy", "x.py"), "numpy.x")
    )
    assert "torch" in hook.skipped_by_rule(_function_in(torch.__file__, "torch.x"))


def _no_grad_helper(x):
    with torch.no_grad():
        y = x * 2
        print("inside no_grad")  # a break inside an inlined callee, inside the block
    return y + x


def calls_no_grad_helper(x):
    z = x + 1
    return _no_grad_helper(z)


def test_rewound_call_restores_grad_mode(capsys):
    """The caller's graph ends at the call; the trace of the callee had entered `no_grad`, and
    rewinding the call must leave the real grad mode as it was."""
    x = torch.randn(3, requires_grad=True)
    jitted = framejit.jit(calls_no_grad_helper, backend="eager")
    for _ in range(2):
        out = jitted(x)
        assert torch.is_grad_enabled()
        assert out.requires_grad
        torch.testing.assert_close(out, calls_no_grad_helper(x))
        out.sum().backward()
    assert capsys.readouterr().out.count("inside no_grad") == 4


class GenerationMode(str, enum.Enum):  # noqa: UP042  (a str enum on purpose)
    GREEDY = "greedy"
    SAMPLE = "sample"


MODE_SCALE = {GenerationMode.GREEDY: 2.0, GenerationMode.SAMPLE: 0.5}


def enum_keyed_table(x, mode):
    return x * MODE_SCALE[mode]


def test_enum_keyed_globals_are_guarded():
    """A str-enum dict key appears in a guard as a named constant (its repr is not Python)."""
    x = torch.randn(3)
    counter = CompileCounter()
    jitted = framejit.jit(enum_keyed_table, backend=counter, fullgraph=True)
    for mode in (GenerationMode.GREEDY, GenerationMode.SAMPLE, GenerationMode.GREEDY):
        torch.testing.assert_close(jitted(x, mode), enum_keyed_table(x, mode))
    MODE_SCALE[GenerationMode.GREEDY] = 3.0
    try:
        torch.testing.assert_close(jitted(x, GenerationMode.GREEDY), x * 3.0)
    finally:
        MODE_SCALE[GenerationMode.GREEDY] = 2.0
    assert counter.frame_count == 3


class Doubling(dict):
    """`[]` of its own; dict(), `**` and iteration still see the raw items (CPython's rule)."""

    def __getitem__(self, key):
        return super().__getitem__(key) * 2


class Plain(OrderedDict):
    pass


def copies_dict_subclasses(x):
    d = Plain(a=x, b=x + 1)
    e = Doubling(a=x)
    return (
        dict(d),
        {**d, "c": x},
        list(d.items()),
        len(d),
        "a" in d,
        d.get("b"),
        e["a"],
        dict(e),
        {**e},
        list(e),
    )


def test_dict_subclasses_made_in_the_frame_copy_like_cpython():
    x = torch.randn(3)
    got, _, _ = run(copies_dict_subclasses, x, fullgraph=True)
    expected = copies_dict_subclasses(x)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert type(a) is type(b)
        if isinstance(a, dict):
            assert list(a) == list(b)
            for k in a:
                torch.testing.assert_close(a[k], b[k])
        elif isinstance(a, list) and a and isinstance(a[0], tuple):
            for (ka, va), (kb, vb) in zip(a, b):
                assert ka == kb
                torch.testing.assert_close(va, vb)
        elif isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)
        else:
            assert a == b


# --- exceptions caught inside inlined calls -----------------------------------------------------


class Interface(Mapping):
    """A registry in the style of attention-function tables: `get` is Mapping's own, which is
    `try: return self[key] except KeyError: return default`."""

    _global = {"sdpa": 2.0}

    def __init__(self) -> None:
        self._local: dict = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __iter__(self):
        return iter(self._global)

    def __len__(self) -> int:
        return len(self._global)


INTERFACE = Interface()


def _lookup(table, key):
    try:
        return table[key]
    except KeyError:
        return -1.0


def _raises(key):
    if key == "bad":
        raise KeyError(key)
    return 3.0


def _catches(key):
    try:
        return _raises(key)
    except (KeyError, IndexError) as e:
        return float(len(e.args))


def _catches_only_index_error(key):
    try:
        return _raises(key)
    except IndexError:
        return 0.0


def uses_caught_exceptions(x):
    a = INTERFACE.get("eager", 0.5)
    b = INTERFACE.get("sdpa", 0.5)
    c = _lookup({"a": 1.0}, "b")
    d = _catches("bad") + _catches("good")
    return x * a + b + c + d


def test_except_clauses_of_inlined_calls_are_traced():
    x = torch.randn(3)
    got, _, _ = run(uses_caught_exceptions, x, fullgraph=True)
    torch.testing.assert_close(got, uses_caught_exceptions(x))


def uncaught_in_callee(x):
    y = x * 2
    try:
        z = _catches_only_index_error("bad")  # the KeyError leaves the callee: runs as Python
    except KeyError:
        z = 5.0
    return y + z


def test_an_exception_the_callee_does_not_catch_runs_as_python():
    x = torch.randn(3)
    got, again, _ = run(uncaught_in_callee, x, graphs=None)
    torch.testing.assert_close(got, uncaught_in_callee(x))
    torch.testing.assert_close(again, uncaught_in_callee(x))


def _raises_under_no_grad(x, log):
    with torch.no_grad():
        log.append("enter")
        try:
            y = x * 2
            raise ValueError("skip")
        finally:
            log.append("finally")
    return y


def catches_what_left_a_with_block(x, log):
    try:
        _raises_under_no_grad(x, log)
    except ValueError:
        log.append("caught")
    out = x * 3
    return out, torch.is_grad_enabled()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_exception_leaving_a_callees_with_and_finally_blocks(backend):
    # The callee's `finally` and its no_grad's `__exit__` run before the caller's `except`:
    # the exception may not skip them (grad mode stayed off after the call).
    x = torch.randn(3, requires_grad=True)
    jitted = framejit.jit(catches_what_left_a_with_block, backend=backend)
    for _ in range(2):
        want_log, got_log = [], []
        want = catches_what_left_a_with_block(x, want_log)
        got = jitted(x, got_log)
        assert got_log == want_log == ["enter", "finally", "caught"]
        assert got[1] is want[1] is True and torch.is_grad_enabled()
        assert got[0].requires_grad
        torch.testing.assert_close(got[0], want[0])


def _autocast_raises(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        raise KeyError("k")


def catches_what_left_autocast(x):
    try:
        _autocast_raises(x)
    except KeyError:
        pass
    return x @ x


def test_an_exception_leaving_a_callees_autocast_block():
    x = torch.randn(2, 2)
    got = framejit.jit(catches_what_left_autocast, backend="eager")(x)
    assert not torch.is_autocast_enabled("cpu")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, catches_what_left_autocast(x))


_probe_calls = []
_probe_calls = []


@functools.lru_cache
def backend_available() -> bool:
    _probe_calls.append(1)
    return True


def cached_flag(x):
    if backend_available():
        return x + 1
    return x - 1


def test_cached_zero_argument_flag_is_a_constant():
    x = torch.zeros(2)
    backend_available()  # the library asked once already: the cache holds the answer
    calls = len(_probe_calls)
    got, _, _ = run(cached_flag, x, fullgraph=True)
    torch.testing.assert_close(got, x + 1)
    assert len(_probe_calls) == calls  # read from the cache, never run again


def builds_from_keys(x):
    states = dict.fromkeys(range(3))
    ordered = OrderedDict.fromkeys(["a", "b"], 1.0)
    states[0] = x * 2
    return states, ordered


def test_dict_fromkeys():
    x = torch.randn(2)
    got, _, _ = run(builds_from_keys, x, fullgraph=True)
    expected = builds_from_keys(x)
    assert type(got[1]) is OrderedDict and got[1] == expected[1]
    assert list(got[0]) == [0, 1, 2] and got[0][1] is None
    torch.testing.assert_close(got[0][0], expected[0][0])


class Recorder:
    def __init__(self) -> None:
        self.calls = 0
        self.last = None


def _sets_then_breaks(x, rec):
    rec.calls += 1  # a write on an object from outside, then a break in the same call
    rec.last = "seen"
    print("callee")
    return x + 1


def caller_of_setter(x, rec):
    y = x * 2
    return _sets_then_breaks(y, rec) - 1


def test_rewound_call_forgets_its_recorded_writes(capsys):
    x = torch.randn(3)
    counter = CompileCounter()
    jitted = framejit.jit(caller_of_setter, backend=counter)
    rec, ref = Recorder(), Recorder()
    for _ in range(2):
        torch.testing.assert_close(jitted(x, rec), caller_of_setter(x, ref))
    assert (rec.calls, rec.last) == (ref.calls, ref.last) == (2, "seen")  # once per call
    assert counter.frame_count >= 2  # the caller compiled around the call (it ran eagerly)
    assert capsys.readouterr().out.count("callee") == 4


class CheckpointedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(6, 6), nn.GELU(), nn.Linear(6, 6))
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        h = torch.tanh(x)
        h = torch.utils.checkpoint.checkpoint(self.inner, h, use_reentrant=False)
        return self.head(h).sum()


def test_activation_checkpointing_runs_as_torch_runs_it():
    torch.manual_seed(0)
    model, x = CheckpointedBlock(), torch.randn(4, 6)
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter)
    jitted(x).backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).backward()
    for a, p in zip(got, model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad)
    assert counter.frame_count >= 1  # the work around the checkpoint is compiled


def number_accumulates_tensors(x, num_buckets):
    buckets = 0
    buckets += (x > 0).to(torch.long) * num_buckets  # T5's relative position buckets
    scale = 1.5
    scale *= x
    return buckets, scale


def test_in_place_operator_on_a_number_with_a_tensor():
    x = torch.randn(5)
    for backend in ("eager", "aot_eager"):
        jitted = framejit.jit(number_accumulates_tensors, backend=backend, fullgraph=True)
        for a, b in zip(jitted(x, 4), number_accumulates_tensors(x, 4), strict=True):
            torch.testing.assert_close(a, b)


class _Registry:
    """Module state a library keeps in a global object (as torch.distributed keeps `_world`)."""

    def __init__(self) -> None:
        self._default = None

    @property
    def default(self) -> object:
        return self._default


_registry = _Registry()


class _Meta(type):
    @property
    def WORLD(cls) -> object:  # noqa: N802 - the library's name
        return _registry.default


class _Member(metaclass=_Meta):
    pass


def test_metaclass_property_and_module_state_are_read_with_guards() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if _Member.WORLD is None else x * 10

    counter = CompileCounter()
    fast = framejit.jit(fn, backend=counter)
    x = torch.ones(2)
    explained = framejit.explain(fn, x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    torch.testing.assert_close(fast(x), x + 1)
    _registry._default = object()  # the state changes: the guard on it fails, a new graph
    try:
        torch.testing.assert_close(fast(x), x * 10)
    finally:
        _registry._default = None
    torch.testing.assert_close(fast(x), x + 1)
    assert counter.frame_count == 2


def test_torch_distributed_is_initialized_is_captured() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not built")

    def fn(x: torch.Tensor) -> torch.Tensor:
        if dist.is_initialized():
            return x * dist.get_world_size()
        return x + 1

    explained = framejit.explain(fn, torch.ones(2))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert any("_default_pg" in g for g in explained.guards)
    torch.testing.assert_close(framejit.jit(fn)(torch.ones(2)), torch.full((2,), 2.0))


class _Processors(list):
    """A list subclass kept outside the frame, as Hugging Face's LogitsProcessorList."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for p in self:
            x = p(x)
        return x


def test_list_subclass_from_outside_is_read_with_a_length_guard() -> None:
    procs = _Processors([torch.relu, torch.sigmoid])

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = procs(x * 2)
        return y + len(procs) + (1 if torch.sigmoid in procs else 0) + procs[0](x).sum()

    x = torch.randn(5)
    explained = framejit.explain(fn, x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    counter = CompileCounter()
    fast = framejit.jit(fn, backend=counter)
    torch.testing.assert_close(fast(x), fn(x))
    procs.append(torch.tanh)  # the length guard fails: compiled again
    torch.testing.assert_close(fast(x), fn(x))
    procs[2] = torch.exp  # an item changed: its identity guard fails
    torch.testing.assert_close(fast(x), fn(x))
    assert counter.frame_count == 3


def test_torch_distributions_without_validation_are_one_graph() -> None:
    import torch.distributions as D

    def fn(x, labels):
        normal = D.Normal(x, torch.ones_like(x) * 0.5)
        cat = D.Categorical(logits=x)  # probs is a lazy_property
        indep = D.Independent(D.Normal(x, 1.0), 1)
        mvn = D.MultivariateNormal(torch.zeros(x.shape[-1]), scale_tril=torch.eye(x.shape[-1]))
        bern = D.Bernoulli(logits=x)
        return (
            normal.log_prob(x) + normal.entropy(),
            cat.log_prob(labels) + cat.entropy(),
            cat.probs,
            indep.log_prob(x) + mvn.log_prob(x),
            bern.log_prob((x > 0).float()),
            normal.rsample().shape,
        )

    x, labels = torch.randn(4, 6), torch.tensor([0, 1, 2, 5])
    previous = D.Distribution._validate_args
    D.Distribution.set_default_validate_args(False)
    try:
        explained = framejit.explain(fn, x, labels)
        assert (explained.graph_count, explained.graph_break_count) == (1, 0)
        for backend in ("eager", "aot_eager"):
            got, want = framejit.jit(fn, backend=backend)(x, labels), fn(x, labels)
            for a, b in zip(got, want, strict=True):
                if isinstance(a, torch.Tensor):
                    torch.testing.assert_close(a, b)
                else:
                    assert a == b
    finally:
        D.Distribution.set_default_validate_args(previous)
    # with validation (the default) the checks read tensor values: breaks, same results
    got, want = framejit.jit(fn, backend="eager")(x, labels), fn(x, labels)
    torch.testing.assert_close(got[0], want[0])


@functools.lru_cache
def _cached_scale(n: int, name: str = "a") -> int:
    return n * 2 + len(name)


_NOISY_CALLS: list[int] = []


@functools.cache
def _noisy_cached(n: int) -> int:
    _NOISY_CALLS.append(n)  # an effect: the call stays a break
    return n


def test_lru_cache_functions_of_constant_arguments_fold() -> None:
    def fn(x):
        return x * _cached_scale(3, name="abc")

    def noisy(x):
        return x * _noisy_cached(2)

    x = torch.randn(3)
    torch.testing.assert_close(framejit.jit(fn, backend="eager")(x), fn(x))
    assert framejit.explain(fn, x).graph_break_count == 0
    _NOISY_CALLS.clear()
    torch.testing.assert_close(framejit.jit(noisy, backend="eager")(x), noisy(x))
    assert framejit.explain(noisy, x).graph_break_count == 1
    assert _NOISY_CALLS == [2]  # run once, by the first real call, as in eager


@functools.lru_cache(maxsize=4)
def _cached_mask(n: int) -> torch.Tensor:
    return torch.triu(torch.ones(n, n), diagonal=1)


def test_lru_cache_function_returning_a_tensor_is_called_once_per_call() -> None:
    """A cached function of constant arguments whose value the trace cannot hold (a tensor)
    is a break: the cache and its counters see the calls eager makes, no more."""

    def fn(x):
        return x @ _cached_mask(x.shape[0])

    _cached_mask.cache_clear()
    jitted = framejit.jit(fn, backend="eager")
    x = torch.randn(3, 3)
    infos = []
    for _ in range(3):
        torch.testing.assert_close(jitted(x), x @ torch.triu(torch.ones(3, 3), diagonal=1))
        infos.append(_cached_mask.cache_info()[:2])
    assert infos == [(0, 1), (1, 1), (2, 1)]


class _QuantParam(nn.Parameter):
    """A quantization library's parameter class: extra methods, nothing torch sees."""

    def levels(self):
        return 4


class _QuantLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = _QuantParam(torch.randn(3, 3))
        self.bias = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        y = x @ self.weight + self.bias
        return y * 2 if isinstance(self.weight, _QuantParam) else y


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_parameter_subclass_is_a_parameter_of_the_graph(backend):
    torch.manual_seed(0)
    model = _QuantLinear()
    x = torch.randn(2, 3)
    counter = CompileCounter()
    jitted = framejit.jit(model, backend=counter if backend == "eager" else backend)
    got = jitted(x)
    got.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = model(x)
    want.sum().backward()
    torch.testing.assert_close(got, want)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert framejit.explain(model, x).graph_break_count == 0
    if backend == "eager":
        assert counter.frame_count == 1
        model.weight = nn.Parameter(model.weight.detach().clone())  # a plain one: recompiles
        torch.testing.assert_close(jitted(x), model(x))
        assert counter.frame_count == 2


# --- switches a library keeps in a private module global --------------------------------------


def _by_fastpath(x):
    return x + 1 if torch.backends.mha.get_fastpath_enabled() else x - 1


def test_a_library_switch_in_a_module_global_is_guarded():
    # get_fastpath_enabled() reads torch.backends.mha's `_is_fastpath_enabled`, which
    # set_fastpath_enabled rebinds: the first call's value must not be baked into the graph
    jitted = framejit.jit(_by_fastpath, backend="eager")
    try:
        for flag in (True, False, True):
            torch.backends.mha.set_fastpath_enabled(flag)
            x = torch.zeros(2)
            torch.testing.assert_close(jitted(x), _by_fastpath(x))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_parametrize_cached_after_a_first_call_outside_it(backend):
    from torch.nn.utils import parametrize

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).transpose(-1, -2)

    def make():
        torch.manual_seed(0)
        m = nn.Linear(3, 3)
        parametrize.register_parametrization(m, "weight", Symmetric())
        return m

    def run(m, call):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
        out = [call(x)]
        with parametrize.cached():
            out.append(call(x))
            with torch.no_grad():
                m.parametrizations.weight.original.add_(1.0)
            out.append(call(x))  # the cached weight, from before the update (by design)
        out.append(call(x))
        return out

    eager, compiled = make(), make()
    jitted = framejit.jit(compiled, backend=backend)
    for want, got in zip(run(eager, eager), run(compiled, jitted), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_object_a_library_keeps_in_its_module_is_captured(backend):
    # AffineTransform.domain returns torch.distributions.constraints.real, read inside torch's
    # code from its module: one graph, which can load the object again
    import torch.distributions as D
    from torch.distributions import transforms as T

    def affine(loc):
        t = T.AffineTransform(loc, 2.0)
        return t(loc), t.log_abs_det_jacobian(loc, t(loc)), t.domain, t.codomain

    def gumbel(loc):
        d = D.Gumbel(loc, 2.0, validate_args=False)
        return d.rsample((2,)), d.log_prob(loc + 1), d.support

    loc = torch.randn(3)
    got = framejit.jit(affine, backend=backend, fullgraph=True)(loc)
    want = affine(loc)
    torch.testing.assert_close(got[:2], want[:2])
    assert got[2] is want[2] and got[3] is want[3]
    torch.manual_seed(0)
    got = framejit.jit(gumbel, backend=backend)(loc)  # (torch 2.11's inverse is a weakref)
    torch.manual_seed(0)
    want = gumbel(loc)
    torch.testing.assert_close(got[:2], want[:2])
    assert got[2] is want[2]


@pytest.mark.parametrize("mask_check", [True, False])
def test_transformer_encoder_fast_path_zeroes_padding_as_eager(mask_check):
    # in eval mode under no_grad with a padding mask, eager's encoder runs on a nested tensor
    # and returns zeros at padded positions: the compiled call takes that path too
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True, mask_check=mask_check)
    x = torch.randn(3, 5, 8)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[0, 3:] = True
    jitted = framejit.jit(encoder)
    with torch.no_grad():
        encoder.eval()
        for _ in range(2):
            torch.testing.assert_close(
                jitted(x, src_key_padding_mask=pad), encoder(x, src_key_padding_mask=pad)
            )
    encoder.train()  # no fast path in training: one graph, as before
    explained = framejit.explain(encoder, x, src_key_padding_mask=pad)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_attention_modules_in_inference_are_one_graph() -> None:
    """nn.MultiheadAttention's fast-path check asks whether a dispatch mode is on
    (`_len_torch_dispatch_stack()`, a C function): it broke the graph in eval + no_grad, the
    usual inference set-up. Compiled code never runs under a mode (GLOBAL_STATE fails there),
    so the answer is 0."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    dec = torch.nn.TransformerDecoderLayer(16, 4, 32, batch_first=True).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)

    def attend(x: torch.Tensor) -> torch.Tensor:
        return mha(x, x, x, need_weights=False)[0]

    def decode(x: torch.Tensor, mem: torch.Tensor) -> torch.Tensor:
        return dec(x, mem)

    with torch.no_grad():
        for fn, args in ((attend, (x,)), (decode, (x, mem))):
            explained = framejit.explain(fn, *args)
            assert (explained.graph_count, explained.graph_break_count) == (1, 0)
            for backend in ("eager", "aot_eager"):
                torch.testing.assert_close(framejit.jit(fn, backend=backend)(*args), fn(*args))
