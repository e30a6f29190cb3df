"""Warnings silenced or recorded without changing what Python has already shown.

`warnings.catch_warnings()` and `simplefilter()` bump the filters' version, and a bump makes
every module's `__warningregistry__` stale: a warning eager shows once per location ("default"
action) is shown again after each bump. framejit silences a compiled graph's warnings on every
call (they were recorded at trace time and are replayed at the user's lines), so it must not
bump the version: these helpers put a filter at the front of the list in place and take it
out again, which the C warning machinery reads on each warning without resetting registries.
("ignore" and "always" filters never write a registry either.)
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from typing import Any

# the filter entries, as `filterwarnings` builds them: (action, message, category, module, lineno)
_IGNORE_ALL = ("ignore", None, Warning, None, 0)
_ALWAYS = ("always", None, Warning, None, 0)
# what reading `.grad` of a non-leaf tensor says; torch's FakeTensor conversion reads it and
# hides it from `showwarning`, which an "error" filter (`-W error`) never reaches
_NON_LEAF_GRAD = (
    "ignore",
    re.compile(r"The \.grad attribute of a Tensor that is not a leaf"),
    UserWarning,
    None,
    0,
)


@contextlib.contextmanager
def _front(entry: tuple[Any, ...]) -> Iterator[None]:
    filters = warnings.filters
    filters.insert(0, entry)
    try:
        yield
    finally:
        for i, present in enumerate(filters):  # by identity: a user's equal filter stays
            if present is entry:
                del filters[i]
                break


@contextlib.contextmanager
def ignoring_warnings() -> Iterator[None]:
    """Every warning ignored while the block runs (no registry reset, unlike catch_warnings).
    Not thread-safe against other threads' warnings, as catch_warnings is not: callers that
    may run on several threads take a lock around it."""
    with _front(_IGNORE_ALL):
        yield


@contextlib.contextmanager
def ignoring_non_leaf_grad() -> Iterator[None]:
    """The warning for reading `.grad` of a non-leaf tensor ignored while the block runs: for
    framejit's own reads (a FakeTensor made from the user's tensor), which must not fail
    under `-W error` where the user's code never read it."""
    with _front(_NON_LEAF_GRAD):
        yield


@contextlib.contextmanager
def recording_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning the block gives, recorded instead of shown (as
    `catch_warnings(record=True)` with an "always" filter, without the registry reset)."""
    said: list[warnings.WarningMessage] = []
    module: Any = warnings
    shown, show = module._showwarnmsg_impl, module.showwarning
    module._showwarnmsg_impl = said.append
    module.showwarning = module._showwarning_orig
    try:
        with _front(_ALWAYS):
            yield said
    finally:
        module._showwarnmsg_impl, module.showwarning = shown, show
