"""The on-disk kernel cache: generated modules stored under `config.cache_dir`, keyed by source.

`load(source, constants)` writes the module to `<cache_dir>/triton/<key[:2]>/fj_<key>.py`
(unless a file with that key is already there: another compilation, maybe in another process,
wrote it) and imports it from there, so Triton reads the kernels' source from a real file and a
second process starts from the same file. The key hashes the source, the Triton version, the
device (its name and compute capability: a GPU model's binaries and tuned configs are its own)
and whether Triton's interpreter runs the kernels (the same text compiles differently there).
Triton keeps the compiled binaries in its own cache (`TRITON_CACHE_DIR`, keyed by source,
device and version too), so a second process that finds the module compiles nothing; the
autotune choices sit beside the module (`fj_<key>.tune.json`, see autotune.py).

Invariants:

- Files are written whole (temporary file, then rename), so a reader never sees half a module.
- A module without constants is shared by every graph with the same source (in-process
  memo); one with constants is loaded fresh, since the constants are not in its text.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from framejit import config

STATS = {"written": 0, "disk_hits": 0, "memory_hits": 0}
_MODULES: dict[str, ModuleType] = {}


def interpreter_active() -> bool:
    """Whether `@triton.jit` functions defined now run in Triton's CPU interpreter."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def device_tag(device: str) -> str:
    """`NVIDIA H100 80GB HBM3 sm90` for a CUDA device, else the device's name (`cpu`)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(dev)
        return f"{props.name} sm{props.major}{props.minor}"
    return dev.type


def cache_key(source: str, device: str = "cpu") -> str:
    import triton

    tag = f"triton={triton.__version__};device={device};interpret={interpreter_active()}\n"
    return hashlib.sha256((tag + source).encode()).hexdigest()[:32]


def path_for(key: str) -> Path:
    return Path(config.cache_dir) / "triton" / key[:2] / f"fj_{key}.py"


def load(source: str, constants: list[Any], device: str = "cpu") -> ModuleType:
    key = cache_key(source, device)
    if not constants and key in _MODULES:
        STATS["memory_hits"] += 1
        return _MODULES[key]
    path = path_for(key)
    if path.exists() and path.read_text() == source:
        STATS["disk_hits"] += 1
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
        STATS["written"] += 1
    name = f"framejit_kernels_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    module.CONSTANTS[:] = constants
    if not constants:
        _MODULES[key] = module
    return module


def clear_memory() -> None:
    """Forget the in-process modules (the files stay): the next load reads the disk."""
    _MODULES.clear()
