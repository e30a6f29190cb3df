"""What each log artifact prints when framejit compiles real functions: set_logs(...) from code
(captured with capsys) and FRAMEJIT_LOGS from the environment (a subprocess)."""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import framejit
from framejit.testing import CompileCounter


def scaled_relu(x: torch.Tensor, n: int) -> torch.Tensor:
    y = x * n
    return y.relu() + 1


def prints(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    print("inside prints")
    return y + 1


def line_of(fn: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def artifact_lines(err: str, name: str) -> list[str]:
    """The lines of artifact `name`, without their `[framejit:name] ` prefix."""
    prefix = f"[framejit:{name}] "
    return [line[len(prefix) :] for line in err.splitlines() if line.startswith(prefix)]


def run_scaled_relu(*ns: int) -> None:
    jitted = framejit.jit(scaled_relu, backend=CompileCounter())
    x = torch.randn(3)
    for n in ns:
        torch.testing.assert_close(jitted(x, n), scaled_relu(x, n))


def test_nothing_is_printed_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    run_scaled_relu(2, 3)
    jitted = framejit.jit(prints, backend="eager")
    jitted(torch.randn(3))
    captured = capsys.readouterr()
    assert "[framejit" not in captured.err
    assert captured.out == "inside prints\n"


def test_only_the_requested_artifact_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(graph_code=True)
    run_scaled_relu(2, 3)
    err = capsys.readouterr().err
    names = set(re.findall(r"^\[framejit:(\w+)\]", err, flags=re.MULTILINE))
    assert names == {"graph_code"}
    assert all(line.startswith("[framejit:graph_code] ") for line in err.splitlines())


def test_graph_code(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(graph_code=True)
    run_scaled_relu(2, 2, 2)
    lines = artifact_lines(capsys.readouterr().err, "graph_code")
    code = "\n".join(lines)
    assert code.count("def forward(self") == 1  # once per compile, not per call
    assert lines[0] == "# graph of scaled_relu"
    assert "relu()" in code and "* 2" in code and "+ 1" in code
    assert re.search(r"return \(\w+,\)", code)
    ast.parse(code)  # the printed graph is Python


def test_guards_printed_with_the_user_line(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(guards=True)
    run_scaled_relu(2)
    lines = artifact_lines(capsys.readouterr().err, "guards")
    header, *guards = lines
    assert header == f"guards of scaled_relu ({len(guards)}):"
    assert len(guards) == 3
    user_line = f"{__file__}:{line_of(scaled_relu, 'y = x * n')} in scaled_relu"
    constant = next(g for g in guards if "L['n']" in g)
    check, _, origin = constant.strip().partition("    # ")
    assert origin == user_line
    assert check == "type(L['n']) is int and L['n'] == 2"
    ast.parse(check, mode="eval")  # a guard on a constant prints as a Python expression
    tensor = next(g for g in guards if "L['x']" in g)
    assert user_line in tensor and "size=(3,)" in tensor and "torch.float32" in tensor
    assert any("grad_enabled=True" in g for g in guards)


def test_every_guard_printed_is_python(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(guards=True)
    run_scaled_relu(2)
    _, *guards = artifact_lines(capsys.readouterr().err, "guards")
    for guard in guards:
        check = guard.strip().partition("    # ")[0]
        ast.parse(check, mode="eval")


def test_bytecode_original_and_transformed(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(bytecode=True)
    run_scaled_relu(2)
    text = "\n".join(artifact_lines(capsys.readouterr().err, "bytecode"))
    first = inspect.getsourcelines(scaled_relu)[1]
    header = f"original bytecode of scaled_relu ({__file__}:{first}):"
    assert text.startswith(header)
    original, marker, transformed = text.partition("transformed bytecode:")
    assert marker
    assert "BINARY_OP" in original and "(x)" in original and "(n)" in original
    assert "relu" in original
    assert "___graph_out" in transformed and "CALL" in transformed
    assert "RETURN_VALUE" in transformed
    assert "BINARY_OP" not in transformed  # the arithmetic moved into the graph


def test_recompiles_names_the_guard_and_its_actual_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    framejit.set_logs(recompiles=True)
    jitted = framejit.jit(scaled_relu, backend=CompileCounter())
    x = torch.randn(3)
    jitted(x, 2)
    jitted(x, 2)
    assert capsys.readouterr().err == ""  # first compile and a hit are not recompiles
    jitted(x, 5)
    (line,) = artifact_lines(capsys.readouterr().err, "recompiles")
    assert "recompiling" in line and "scaled_relu" in line
    assert "L['n'] == 2" in line
    assert line.endswith("actual: 5")
    assert f"{__file__}:{line_of(scaled_relu, 'y = x * n')}" in line
    jitted(torch.randn(2, 2), 5)
    (line,) = artifact_lines(capsys.readouterr().err, "recompiles")
    assert "check_tensor(L['x']" in line and "size=(3,)" in line
    assert "actual: Tensor(" in line and "shape=(2, 2)" in line


def test_graph_table(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(graph=True)
    run_scaled_relu(2)
    lines = artifact_lines(capsys.readouterr().err, "graph")
    assert lines[0] == "graph of scaled_relu:"
    header = lines[1].split()
    assert header[:3] == ["opcode", "name", "target"]
    assert set(lines[2].replace(" ", "")) == {"-"}
    rows = [line.split()[0] for line in lines[3:]]
    assert rows == ["placeholder", "call_function", "call_method", "call_function", "output"]
    relu_row = next(line for line in lines if line.startswith("call_method")).split()
    assert relu_row[2] == "relu"


def test_graph_breaks_reason_with_file_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(graph_breaks=True)
    jitted = framejit.jit(prints, backend=CompileCounter())
    x = torch.randn(3)
    torch.testing.assert_close(jitted(x), x.sin() + 1)
    captured = capsys.readouterr()
    assert captured.out == "inside prints\n"
    (line,) = artifact_lines(captured.err, "graph_breaks")
    assert "graph break in prints" in line
    assert "`print()`" in line
    assert f"{__file__}:{line_of(prints, 'print(')} in prints" in line
    assert 'print("inside prints")' in line  # the source line itself


def test_graph_breaks_in_an_inlined_function_show_the_user_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def outer(x: torch.Tensor) -> torch.Tensor:
        return prints(x) * 2

    framejit.set_logs(graph_breaks=True)
    jitted = framejit.jit(outer, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(jitted(x), outer(x))
    text = "\n".join(artifact_lines(capsys.readouterr().err, "graph_breaks"))
    assert f"{__file__}:{line_of(prints, 'print(')} in prints" in text
    assert f"{__file__}:{line_of(outer, 'prints(x)')} in outer" in text
    assert "user stack" in text


def test_set_logs_replaces_the_previous_setting(capsys: pytest.CaptureFixture[str]) -> None:
    framejit.set_logs(graph_code=True)
    framejit.set_logs(guards=True)
    run_scaled_relu(2)
    err = capsys.readouterr().err
    assert "[framejit:guards]" in err and "[framejit:graph_code]" not in err
    framejit.set_logs()
    framejit.reset()
    run_scaled_relu(2)
    assert capsys.readouterr().err == ""


SCRIPT = """
    import torch
    import framejit

    def scaled(x, n):
        return (x * n).relu()

    jitted = framejit.jit(scaled, backend="eager")
    jitted(torch.ones(3), 2)
    jitted(torch.ones(3), 3)
    print("done")
"""


def run_script(tmp_path: Path, logs: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT")}
    env["FRAMEJIT_LOGS"] = logs
    return subprocess.run(
        [sys.executable, str(script)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_framejit_logs_environment_variable(tmp_path: Path) -> None:
    result = run_script(tmp_path, "graph_code, recompiles")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    err = result.stderr
    assert len(artifact_lines(err, "graph_code")) > 0
    assert "def forward(self" in err
    (recompile,) = artifact_lines(err, "recompiles")
    assert "L['n'] == 2" in recompile and "actual: 3" in recompile
    assert f"{tmp_path / 'script.py'}:6" in recompile
    assert "[framejit:guards]" not in err and "[framejit:bytecode]" not in err


def test_framejit_logs_component_name_turns_on_its_artifact(tmp_path: Path) -> None:
    result = run_script(tmp_path, "guards")
    assert result.returncode == 0, result.stderr
    guards = artifact_lines(result.stderr, "guards")
    assert guards[0] == "guards of scaled (3):"
    assert f"{tmp_path / 'script.py'}:6 in scaled" in "\n".join(guards)


def test_framejit_logs_typo_warns_and_the_program_runs(tmp_path: Path) -> None:
    result = run_script(tmp_path, "graph_cod")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n"
    assert "graph_cod" in result.stderr and "did you mean 'graph_code'" in result.stderr
    assert "[framejit:" not in result.stderr
