"""The tools that tests load as modules (`tools/op_sweep.py`, `tools/module_sweep.py`) turn
Triton's interpreter on for a CPU run, and leave it off in a GPU test run
(`FRAMEJIT_TEST_DEVICE=cuda`): there the variable, set at collection, made every worker run
the kernels of later tests in the interpreter. And `tools/bench/kernels.py` runs end to end
with CUDA's timing calls faked, and `tools/bench/models.py` with its smoke shapes, so their first
run on a lent GPU is not their first run."""

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


def _run_tool(argv: list[str], interpret: bool) -> subprocess.CompletedProcess:
    """`python argv...` with the repository on the path (and Triton's interpreter on where
    asked), failing the test with its stderr's end when it fails."""
    env = dict(os.environ, TRITON_INTERPRET="1") if interpret else dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


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


# tools/bench/kernels.py on the CPU, with CUDA's timing calls faked by the host clock and the
# cases shrunk: device time is scarce, so its code paths must not first run on a GPU.
FAKE_CUDA_KERNELS = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import kernels

class Event:
    def __init__(self, enable_timing=False):
        self.t = None
    def record(self):
        self.t = time.perf_counter()
    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3

torch.cuda.Event = Event
torch.cuda._sleep = lambda cycles: time.sleep(cycles / 2e9)
torch.cuda.synchronize = lambda: None
torch.cuda.get_device_name = lambda: "fake"
torch.cuda.is_available = lambda: True
randn = torch.randn
torch.randn = lambda *shape, device=None, dtype=torch.float32: randn(
    *[min(s, 64) for s in shape], dtype=dtype
)
torch.empty = lambda n, dtype, device: torch.zeros(1024, dtype=dtype)
code = kernels.main(["--repeats", "2", "--no-compile", "--json", sys.argv[2]])
print("exit", code)
"""


def test_the_kernel_bandwidth_bench_runs_with_fake_cuda_timing(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("numpy")
    results = tmp_path / "kernels.json"
    _run_tool(["-c", FAKE_CUDA_KERNELS, str(TOOLS / "bench"), str(results)], interpret=True)
    import json

    rows = json.loads(results.read_text())
    assert [r["case"] for r in rows] == [
        "pointwise", "gelu_bf16", "softmax", "softmax_4k", "layer_norm", "rms_norm",
        "row_sum", "col_amax", "cat",
    ]  # fmt: skip
    for row in rows:  # every case timed both ways, for framejit and eager
        assert set(row["kernel_ms"]) == set(row["call_ms"]) == {"framejit", "eager"}
        assert all(ms > 0 for ms in row["kernel_ms"].values())


def test_the_model_bench_runs_its_smoke_shapes(tmp_path: pathlib.Path) -> None:
    """tools/bench/models.py --smoke on the CPU (Triton's interpreter): every code path but the
    CUDA timing (which is kernels.py's, run above with CUDA faked) and torch.compile's."""
    pytest.importorskip("numpy")
    results = tmp_path / "models.json"
    done = _run_tool(
        [str(TOOLS / "bench" / "models.py"), "--smoke", "--models", "gpt2"]
        + ["--host-profile", "--json", str(results)],
        interpret=True,
    )
    assert "host profile of 20 calls" in done.stdout
    import json

    rows = json.loads(results.read_text())
    assert [r["case"] for r in rows] == ["gpt2 b=1 t=8", "gpt2 b=2 t=8"]
    for row in rows:
        assert set(row["host_device_ms"]) == {"eager", "framejit"}
        assert all(ms > 0 for pair in row["host_device_ms"].values() for ms in pair)


def test_the_loop_bench_compiles_a_few_graphs_for_many_steps(tmp_path: pathlib.Path) -> None:
    """tools/bench/loops.py (framejit against eager; torch.compile left out here): the decode
    loop and the logging loop compile the same few graphs for 12 steps as for 24."""
    graphs = {}
    for steps in (12, 24):
        results = tmp_path / f"loops{steps}.json"
        _run_tool(
            [str(TOOLS / "bench" / "loops.py"), "--steps", str(steps)]
            + ["--repeats", "1", "--no-compile", "--json", str(results)],
            interpret=False,
        )
        import json

        rows = json.loads(results.read_text())
        assert [r["case"] for r in rows] == ["decode", "logging"]
        graphs[steps] = [r["framejit"]["graphs"] for r in rows]
    assert graphs[12] == graphs[24] and all(0 < n <= 4 for n in graphs[12]), graphs


def test_the_optimizer_bench_captures_the_step_in_one_graph(tmp_path: pathlib.Path) -> None:
    """tools/bench/optimizer.py on the CPU (torch.compile left out): the captured SGD step is
    one graph with no break after the first step, and its parameters equal eager's (the tool
    asserts that)."""
    import json

    results = tmp_path / "optimizer.json"
    done = _run_tool(
        [str(TOOLS / "bench" / "optimizer.py"), "--layers", "3", "--width", "8"]
        + ["--repeats", "2", "--no-torch-compile", "--json", str(results)],
        interpret=False,
    )
    assert "(1 graph(s), 0 break(s) after the first step)" in done.stdout, done.stdout
    row = json.loads(results.read_text())
    assert row["backend"] == "aot_eager" and row["eager"] > 0 and row["framejit"] > 0


def test_the_guard_bench_folds_a_model_into_a_few_checks(tmp_path: pathlib.Path) -> None:
    """tools/bench/guards.py: the same guards in each form; with the extension, the folded
    function has a few checks where one module_check per module has many more and Python one
    per guard (times are printed, not tested)."""
    import json

    results = tmp_path / "guards.json"
    _run_tool(
        [str(TOOLS / "bench" / "guards.py"), "--calls", "20", "--repeats", "1"]
        + ["--json", str(results)],
        interpret=False,
    )
    rows = json.loads(results.read_text())
    for model in ("mlp12", "gpt12"):
        python = rows[f"{model}/python"]
        assert python["checks"] == python["guards"]
        if f"{model}/folded" in rows:
            folded, grouped = rows[f"{model}/folded"], rows[f"{model}/grouped"]
            assert folded["guards"] == grouped["guards"] == python["guards"]
            assert folded["checks"] < 10 < grouped["checks"] < python["checks"]
