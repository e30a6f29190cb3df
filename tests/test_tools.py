"""The tools that tests load as modules (`tools/op_sweep.py`, `tools/module_sweep.py`) turn
Triton's interpreter on for a CPU run, and leave it off in a GPU test run
(`FRAMEJIT_TEST_DEVICE=cuda`): there the variable, set at collection, made every worker run
the kernels of later tests in the interpreter."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[1] / "tools"

LOAD = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("tool", sys.argv[1])
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)
print(os.environ.get("TRITON_INTERPRET", "unset"))
"""


@pytest.mark.parametrize("tool", ["op_sweep.py", "module_sweep.py"])
@pytest.mark.parametrize(("device", "expected"), [("cuda", "unset"), ("cpu", "1")])
def test_loading_a_tool_sets_the_interpreter_only_off_the_gpu(tool, device, expected) -> None:
    pytest.importorskip("numpy")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["FRAMEJIT_TEST_DEVICE"] = device
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(TOOLS / tool)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
