"""Launching a compiled Triton kernel without Triton's per-call work.

`kernel[grid](*args, **config)` (Triton's `JITFunction.run`) does, on every call: bind the
arguments and compute their specialization, build the cache key (with the options' text), look
the compiled kernel up, check the globals the kernel read, build launch metadata for the launch
hooks, and only then call `CompiledKernel.run`. A GPT-2-sized graph has about 60 launches per
call, so at batch 1 that work is what the GPU waits for.

`Launches` keeps, per kernel, the `CompiledKernel` that Triton's own path launched for each
*argument key* it has seen, and launches a later call whose key is known through
`CompiledKernel.run` directly, on the current stream. The key holds what Triton specializes a
kernel on (`native_specialize_impl`, with every parameter specialized, as framejit's kernels
are): per pointer its dtype and whether it is 16-byte aligned; per int whether it is 1, whether
16 divides it and its range (i32, i64, u64); per other scalar its type. Two calls with equal keys
compile to the same kernel, so the direct launch runs what Triton would have run.

Invariants:

- A key is only ever filled from Triton's own launch of a call with that key; never guessed.
- The direct path is used only where `direct_launch_supported()` holds: the installed Triton's
  `JITFunction.run` launches with the `CompiledKernel.run` call copied here, and the key refines
  Triton's specialization over a set of sample values (checked once per process with the
  kernel's own backend). Otherwise every launch goes through Triton.
- Launch hooks (a profiler's) get Triton's path, which builds their metadata; so does every
  launch while `config.direct_launch` is off (FRAMEJIT_DIRECT_LAUNCH=0).
- The current device must be the one the kernel was compiled on, else Triton's path.
- Under Triton's CPU interpreter a launch returns no `CompiledKernel`: nothing is remembered.
- Known difference: a Triton debug or instrumentation knob changed after a kernel's first launch
  does not recompile that kernel on the direct path (Triton's own path would).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from framejit.config import config

STATS = {"direct": 0, "triton": 0}

# Sample values whose Triton specialization the key must determine (see `_key_refines`).
_INT_SAMPLES = [0, 1, 2, 15, 16, 17, 32, 48, -1, -15, -16, -17, -32]
for _edge in (2**31, 2**32, 2**63, 2**64):
    _INT_SAMPLES += [_edge - 17, _edge - 16, _edge - 1, _edge, _edge + 1, _edge + 16]
    _INT_SAMPLES += [-_edge - 16, -_edge - 1, -_edge, -_edge + 1, -_edge + 16]
_INT_SAMPLES = [v for v in _INT_SAMPLES if -(2**63) <= v < 2**64]
_SCALAR_SAMPLES = [0.0, 1.0, -2.5, float("inf"), True, False]

# The launch in Triton's `JITFunction.run` that `Launches.launch` makes itself.
_TRITON_LAUNCH = (
    "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, "
    "launch_metadata"
)


def _key_text(index: int, value: Any) -> str:
    """The key of argument `a<index>` as Python source, for values of `value`'s type."""
    a = f"a{index}"
    if isinstance(value, torch.Tensor):
        return f"{a}.dtype, not {a}.data_ptr() & 15"
    if type(value) is int:
        return (
            f"{a}.__class__, {a} == 1, not {a} & 15, "
            f"-2147483648 <= {a} <= 2147483647, {a} >= 9223372036854775808"
        )
    return f"{a}.__class__"


def key_function(args: tuple[Any, ...]) -> Callable[[tuple[Any, ...]], Any]:
    """A function of a launch's argument tuple giving its key, made for arguments of the types
    of `args` (another type at a place gives another key or raises)."""
    names = "".join(f"a{k}, " for k in range(len(args)))
    parts = ", ".join(_key_text(k, value) for k, value in enumerate(args))
    source = f"def key(args):\n    ({names}) = args\n    return ({parts},)\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<framejit launch key>", "exec"), namespace)  # noqa: S102
    return namespace["key"]


def _find_native_key() -> Callable[[tuple[Any, ...]], Any] | None:
    """The same key computed by framejit's C++ extension (`launch_key`, about a half of the
    Python key's cost), or None where it is not built: each kernel's key is then written in
    Python. Either one is checked against Triton's specialization (`_key_refines`)."""
    from framejit.guards import guard

    return getattr(guard._tensor_check, "launch_key", None)


_native_key = _find_native_key()


def make_key(args: tuple[Any, ...]) -> Callable[[tuple[Any, ...]], Any]:
    """The key function for launches with arguments like `args`: the extension's, or one
    written in Python for their types."""
    return _native_key or key_function(args)


def _key_refines(specialize: Callable[[Any], Any]) -> bool:
    """Whether equal keys imply equal specializations (`specialize(value)` is Triton's) over the
    samples: ints at the range and divisibility edges, pointers at every offset up to 64
    bytes, floats and bools."""
    buffer = torch.zeros(256, dtype=torch.uint8)
    values: list[Any] = [*_INT_SAMPLES, *_SCALAR_SAMPLES]
    values += [buffer[k:] for k in range(65)]
    values += [buffer[k:].view(torch.float32) for k in range(0, 65, 4)]
    seen: dict[tuple, Any] = {}
    for value in values:
        key = make_key((value,))((value,))
        if key is None:  # no key: such an argument always takes Triton's path
            continue
        if seen.setdefault(key, specialize(value)) != specialize(value):
            return False
    return True


@functools.cache
def _launch_matches_triton() -> bool:
    try:
        from triton.runtime.jit import JITFunction

        return _TRITON_LAUNCH in inspect.getsource(JITFunction.run)
    except Exception:  # noqa: BLE001 - no source to read: keep Triton's path
        return False


_refines_by_backend: dict[type, bool] = {}


def direct_launch_supported(backend: Any) -> bool:
    """Whether launches may skip Triton's `run` with this Triton and backend (see the module
    docstring); checked once per backend class."""
    cls = type(backend)
    if cls not in _refines_by_backend:
        try:
            from triton.runtime.jit import native_specialize_impl

            def specialize(value: Any) -> Any:
                return native_specialize_impl(backend, value, False, True, True)

            _refines_by_backend[cls] = _launch_matches_triton() and _key_refines(specialize)
        except Exception:  # noqa: BLE001 - another Triton: keep its path
            _refines_by_backend[cls] = False
    return _refines_by_backend[cls]


def _hooks_off() -> bool:
    runtime = _runtime()
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


@functools.cache
def _runtime() -> Any:
    from triton import knobs

    return knobs.runtime


class _Direct:
    """One remembered `CompiledKernel`, ready to launch."""

    __slots__ = ("run", "function", "metadata", "device")

    def __init__(self, compiled: Any, device: int) -> None:
        self.run = compiled.run
        self.function = compiled.function
        self.metadata = compiled.packed_metadata
        self.device = device


def compile_options(kernel: Any) -> dict[str, Any]:
    """The compile options framejit gives a kernel's launches: floating-point contraction on
    (an add of a product is one fma), as every kernel was written and measured with. Said
    explicitly: Triton 3.9 warns when it is left to its default, which 3.10 turns off. None
    for the interpreter's kernels (it takes no compile options)."""
    from triton.runtime.jit import JITFunction

    return {"enable_fp_fusion": True} if isinstance(kernel, JITFunction) else {}


class Launches:
    """`launches.launch(grid, args)` launches `kernel` with `config` (block sizes, warps) over
    `grid`, directly where the arguments' key has been launched by Triton before."""

    def __init__(self, kernel: Any, config: dict[str, int]) -> None:
        self.kernel = kernel
        self.config = config
        self.options = {**config, **compile_options(kernel)}  # Triton's path's keywords
        self.key: Callable[[tuple[Any, ...]], Any] | None = None
        self.known: dict[tuple, _Direct] = {}
        self.tail: tuple[Any, ...] | None = None  # the constexpr values after the arguments
        self.enabled = True

    def launch(self, grid: tuple[int, ...], args: tuple[Any, ...]) -> None:
        """`grid`: 1 to 3 sizes (3 is the fast one: what `Launcher` passes)."""
        key = self.key
        if key is not None and config.direct_launch:
            try:
                direct = self.known.get(key(args))
            except Exception:  # noqa: BLE001 - an argument of another type: Triton decides
                direct = None
            if direct is not None and _device() == direct.device and _hooks_off():
                STATS["direct"] += 1
                if len(grid) != 3:
                    grid = (*grid, 1, 1)[:3]
                direct.run(
                    *grid,
                    _stream(direct.device),
                    direct.function,
                    direct.metadata,
                    None,
                    None,
                    None,
                    *args,
                    *self.tail,
                )
                return
        STATS["triton"] += 1
        compiled = self.kernel[grid](*args, **self.options)
        if self.enabled:
            self._remember(compiled, args)

    def _remember(self, compiled: Any, args: tuple[Any, ...]) -> None:
        """After Triton's launch of `args`: keep `compiled` under their key, if it can be
        launched directly."""
        if not (hasattr(compiled, "run") and hasattr(compiled, "packed_metadata")):
            self.enabled = False  # the interpreter, or another Triton: its path every time
            return
        if self.tail is None and not self._setup(args):
            self.enabled = False
            return
        with contextlib.suppress(Exception):  # unexpected arguments: Triton's path for them
            key = self.key(args)
            if key is not None:
                self.known[key] = _Direct(compiled, _device())

    def _setup(self, args: tuple[Any, ...]) -> bool:
        names = list(getattr(self.kernel, "arg_names", []))
        rest = names[len(args) :]
        if not names or any(name not in self.config for name in rest):
            return False
        backend = _backend(self.kernel)
        if backend is None or not direct_launch_supported(backend):
            return False
        self.tail = tuple(self.config[name] for name in rest)
        self.key = make_key(args)
        return True


def _backend(kernel: Any) -> Any:
    """The backend Triton compiled `kernel` with on the current device, or None."""
    try:
        from triton.backends.compiler import BaseBackend

        backend = kernel.device_caches[_device()][3]
    except Exception:  # noqa: BLE001
        return None
    return backend if isinstance(backend, BaseBackend) else None


# torch.cuda.current_device without its lazy-init check (a direct launch follows a Triton one)
_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _no_stream(device: int) -> int:
    raise RuntimeError("no CUDA in this build of torch")


_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", _no_stream)
