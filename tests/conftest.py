"""Every test starts from empty framejit caches and default log settings, with internal errors
raised instead of hidden behind the eager fallback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import framejit


@pytest.fixture(autouse=True)
def framejit_clean_state() -> Iterator[None]:
    raise_internal_errors = framejit.config.raise_internal_errors
    recompile_limit = framejit.config.recompile_limit
    framejit.config.raise_internal_errors = True
    framejit.reset()
    yield
    framejit.reset()
    framejit.set_logs()
    framejit.config.raise_internal_errors = raise_internal_errors
    framejit.config.recompile_limit = recompile_limit
