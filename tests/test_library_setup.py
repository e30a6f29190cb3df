"""Setup code that model libraries run around their tensor work and that holds no tensor values:
views of a function's signature parameters, list subclasses made in the frame (Hugging Face's
`LogitsProcessorList`), and `re` on constant strings. torch.compile users expect these to be
constants of the trace, so each case asserts one graph and no break, and compares with the
plain Python call.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from torch import nn

import framejit
from framejit.testing import CompileCounter


def run(fn, *args, graphs: int = 1):
    """`fn` under jit, twice, against the plain call; one graph and no break."""
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter, fullgraph=True)
    for _ in range(2):
        got, want = jitted(*args), fn(*args)
        same(got, want)
    assert counter.frame_count == graphs
    assert framejit.explain(fn, *args).graph_break_count == 0
    return got


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        assert vars(a) == vars(b) if hasattr(a, "__dict__") else True
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, re.Match):
        assert type(b) is re.Match and a.span() == b.span() and a.groups() == b.groups()
    else:
        assert a == b


# --- views of a signature's parameters ---------------------------------------------------------


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, attention_mask=None, logits_to_keep=0, **kwargs):
        return self.fc(x)


def supports(model, x):
    params = inspect.signature(model.forward).parameters
    keys = params.keys()
    y = x * 2
    if "attention_mask" in set(keys):
        y = y + 1
    if "mm_encoder_outputs" in set(inspect.signature(model.forward).parameters.keys()):
        y = y * 100
    names = list(keys)
    kinds = [p.kind for p in params.values()]
    pairs = [(name, p.default) for name, p in params.items()]
    count = 0
    for name in keys:
        count += len(name)
    return y, names, kinds, pairs, len(keys), "x" in keys, count, sorted(keys)


def test_views_of_signature_parameters_are_constants():
    run(supports, Decoder(), torch.randn(2, 4))


def test_views_of_a_dict_from_outside_stay_live():
    """A view of a mutable dict is not a constant: a key added after the first call shows."""
    table = {"a": 1}

    def reads(x):
        return x + len(set(table.keys())), list(table.values())

    counter = CompileCounter()
    jitted = framejit.jit(reads, backend=counter)
    x = torch.ones(2)
    same(jitted(x), reads(x))
    table["b"] = 2
    same(jitted(x), reads(x))


class Registry:
    scale = 1


def reads_class_dict(x):
    return x + 1, "extra" in set(vars(Registry).keys())


def test_views_of_a_class_dict_stay_live():
    """A class's `__dict__` is a read-only proxy too, but of a dict that `setattr` changes."""
    counter = CompileCounter()
    jitted = framejit.jit(reads_class_dict, backend=counter)
    x = torch.ones(2)
    same(jitted(x), reads_class_dict(x))
    Registry.extra = 2
    try:
        same(jitted(x), reads_class_dict(x))
    finally:
        del Registry.extra


# --- list subclasses made in the frame ---------------------------------------------------------


class ProcessorList(list):
    """A list of callables applied in turn (transformers' `LogitsProcessorList`)."""

    def __call__(self, scores):
        for processor in self:
            scores = processor(scores)
        return scores


class Scale:
    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, scores):
        return scores * self.factor

    def __eq__(self, other):
        return type(other) is Scale and other.factor == self.factor


class TaggedList(list):
    """A list subclass whose Python `__init__` sets an attribute."""

    def __init__(self, items=(), tag="none"):
        super().__init__(items)
        self.tag = tag


def builds_processors(x):
    processors = ProcessorList()
    processors.append(Scale(2.0))
    processors.append(Scale(3.0))
    processors.extend([Scale(0.5)])
    y = processors(x)
    return (
        y,
        processors,
        len(processors),
        isinstance(processors, list),
        isinstance(processors, ProcessorList),
        type(processors) is ProcessorList,
    )


def test_list_subclass_made_in_the_frame():
    got = run(builds_processors, torch.randn(3))
    assert type(got[1]) is ProcessorList and [p.factor for p in got[1]] == [2.0, 3.0, 0.5]


def builds_tagged(x):
    plain = TaggedList()
    plain.append(1)
    tagged = TaggedList([2, 3], tag="t")
    tagged.insert(0, 1)
    total = x
    for v in tagged:
        total = total + v
    return total, plain, tagged, tagged.tag, tagged[1:], tagged == [1, 2, 3]


def test_list_subclass_with_python_init_keeps_its_attributes():
    got = run(builds_tagged, torch.randn(3))
    assert type(got[2]) is TaggedList and got[2].tag == "t" and got[1].tag == "none"
    assert type(got[4]) is list  # slicing a list subclass gives a plain list, as in Python


def builds_empty_criteria(x):
    criteria = ProcessorList()
    if criteria:
        x = x + 1
    return x * 2, criteria


def test_empty_list_subclass_is_false_and_returned():
    run(builds_empty_criteria, torch.randn(3))


class Doubling(list):
    """Overrides in Python: `append` through `super()`, and iteration and length."""

    def append(self, item):
        super().append(item * 2)

    def __iter__(self):
        return iter(list(reversed(list(super().__iter__()))))

    def __len__(self):
        return list.__len__(self) + 100


def builds_overriding(x):
    items = Doubling()
    items.append(x)
    items.append(x + 1)
    ordered = [t for t in items]
    return ordered, len(items), items, list(items)


def test_list_subclass_overrides_are_inlined():
    run(builds_overriding, torch.randn(3))


class Holder(dict):
    pass


def returns_tensors_in_items(x):
    seq, table = ProcessorList(), Holder()
    seq.append(x * 2)
    table["y"] = x + 1
    return seq, table


def test_tensors_in_items_of_subclasses_made_in_the_frame_are_graph_outputs():
    got = run(returns_tensors_in_items, torch.randn(3))
    assert type(got[0]) is ProcessorList and type(got[1]) is Holder


def break_between(x):
    seq = TaggedList([x * 2], tag="kept")
    print("a break")
    seq.append(x + 1)
    return seq


def test_list_subclass_lives_across_a_break(capsys):
    counter = CompileCounter()
    got = framejit.jit(break_between, backend=counter)(torch.ones(2))
    same(got, break_between(torch.ones(2)))
    assert type(got) is TaggedList and got.tag == "kept" and len(got) == 2


class NoDict(list):
    __slots__ = ()


def sets_on_slotted(x):
    seq = NoDict([1])
    try:
        seq.tag = 1
    except AttributeError:
        return x + 1, seq
    return x, seq


def test_setting_an_attribute_without_an_instance_dict_raises():
    counter = CompileCounter()
    got = framejit.jit(sets_on_slotted, backend=counter)(torch.ones(2))
    same(got, sets_on_slotted(torch.ones(2)))


# --- re on constant strings --------------------------------------------------------------------

COMMON = r"^[A-Za-z0-9_\.]+(weight)|(bias)$"


def matches_names(x):
    regex = re.compile(COMMON)
    y = x + 1
    names = ["fc.weight", "fc.bias", "head.scale"]
    if all(regex.match(k) for k in names[:2]):
        y = y * 2
    m = regex.match("fc.weight")
    hits = [bool(regex.fullmatch(k)) for k in names]
    found = re.search(r"\d+", "layer.12.fc")
    return (
        y,
        m.group(1),
        m.span(),
        hits,
        found.group(0),
        int(found.group()),
        re.match(r"fc", "head") is None,
        re.fullmatch(r"h\w+", "head") is not None,
        regex.sub("W", "fc.weight"),
        re.sub(r"\.", "/", "a.b.c"),
        re.split(r"\.", "a.b.c"),
        regex.findall("x.weight"),
        re.compile(r"a", re.IGNORECASE).match("A") is not None,
        list(re.compile(r"(?P<layer>\d+)").groupindex.keys()),
    )


def test_re_on_constant_strings_is_folded():
    run(matches_names, torch.randn(3))


def returns_match(x):
    return x + 1, re.match(r"(\w+)\.(\w+)", "fc.weight")


def test_a_match_object_can_be_returned():
    got = run(returns_match, torch.randn(3))
    assert got[1].group(2) == "weight"


NAME_RE = re.compile(r"layers\.(\d+)\.")


def reads_global_pattern(x):
    m = NAME_RE.search("model.layers.3.fc")
    return x * int(m.group(1)), NAME_RE.pattern, m.re is NAME_RE


def test_a_compiled_pattern_from_outside_is_a_guarded_constant():
    global NAME_RE
    run(reads_global_pattern, torch.randn(3))
    counter = CompileCounter()
    jitted = framejit.jit(reads_global_pattern, backend=counter)
    x = torch.randn(3)
    same(jitted(x), reads_global_pattern(x))
    saved, NAME_RE = NAME_RE, re.compile(r"\.(\d)\.")
    try:
        same(jitted(x), reads_global_pattern(x))  # another pattern: compiled again
        assert counter.frame_count == 2
    finally:
        NAME_RE = saved


def test_re_debug_is_not_folded(capsys):
    """`re.DEBUG` prints the parsed pattern at every call that compiles it."""

    def debug(x):
        return x + 1, re.compile(r"ab", re.DEBUG).pattern

    framejit.jit(debug, backend=CompileCounter())(torch.ones(2))
    jitted_out = capsys.readouterr().out
    debug(torch.ones(2))
    assert jitted_out and jitted_out == capsys.readouterr().out


def test_re_with_a_callable_replacement_is_not_folded():
    """`sub` with a function runs Python code: not folded as a constant."""
    calls = []

    def repl(m):
        calls.append(m.group())
        return "_"

    def subs(x):
        return x + 1, re.sub(r"\.", repl, "a.b")

    counter = CompileCounter()
    got = framejit.jit(subs, backend=counter)(torch.ones(2))
    assert got[1] == "a_b" and calls == ["."]


@pytest.mark.parametrize("pattern", [r"(", r"a{2,1}"])
def test_a_bad_pattern_raises_like_python(pattern):
    def compiles(x):
        try:
            re.compile(pattern)
        except re.error as err:
            return x + 1, str(err)
        return x, ""

    counter = CompileCounter()
    got = framejit.jit(compiles, backend=counter)(torch.ones(2))
    same(got, compiles(torch.ones(2)))
