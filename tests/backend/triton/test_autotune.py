"""The small autotune (candidate configs, the Launcher's choice and its record on disk) and the
kernel cache across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from framejit.backend.triton import autotune
from triton_helpers import aten_stages, check


def test_first_config_is_the_heuristic_and_small_kernels_have_one() -> None:
    assert autotune.configs("pointwise", 512, 0, False, False) == [{"XBLOCK": 512, "num_warps": 4}]
    assert autotune.configs("reduction", 4, 10, True, True) == [
        {"XBLOCK": 4, "RBLOCK": 16, "num_warps": 4}
    ]
    assert autotune.configs("reduction", 3, 5000, False, False) == [
        {"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 4}
    ]


@pytest.mark.parametrize(
    "kind, xnumel, rnumel, persistent",
    [
        ("pointwise", 1 << 22, 0, False),
        ("reduction", 8192, 1000, True),
        ("reduction", 64, 50000, False),
    ],
)
def test_max_autotune_lists_more(kind: str, xnumel: int, rnumel: int, persistent: bool) -> None:
    default = autotune.configs(kind, xnumel, rnumel, persistent, False)
    wide = autotune.configs(kind, xnumel, rnumel, persistent, True)
    assert 1 < len(default) < len(wide)
    assert default[0] == wide[0]
    for config in wide:
        assert config.get("RBLOCK", 1) * config["XBLOCK"] <= max(16384, config.get("RBLOCK", 1))


class FakeKernel:
    """Stands in for a @triton.jit function: records launches."""

    def __init__(self) -> None:
        self.fn = SimpleNamespace(__name__="fj_pointwise_fake_0")
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        return lambda *args, **config: self.launches.append((grid, config))


def test_launcher_times_on_cuda_and_remembers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(autotune, "_device_name", lambda device: "Fake GPU sm90")
    arg = SimpleNamespace(device=torch.device("cuda", 0))
    candidates = [{"XBLOCK": 256, "num_warps": 4}, {"XBLOCK": 1024, "num_warps": 4}]
    times = iter([2.0, 1.0])
    module_file = str(tmp_path / "fj_abc.py")
    kernel = FakeKernel()

    def timer(launch):
        launch()
        return next(times)

    launcher = autotune.Launcher(kernel, 4096, candidates, module_file, timer=timer)
    launcher(arg)
    launcher(arg)
    assert launcher.config == candidates[1] and launcher.grid == (4, 1, 1)
    assert kernel.launches[-1] == ((4, 1, 1), candidates[1])
    record = tmp_path / "fj_abc.tune.json"
    assert record.exists()
    # A second process (a new Launcher on the same module file) takes the record, no timing.
    again = autotune.Launcher(FakeKernel(), 4096, candidates, module_file, timer=None)
    before = dict(autotune.STATS)
    again(arg)
    assert again.config == candidates[1]
    assert autotune.STATS["remembered"] == before["remembered"] + 1


def test_launcher_skips_a_config_that_fails(monkeypatch) -> None:
    monkeypatch.setattr(autotune, "_device_name", lambda device: "Fake GPU sm90")
    arg = SimpleNamespace(device=torch.device("cuda", 0))
    candidates = [{"XBLOCK": 4096, "num_warps": 16}, {"XBLOCK": 1024, "num_warps": 4}]

    calls = []

    def timer(launch):  # the first candidate does not compile
        calls.append(launch)
        if len(calls) == 1:
            raise RuntimeError("out of resources")
        return 1.0

    launcher = autotune.Launcher(FakeKernel(), 100000, candidates, None, timer=timer)
    launcher(arg)
    assert launcher.config == candidates[1]


@pytest.mark.interpreter_only
def test_interpreter_takes_the_first_config_without_timing() -> None:
    x = torch.randn(300, 300)  # large enough for several candidates
    found = aten_stages(lambda x: torch.relu(x) * 2, x)
    assert "Launcher(fj_pointwise_relu_mul_0, 90000, [" in found.source
    assert "fj_pointwise_relu_mul_0_run(arg0_1, buf1, 90000)" in found.source
    before = dict(autotune.STATS)
    check(lambda x: torch.relu(x) * 2, x)
    assert autotune.STATS["timed"] == before["timed"]
    assert autotune.STATS["first"] > before["first"]


def test_max_autotune_option_widens_the_source() -> None:
    from framejit.backend.triton import wants_max_autotune

    import framejit

    x = torch.randn(300, 300)
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda x: torch.relu(x) * 2)(x)
    from framejit.backend.triton import stages

    default, wide = stages(gm).source, stages(gm, max_autotune=True).source
    assert wide.count("'num_warps'") > default.count("'num_warps'") > 1
    assert wants_max_autotune({"max_autotune": True})
    old = framejit.config.max_autotune
    try:
        framejit.config.max_autotune = True
        assert wants_max_autotune()
    finally:
        framejit.config.max_autotune = old


SCRIPT = textwrap.dedent(
    """
    import os, sys, torch
    import framejit
    from framejit.backend.triton import cache
    x = torch.arange(12.0).view(3, 4)
    out = framejit.jit(lambda x: torch.softmax(x * 2, -1) + 1, backend="triton")(x)
    torch.testing.assert_close(out, torch.softmax(x * 2, -1) + 1)
    print(cache.STATS["written"], cache.STATS["disk_hits"])
    """
)


def test_second_process_starts_warm(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(tmp_path), TRITON_INTERPRET="1")
    runs = [
        subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert runs[0].stdout.split()[-2:] == ["1", "0"]  # the first process writes the module
    assert runs[1].stdout.split()[-2:] == ["0", "1"]  # the second finds it on disk
    assert len(list(tmp_path.rglob("fj_*.py"))) == 1


@pytest.mark.cuda
def test_cuda_ops_and_timed_autotune() -> None:
    x = torch.randn(512, 1000)
    i = torch.randint(0, 512, (300,))
    before = dict(autotune.STATS)
    check(lambda x: (torch.relu(x) * 2, torch.softmax(x, -1), x.argmax(-1)), x, device="cuda")
    check(lambda x, i: (x[i] + 1, torch.cat([x, x * 2], 1), x.prod(0)), x, i, device="cuda")
    check(lambda x: F.rms_norm(x, (1000,)).to(torch.bfloat16), x, device="cuda")
    assert (
        autotune.STATS["timed"] + autotune.STATS["remembered"]
        > before["timed"] + before["remembered"]
    )
