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
