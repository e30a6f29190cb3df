"""Whole-script mode end to end: scripts run in a subprocess give the same output with the hook
on as without it; FRAMEJIT_DISABLE wins; a missing extension is reported, not ignored; memory
stays flat over many calls."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest
import torch
from framejit.frontend import hook

import framejit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
TRAIN = os.path.join(SCRIPTS, "train.py")
needs_hook = pytest.mark.skipif(not hook.available(), reason=hook.unavailable_reason())


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT")}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    full_env.update(env)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=120
    )


@pytest.fixture(scope="module")
def plain() -> str:
    result = _run([TRAIN])
    assert result.returncode == 0, result.stderr
    return result.stdout


def _summary(stderr: str) -> dict[str, int]:
    found = dict(re.findall(r"\[framejit:summary\]\s+(frames compiled|graphs)\s+(\d+)", stderr))
    return {k: int(v) for k, v in found.items()}


@needs_hook
def test_run_command_gives_the_same_output(plain: str) -> None:
    result = _run(["-m", "framejit", "run", TRAIN], FRAMEJIT_LOGS="summary")
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain
    counts = _summary(result.stderr)
    assert counts["graphs"] >= 3 and counts["frames compiled"] >= 3, result.stderr


@needs_hook
def test_framejit_env_gives_the_same_output(plain: str, tmp_path) -> None:
    installed = os.path.join(sysconfig.get_path("purelib"), "framejit.pth")
    if os.path.exists(installed):
        result = _run([TRAIN], FRAMEJIT="1", FRAMEJIT_LOGS="summary")
    else:  # not installed for this interpreter: load the same .pth from a site folder
        shutil.copy(os.path.join(ROOT, "framejit.pth"), tmp_path / "framejit.pth")
        code = (
            f"import site, runpy, sys; site.addsitedir({str(tmp_path)!r}); "
            f"sys.argv = [{TRAIN!r}]; runpy.run_path({TRAIN!r}, run_name='__main__')"
        )
        result = _run(["-c", code], FRAMEJIT="1", FRAMEJIT_LOGS="summary")
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain
    assert _summary(result.stderr)["graphs"] >= 3, result.stderr


@needs_hook
def test_the_recompile_limit_is_logged_not_warned() -> None:
    # in whole-script mode no one asked for `init` to be compiled: hitting the limit is one line
    # of the recompiles log, not a warning (under -W error it would have made the program fail)
    script = os.path.join(SCRIPTS, "apply_init.py")
    plain = _run([script])
    quiet = _run(["-W", "error", "-m", "framejit", "run", script])
    logged = _run(["-m", "framejit", "run", script], FRAMEJIT_LOGS="recompiles")
    assert plain.returncode == quiet.returncode == logged.returncode == 0, quiet.stderr
    assert quiet.stdout == logged.stdout == plain.stdout
    assert quiet.stderr == ""
    assert "recompile_limit" in logged.stderr


@needs_hook
def test_disable_wins_over_whole_script_mode(plain: str) -> None:
    result = _run(["-m", "framejit", "run", TRAIN], FRAMEJIT_DISABLE="1", FRAMEJIT_LOGS="summary")
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain
    assert "[framejit:summary]" not in result.stderr


def test_missing_extension_is_reported() -> None:
    code = f"""
import sys
sys.modules["framejit.frontend._eval_frame"] = None   # as if it had not been built
import torch, framejit
from framejit.__main__ import main
f = framejit.jit(lambda x: x * 2 + 1)
assert torch.equal(f(torch.ones(2)), torch.full((2,), 3.0)), "jit must still work"
try:
    with framejit.enabled():
        pass
except RuntimeError as exc:
    print("enabled:", exc)
print("run status:", main(["run", {TRAIN!r}]))
"""
    result = _run(["-c", code])
    assert result.returncode == 0, result.stderr
    assert "enabled: framejit's frame hook" in result.stdout and "not built" in result.stdout
    assert "run status: 2" in result.stdout
    assert "whole-script mode cannot run" in result.stderr


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


@needs_hook
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_many_calls_do_not_grow_memory() -> None:
    def step(x, w):
        return (x * w).relu() + 1

    x, w = torch.ones(8), torch.full((8,), 2.0)
    with framejit.enabled(backend="eager"):
        for _ in range(20_000):
            step(x, w)
        before = _rss_kb()
        for _ in range(100_000):
            out = step(x, w)
        after = _rss_kb()
    assert torch.equal(out, torch.full((8,), 3.0))
    assert hook.require().get_code_state(step.__code__).entries
    assert after - before < 2048, f"RSS grew by {after - before} kB over 100,000 calls"


@needs_hook
def test_jit_still_works_with_the_hook_available() -> None:
    f = framejit.jit(lambda x: x - 1)
    assert torch.equal(f(torch.ones(1)), torch.zeros(1))


@needs_hook
def test_a_thread_started_while_compiling_does_not_deadlock() -> None:
    """The compiler holds its lock while a backend starts a thread and waits for it; that
    thread's frames must not wait for the lock (it used to hang for good)."""
    script = os.path.join(SCRIPTS, "threads.py")
    plain = _run([script], FRAMEJIT_DISABLE="1")
    assert plain.returncode == 0, plain.stderr
    result = _run(["-m", "framejit", "run", script], FRAMEJIT_LOGS="summary")
    assert result.returncode == 0, result.stderr
    assert result.stdout == plain.stdout
    assert "internal error" not in result.stderr, result.stderr
    assert _summary(result.stderr)["graphs"] >= 2, result.stderr


# Realistic scripts, each run as python runs it and under `python -m framejit run`: the same
# stdout, exit status and stderr (framejit's summary aside), and graphs compiled, at least.
# (script, its arguments, python's own options, graphs at least)
_SCRIPTS = [
    # Dataset/DataLoader, argparse, a dataclass config, logging, AdamW, gradient accumulation,
    # clip_grad_norm_, a cosine schedule, no_grad accuracy, early stopping, a BytesIO checkpoint
    ("classifier.py", ["--epochs", "2"], [], 5),
    # an uncaught error after a graph break: eager's traceback, status 1
    ("uncaught_error.py", [], [], 2),
    # torch.jit.script / trace and torch.compile beside the hook
    ("other_compilers.py", [], [], 3),
    # sys.exit and SystemExit raised in compiled frames, atexit handlers reading tensors
    ("exits.py", [], [], 5),
    # warnings from compiled frames, replayed at the user's lines; and raised under -W error
    ("warnings_replayed.py", [], [], 3),
    ("warnings_replayed.py", [], ["-W", "error"], 2),
    # match, walrus, star-unpacking, comprehensions, try/finally, class attributes changed later
    ("python_semantics.py", [], [], 6),
    # torch.Generator arguments, randperm, bernoulli, manual_seed inside a function, dropout
    ("rng.py", [], [], 6),
]


def _without_summary(stderr: str) -> str:
    return "".join(
        line for line in stderr.splitlines(keepends=True) if not line.startswith("[framejit:")
    )


@needs_hook
@pytest.mark.parametrize(
    ("script", "args", "options", "graphs"),
    _SCRIPTS,
    ids=[f"{s[0][:-3]}{'-' + ''.join(s[2]) if s[2] else ''}" for s in _SCRIPTS],
)
def test_a_realistic_script_runs_as_without_framejit(script, args, options, graphs) -> None:
    path = os.path.join(SCRIPTS, script)
    plain = _run([*options, path, *args])
    hooked = _run([*options, "-m", "framejit", "run", path, *args], FRAMEJIT_LOGS="summary")
    assert hooked.returncode == plain.returncode, hooked.stderr
    assert hooked.stdout == plain.stdout
    assert _without_summary(hooked.stderr) == plain.stderr
    assert _summary(hooked.stderr)["graphs"] >= graphs, hooked.stderr
