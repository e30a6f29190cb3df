"""Idioms of whole programs run under the frame hook: wrappers, caches and registries that
a program's own classes build around its models. Each runs with the hook on and must give what
it gives without it, running no more of the program's code than eager runs."""

from __future__ import annotations

import pytest
import torch
from framejit.frontend import hook

import framejit

pytestmark = pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())


@pytest.fixture(autouse=True)
def _raise_internal_errors(monkeypatch):
    # an internal error would otherwise become a quiet eager fallback
    monkeypatch.setattr(framejit.config, "raise_internal_errors", True)
    framejit.reset()
    yield
    framejit.reset()


class _Delegating:
    """Forwards every missing attribute to the module it wraps (EMA and parallel wrappers)."""

    lookups: list[str] = []

    def __init__(self, module):
        self.__dict__["module"] = module  # __getattr__ would recurse before this is set

    def __getattr__(self, name):
        _Delegating.lookups.append(name)
        return getattr(self.module, name)

    def __call__(self, x):
        return self.module(x) * 2


def test_a_delegating_wrapper_runs_only_the_lookups_the_program_makes() -> None:
    # the frame of `__init__` (a module argument) is compiled while `module` is not yet set:
    # asking the object for an attribute framejit looks for would recurse in its __getattr__
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    _Delegating.lookups.clear()
    with framejit.enabled(backend="eager"):
        wrapped = _Delegating(lin)
        got = wrapped(x)
        features = wrapped.out_features
    assert _Delegating.lookups == ["out_features"]
    torch.testing.assert_close(got, lin(x) * 2)
    assert features == 2
