"""Compile every Triton kernel framejit launches for a real GPU, on a machine without one.

The CPU tests run the generated kernels in Triton's interpreter, which accepts some code that
Triton's compiler rejects (and the reverse). Triton's compiler itself needs no GPU: it lowers a
kernel through its IRs to PTX and runs `ptxas` (shipped in the Triton wheel) to a cubin. This
module hooks the interpreter's launches and records each distinct kernel (its module file,
name, argument types, constexprs and warps); `compile_recorded` then loads each module again
in a fresh process, without the interpreter, and compiles each kernel for the target (default
sm_90, an H100/H200) with the argument types of its launch. Nothing runs on a GPU: this checks
that the kernels compile, not their results.

    install()                        # then run anything that launches kernels (interpreter)
    compile_recorded("cuda:90")      # [(kernel, signature, error text)]

`FRAMEJIT_PTX_CHECK=1` makes the Triton backend tests do it (tests/backend/triton/conftest.py);
`python tools/ptx_check.py [pytest args]` runs pytest that way and prints a summary.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

_TYPES = {
    "torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16",
    "torch.float64": "fp64", "torch.int64": "i64", "torch.int32": "i32", "torch.int16": "i16",
    "torch.int8": "i8", "torch.uint8": "u8", "torch.bool": "i1",
}  # fmt: skip

_lock = threading.Lock()
_seen: set[str] = set()
_modules: dict[str, Any] = {}
_failures: list[tuple[str, str, str]] = []
_stats = {"compiled": 0, "seconds": 0.0}
_target: Any = None


def _arg_type(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return "*" + _TYPES[str(value.dtype)]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for a {type(value).__name__} argument")


def _real_module(path: str) -> Any:
    """The generated module at `path`, loaded with the compiling `triton.jit` (this process
    must not have TRITON_INTERPRET set)."""
    module = _modules.get(path)
    if module is None:
        name = f"framejit_ptx_{len(_modules)}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[path] = module
    return module


def record_launch(fn: Any, args: tuple, kwargs: dict[str, Any]) -> None:
    """Remember the kernel of one interpreter launch (once per distinct key)."""
    import inspect

    names = list(inspect.signature(fn).parameters)
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    constexprs = {k: v for k, v in kwargs.items() if k not in options}
    signature = {n: _arg_type(a) for n, a in zip(names, args)}
    signature |= {k: "constexpr" for k in constexprs}
    key = json.dumps([fn.__code__.co_filename, fn.__name__, signature, constexprs, options])
    with _lock:
        _seen.add(key)


def compile_one(key: str) -> str | None:
    """Compile one recorded launch for the target; the error text, or None."""
    import triton
    from triton.compiler import ASTSource

    path, name, signature, constexprs, options = json.loads(key)
    started = time.perf_counter()
    try:
        kernel = getattr(_real_module(path), name)
        source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
        triton.compile(source, target=_target, options=options)
    except Exception as exc:  # noqa: BLE001 - recorded, reported at the end
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        _failures.append((f"{path}:{name}", str(signature), text[-2000:]))
        return text
    finally:
        _stats["compiled"] += 1
        _stats["seconds"] += time.perf_counter() - started
    return None


def compile_recorded(target: str = "cuda:90") -> list[tuple[str, str, str]]:
    """Compile every recorded launch in a fresh process (the interpreter patches
    triton.language in this one); returns the failures."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(sorted(_seen), f)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET",)}
    done = subprocess.run(
        [sys.executable, __file__, "--compile", f.name, "--target", target],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    os.unlink(f.name)
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return [("ptx_check", "", f"the compiling process failed: {done.stderr[-2000:]}")]
    _set_target(target)
    _failures[:] = [tuple(x) for x in result["failures"]]
    _stats.update(compiled=result["compiled"], seconds=result["seconds"])
    return failures()


def install() -> None:
    """Record each kernel the interpreter launches from now on (`compile_recorded` compiles
    them)."""
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run
    if getattr(original, "_framejit_ptx", False):
        return

    def run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        if self.fn.__name__.startswith("fj_"):
            record_launch(self.fn, args, kwargs)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    run._framejit_ptx = True  # type: ignore[attr-defined]
    run._framejit_original = original  # type: ignore[attr-defined]
    InterpretedFunction.run = run


def uninstall() -> None:
    """Stop recording, and forget what was recorded."""
    from triton.runtime.interpreter import InterpretedFunction

    run = InterpretedFunction.run
    if getattr(run, "_framejit_ptx", False):
        InterpretedFunction.run = run._framejit_original  # type: ignore[attr-defined]
    _seen.clear()
    _failures.clear()


def _set_target(target: str) -> None:
    global _target
    from triton.backends.compiler import GPUTarget

    backend, arch = target.split(":")
    _target = GPUTarget(backend, int(arch), 32)


def failures() -> list[tuple[str, str, str]]:
    return list(_failures)


def summary() -> str:
    lines = [
        f"ptx check ({_target or ''}): {_stats['compiled']} kernels compiled in "
        f"{_stats['seconds']:.0f}s, {len(_failures)} failed"
    ]
    for kernel, signature, error in _failures:
        lines.append(f"FAILED {kernel} {signature}\n    {error.splitlines()[-1]}")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compile"]:
        _set_target(sys.argv[sys.argv.index("--target") + 1])
        with open(sys.argv[2]) as f:
            keys = json.load(f)
        for key in keys:
            compile_one(key)
        print(json.dumps({"failures": _failures, **_stats}))
        sys.exit(0)
    import pytest

    os.environ["FRAMEJIT_PTX_CHECK"] = os.environ.get("FRAMEJIT_PTX_CHECK") or "1"
    sys.exit(pytest.main(sys.argv[1:] or ["-q", "-p", "no:cacheprovider", "tests/backend/triton"]))
