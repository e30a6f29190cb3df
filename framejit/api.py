"""The public entry points: jit, disable, reset, explain.

`jit(fn)` returns a JitFunction: on each call it binds the arguments the way the frame would see
them, runs the first cached entry whose guards hold, and otherwise asks the frontend to compile a
new entry (up to `config.recompile_limit`, then the code runs eagerly with one warning).
`jit(module)` returns a JitModule that stands in for the module: its state, its nn.Module
methods and its hooks are the module's own, and calling it is the module's call as eager makes
it (hooks included), with the forward run through a JitFunction.

While a TorchFunctionMode or TorchDispatchMode of the user's is active (`user_mode_active`: any
but torch's own device context), a call runs as plain Python: every entry's GLOBAL_STATE guard,
checked before any guard reads a tensor, fails, and a miss compiles nothing, so the mode sees the
program's torch calls, once each, and none of framejit's.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.modules import module as _nn_module

from framejit.backend import lookup_backend
from framejit.backend.registry import with_cudagraphs
from framejit.config import MODES as _CONFIG_MODES
from framejit.config import config
from framejit.frontend import side_effects
from framejit.frontend.breaks import resumes
from framejit.frontend.codegen import (
    argnames_of,
    call_taking,
    rebind,
    run_resumes,
    same_cells,
)
from framejit.frontend.convert import compile_frame, guard_report
from framejit.frontend.hook import disabled as hook_disabled
from framejit.frontend.hook import forget_skip_marks, inside_torch_dispatch, user_mode_active
from framejit.guards import CodeCache, clear_caches

MODES = _CONFIG_MODES
# torch.compile's `options` that mean something to framejit, with their types: the Triton
# backend's wider autotune (the Triton part of mode="max-autotune", without CUDA graphs).
OPTIONS: dict[str, type] = {"max_autotune": bool}


def _check_options(backend: Any, mode: Any, fullgraph: Any, dynamic: Any, options: Any) -> Any:
    resolved = lookup_backend(backend)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(map(repr, MODES))}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"fullgraph must be a bool, got {type(fullgraph).__name__}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
    for key, value in (options or {}).items():
        if key not in OPTIONS:
            raise ValueError(
                f"unknown option {key!r}; known options: {', '.join(map(repr, OPTIONS))}"
            )
        if not isinstance(value, OPTIONS[key]):
            raise TypeError(f"option {key!r} must be a {OPTIONS[key].__name__}, got {value!r}")
    return resolved


def _with_options(backend: Any, options: dict[str, Any]) -> Any:
    """`backend` with `options` read: `max_autotune` reaches the Triton compiler of the graphs
    `triton` (and `auto`, where it picks Triton) compiles; other backends have no use for it."""
    from framejit.backend import registry

    if "max_autotune" not in options or backend not in (registry.triton, registry.auto):
        return backend
    wide = options["max_autotune"]

    def compile_with_options(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        if backend is registry.auto and not registry._wants_triton(example_inputs):
            return backend(gm, example_inputs)
        from framejit.backend.aot import aot_compile
        from framejit.backend.triton import compile_graph

        inner = functools.partial(compile_graph, options={"max_autotune": wide})
        return aot_compile(gm, example_inputs, inner)

    compile_with_options.__name__ = getattr(backend, "__name__", "backend")
    return compile_with_options


def jit(
    fn: Any = None,
    *,
    backend: Any = None,
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Compile `fn` with framejit: a function, lambda, bound method, nn.Module, or any other
    callable torch.compile takes (a callable object, `functools.partial`, a builtin, a
    staticmethod); what is not a Python function is compiled as the call of it.

    Usable bare (`@jit`) or with options (`@jit(backend="eager")`). `jit` of something already
    jitted returns it as it is, unless options are given that differ from its own: then its
    original is compiled again with them (caches of its own).
    """
    given = dict(backend=backend, mode=mode, fullgraph=fullgraph, dynamic=dynamic, options=options)
    explicit = (
        backend is not None
        or mode is not None
        or fullgraph is not False
        or dynamic is not None
        or options is not None
    )
    if mode is not None and options is not None:
        # as torch.compile: a mode is itself a set of options
        raise ValueError("jit takes either mode= or options=, not both")
    backend = config.backend if backend is None else backend
    mode = mode if mode is not None else config.mode
    resolved = _check_options(backend, mode, fullgraph, dynamic, options)
    if fn is None:
        return lambda f: jit(f, **given)
    if mode in ("reduce-overhead", "max-autotune"):
        # compiled graphs run through CUDA graph trees; max-autotune also tunes Triton wider
        resolved = with_cudagraphs(resolved, max_autotune=mode == "max-autotune")
    if options:
        resolved = _with_options(resolved, options)
    settings = _Settings(resolved, mode, fullgraph, dynamic, dict(options or {}))
    if config.disable or _is_disabled(fn):
        return fn
    return _compile_callable(fn, settings, explicit)


def _is_disabled(fn: Any) -> bool:
    return bool(getattr(getattr(fn, "__func__", fn), "_framejit_disabled", False))


def _compile_callable(fn: Any, settings: _Settings, explicit: bool = True) -> Any:
    """What `jit(fn)` returns for these settings (`explicit`: the caller gave some)."""
    if isinstance(fn, JitModule):
        if not explicit or fn._settings == settings:
            return fn
        return JitModule(fn._orig_mod, settings)
    if isinstance(fn, torch.nn.Module):
        return JitModule(fn, settings)
    if isinstance(fn, JitFunction):
        if not explicit or fn._settings == settings:
            return fn
        return _compile_callable(fn._target, settings)
    if isinstance(fn, types.MethodType):
        func = fn.__func__
        if isinstance(func, types.FunctionType):
            return types.MethodType(_jit_function(func, settings), fn.__self__)
        if isinstance(func, JitFunction):  # a method whose function is `@jit` already
            return types.MethodType(_compile_callable(func, settings, explicit), fn.__self__)
    if isinstance(fn, types.FunctionType):
        return _jit_function(fn, settings)
    if isinstance(fn, (staticmethod, classmethod)):  # `@jit` above `@staticmethod` in a class
        return type(fn)(_compile_callable(fn.__func__, settings, explicit))
    if isinstance(fn, type) or not callable(fn):
        raise TypeError(
            f"framejit.jit expects a callable: a function, lambda, bound method, "
            f"torch.nn.Module or a torch builtin (torch.sin), a callable object or a "
            f"functools.partial (not a class); got {type(fn).__name__} {fn!r:.60}"
        )
    if _has_python_call(fn):
        cls = _GraphedObjectCall if _graphed(settings) else _ObjectCall
        return cls(_call_through(fn), settings, fn)
    return _jit_function(_call_through(fn), settings, target=fn)


def _has_python_call(obj: Any) -> bool:
    """Does the object's class (or a base) define `__call__` as a Python (or jit) function?"""
    for klass in type(obj).__mro__:
        if "__call__" in klass.__dict__:
            return isinstance(klass.__dict__["__call__"], (types.FunctionType, JitFunction))
    return False


def _call_through(target: Any) -> types.FunctionType:
    """A callable with no bytecode of its own to compile (a callable object, a partial, a
    builtin such as torch.sin): compiled as the Python function that calls it, so the
    translator traces the call as in any frame (a class's `__call__` inlined, a partial's
    function called with its arguments, a builtin captured as its one op). Named as `target`,
    and `__wrapped__` is `target`, so `inspect.signature` of the jit is the callable's."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    name = getattr(target, "__name__", None)
    if not isinstance(name, str):
        name = type(target).__name__
    qualname = getattr(target, "__qualname__", None)
    call.__name__ = name
    call.__qualname__ = qualname if isinstance(qualname, str) else name
    call.__doc__ = getattr(target, "__doc__", None)
    module = getattr(target, "__module__", None)
    if isinstance(module, str):
        call.__module__ = module
    call.__wrapped__ = target  # type: ignore[attr-defined]  # inspect.signature follows it
    return call


@dataclass(frozen=True)
class _Settings:
    backend: Any
    mode: str | None
    fullgraph: bool
    dynamic: bool | None
    options: dict[str, Any] = field(default_factory=dict)
    # Called with each CompileResult of this function, its resume functions and callees
    # (explain() collects them).
    observer: Callable[[Any], None] | None = None


def _make_binder(fn: types.FunctionType) -> Any:
    """A function with fn's signature returning the frame's arguments in co_varnames order
    (generated, so binding runs at C speed; inspect.Signature.bind for names that are not
    identifiers, as in resume functions of code whose locals a tool renamed)."""
    code = fn.__code__
    names = argnames_of(code)
    if not all(n.isidentifier() for n in names):
        # Only generated resume functions have such names: plain positional parameters.
        count = len(names)

        def bind_positionally(*args: Any) -> tuple[Any, ...]:
            if len(args) != count:
                raise TypeError(f"{code.co_name}() takes {count} arguments ({len(args)} given)")
            return args

        return bind_positionally
    sig = inspect.signature(fn, follow_wrapped=False)  # the code's own parameters
    params = []
    for p in sig.parameters.values():
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text = f"*{p.name}"
        elif p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
        params.append((p.kind, text))
    parts: list[str] = []
    seen_kwonly = False
    last_posonly = None
    for kind, text in params:
        if (
            kind is inspect.Parameter.KEYWORD_ONLY
            and not seen_kwonly
            and not any(k is inspect.Parameter.VAR_POSITIONAL for k, _ in params)
        ):
            parts.append("*")
            seen_kwonly = True
        parts.append(text)
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            last_posonly = len(parts)
    if last_posonly is not None:
        parts.insert(last_posonly, "/")
    src = f"def bind({', '.join(parts)}):\n    return ({''.join(n + ', ' for n in names)})\n"
    scope: dict[str, Any] = {}
    exec(src, scope)  # noqa: S102 - generated from a signature
    binder = scope["bind"]
    # named as the function, so a call with bad arguments raises eager's TypeError
    # ("f() missing 1 required positional argument: 'x'")
    binder.__name__, binder.__qualname__ = fn.__name__, fn.__qualname__
    binder.__defaults__ = fn.__defaults__
    binder.__kwdefaults__ = fn.__kwdefaults__
    return binder


def _follow_defaults(target: types.FunctionType, fn: types.FunctionType) -> None:
    """Give `target` (the binder, a compiled entry) `fn`'s defaults as they are now: the user
    may assign `fn.__defaults__` or `fn.__kwdefaults__` after `jit`."""
    if target.__defaults__ is not fn.__defaults__ or target.__kwdefaults__ is not fn.__kwdefaults__:
        target.__defaults__ = fn.__defaults__
        target.__kwdefaults__ = fn.__kwdefaults__


def _rebound(entry_fn: Any, live: types.FunctionType) -> Any:
    """An entry's function run with the cells of `live` (same code, other closure)."""
    if not isinstance(entry_fn, types.FunctionType) or entry_fn.__closure__ is None:
        return entry_fn
    return rebind(entry_fn, live, live.__closure__)


class JitFunction:
    """A compiled function: guards -> transformed code, compiling on a miss.

    It passes for the function it compiles: `functools.wraps` data, `__code__`/`__defaults__`
    (so `inspect.iscoroutinefunction`/`isgeneratorfunction` answer as for the function), pickle
    by reference and copy as itself, as a function does."""

    def __init__(self, fn: types.FunctionType, settings: _Settings, target: Any = None) -> None:
        self._fn = fn
        self._settings = settings
        # What the user gave `jit`: `fn` itself, or the callable `fn` calls (`_call_through`),
        # which binds as that callable does (a callable object or partial does not).
        self._target = fn if target is None else target
        self._binds = target is None
        self._wrapped: weakref.WeakKeyDictionary[Any, JitFunction] = weakref.WeakKeyDictionary()
        # resume code -> its jit, shared by this function and every resume function of its
        # (resume functions are remade at each compile; their code is the same, see
        # breaks._to_root, so a loop that breaks in every iteration compiles its body once)
        self._resumes: weakref.WeakKeyDictionary[types.CodeType, JitFunction] = (
            weakref.WeakKeyDictionary()
        )
        # forward function -> its jit, shared by the modules a break calls for real (one cache
        # per layer class: config.share_module_graphs), shared like `_resumes`
        self._forwards: weakref.WeakKeyDictionary[types.FunctionType, JitFunction] = (
            weakref.WeakKeyDictionary()
        )
        self._follow_code()

    def _follow_code(self) -> None:
        """Cache, binder and fast path for the function's code as it is now (again when the
        user assigns `fn.__code__`)."""
        fn = self._fn
        code = self._code = fn.__code__
        self._cache = CodeCache(f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})")
        _live_caches.add(self._cache)
        self._bind = _make_binder(fn)
        self._nargs = code.co_argcount
        # Positional calls with exactly co_argcount arguments need no binding.
        self._simple = not (code.co_flags & 0x0C) and code.co_kwonlyargcount == 0
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None or not self._binds else types.MethodType(self, obj)

    # read by inspect's function-like test (`iscoroutinefunction`, `isgeneratorfunction`, ...)
    @property
    def __code__(self) -> types.CodeType:
        return self._fn.__code__

    @property
    def __defaults__(self) -> tuple[Any, ...] | None:
        return self._fn.__defaults__

    @__defaults__.setter
    def __defaults__(self, value: tuple[Any, ...] | None) -> None:
        self._fn.__defaults__ = value  # as set on the function: followed at the next call

    @property
    def __kwdefaults__(self) -> dict[str, Any] | None:
        return self._fn.__kwdefaults__

    @__kwdefaults__.setter
    def __kwdefaults__(self, value: dict[str, Any] | None) -> None:
        self._fn.__kwdefaults__ = value

    def __reduce__(self) -> Any:
        """By reference where the function's module holds this object under its qualified
        name (`@jit def f` at module level), as pickle does for functions; otherwise the jit of
        what it compiles (a new JitFunction, caches of its own, when unpickled)."""
        if _found_by_name(self):
            return self.__qualname__
        return (_compile_callable, (self._target, self._settings))

    def __copy__(self) -> JitFunction:
        return self  # functions are immutable to copy and deepcopy

    def __deepcopy__(self, memo: dict[int, Any]) -> JitFunction:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._select(self._fn, args, kwargs)(*args, **kwargs)
        except BaseException as e:
            _user_traceback(e)
            raise

    def with_closure(self, closure: tuple) -> Any:
        """This function's compiled code run with other cells: the same nested function made
        again (a resume function of one, called from its parent's next call). Entries are
        shared; each call runs them with these cells."""
        fn = self._fn
        if same_cells(closure, fn.__closure__):
            return self
        return _LiveCall(self, rebind(fn, fn, closure))

    def call_taking(self, box: list[Any]) -> Any:
        """The call `run_resumes` makes (`codegen.call_taking`): the arguments in `box`, which
        is emptied before the entry's frame starts, so that frame is their only owner."""
        return self._call_taking(self._fn, box)

    def _call_taking(self, fn: types.FunctionType, box: list[Any]) -> Any:
        try:
            return call_taking(self._select(fn, tuple(box), {}), box)
        except BaseException as e:
            _user_traceback(e)
            raise

    def _select(self, fn: types.FunctionType, args: tuple, kwargs: dict[str, Any]) -> Any:
        """What to call with `args` and `kwargs`: the entry whose guards pass (compiled first,
        on a miss), or `fn` itself where it runs as it is."""
        if fn.__code__ is not self._code:  # `fn.__code__ = other.__code__`
            self._follow_code()
        frame_args = args if (self._simple and not kwargs and len(args) == self._nargs) else None
        if frame_args is None:
            _follow_defaults(self._bind, fn)
            frame_args = self._bind(*args, **kwargs)
        entries = self._cache.entries
        for i, entry in enumerate(entries):
            if entry.guards.check(fn, *frame_args):
                if i:
                    entries.insert(0, entries.pop(i))
                target = entry.fn if fn is self._fn else _rebound(entry.fn, fn)
                if frame_args is not args:  # the call may rely on defaults
                    _follow_defaults(target, fn)
                return target
        return self._miss(fn, frame_args)

    def _miss(self, fn: types.FunctionType, frame_args: tuple) -> Any:
        cache = self._cache
        if (
            cache.eager
            or self._settings.backend is None
            or user_mode_active()  # before record_miss reads the guards' tensors
            or inside_torch_dispatch()
        ):
            return fn
        # a resume function (the rest of a frame after a break: a loop's next steps) that
        # reaches the limit is said in the `recompiles` log, as past max_resume_depth, not warned
        warn = not resumes(fn.__code__)
        if cache.entries and cache.record_miss(fn, frame_args, fn.__qualname__, warn=warn):
            return fn
        if getattr(self, "_framejit_disabled", False):  # framejit.disable(this) after jit
            return fn
        s = self._settings
        with hook_disabled():  # user code the backend runs while compiling is not hooked
            result = compile_frame(
                fn,
                frame_args,
                s.backend,
                s.fullgraph,
                self._wrap_resume,
                s.dynamic,
                cache,
                share_modules=_shares_modules(s),
            )
        if s.observer is not None:
            s.observer(result)
        cache.add(result.entry, fn, frame_args)
        return result.entry.fn if fn is self._fn else _rebound(result.entry.fn, fn)

    def _wrap_resume(self, fn: Any) -> Any:
        """What transformed code calls instead of a resume function, or of the function or
        module a graph break runs for real: a jit of it, so it is compiled on its own."""
        if getattr(fn, "_framejit_disabled", False) or _has_hooks(fn):
            return fn  # hooks must see the module itself: call it as it is
        if (
            isinstance(fn, torch.nn.Module)
            and type(fn).__call__ is not _MODULE_CALL
            and not isinstance(type(fn).__call__, types.FunctionType)
        ):
            return fn  # a class __call__ the translator cannot inline: as it is, not again
        if isinstance(fn, types.FunctionType) and resumes(fn.__code__):
            wrapped = self._resumes.get(fn.__code__)
            if wrapped is None:
                wrapped = self._resumes[fn.__code__] = JitFunction(fn, self._settings)
                wrapped._resumes = self._resumes
                wrapped._forwards = self._forwards
            return wrapped
        wrapped = self._wrapped.get(fn)
        if wrapped is None:
            if isinstance(fn, torch.nn.Module):
                # the layers of a model share their forward's cache, so a layer class whose
                # forward breaks compiles once for all of them (`module_is_shared`)
                forwards = self._forwards if _shares_modules(self._settings) else None
                wrapped = JitModule(fn, self._settings, forwards)
            else:
                wrapped = JitFunction(fn, self._settings)
                wrapped._forwards = self._forwards
            self._wrapped[fn] = wrapped
        return wrapped

    @property
    def cache(self) -> CodeCache:
        return self._cache

    def __repr__(self) -> str:
        return f"<framejit.jit {self._fn.__qualname__}>"


class _LiveCall:
    """A jit of a nested function's resume function, run with the cells of its parent's current
    call (`JitFunction.with_closure`)."""

    __slots__ = ("jit", "live")

    def __init__(self, jit: JitFunction, live: types.FunctionType) -> None:
        self.jit = jit
        self.live = live

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.jit._select(self.live, args, kwargs)(*args, **kwargs)
        except BaseException as e:
            _user_traceback(e)
            raise

    def call_taking(self, box: list[Any]) -> Any:
        return self.jit._call_taking(self.live, box)


_live_caches: weakref.WeakSet[CodeCache] = weakref.WeakSet()


def _found_by_name(fn: JitFunction) -> bool:
    """Does `fn.__module__` hold `fn` itself under `fn.__qualname__`?"""
    found: Any = sys.modules.get(getattr(fn, "__module__", None) or "")
    for part in str(getattr(fn, "__qualname__", "")).split("."):
        if part == "<locals>" or found is None:
            return False
        found = getattr(found, part, None)  # as pickle looks it up
    return found is fn


class _GraphedJitFunction(JitFunction):
    """A JitFunction under mode="reduce-overhead": a call from outside any compiled code begins
    an invocation, which CUDA graph trees use to tell a new step from the next graph of the same
    call (a resume function after a graph break runs inside the outer call)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = _invocation
        outer = not state.depth
        try:
            if outer:
                from framejit import cudagraphs

                cudagraphs.begin_invocation()
                state.depth = 1
            return JitFunction.__call__(self, *args, **kwargs)
        except BaseException as e:
            _user_traceback(e)  # this frame too (an inner call's exception passes it)
            raise
        finally:
            if outer:
                state.depth = 0


class _InvocationDepth(threading.local):
    depth = 0


_invocation = _InvocationDepth()


class _ObjectCall(JitFunction):
    """`jit(obj)` of an object whose class defines `__call__` in Python: the call of it,
    compiled. The trace guards the object's class, not the class's attributes, so a replaced
    `Cls.__call__` (or `obj.__class__`) drops the entries here, as a replaced forward rebinds a
    JitModule: one identity check per call, and eager's new code runs."""

    _class_call: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = type(self._target).__call__
        if call is not self._class_call:
            self._class_call = call
            self._cache.entries.clear()
        try:
            return super().__call__(*args, **kwargs)
        except BaseException as e:
            _user_traceback(e)
            raise


class _GraphedObjectCall(_ObjectCall, _GraphedJitFunction):
    """`_ObjectCall` under mode="reduce-overhead": each outer call begins an invocation."""


def _graphed(settings: _Settings) -> bool:
    return settings.mode in ("reduce-overhead", "max-autotune")


def _shares_modules(settings: _Settings) -> bool:
    """Instances of one layer class share entries (config.share_module_graphs), except where
    CUDA graphs record per instance."""
    return config.share_module_graphs and not _graphed(settings)


# The files of framejit's call path: the wrappers a compiled function and the functions its
# breaks call go through (`__call__`, `_select`, `_miss`, `_forward`), `run_resumes`, and the
# replay of side effects after a graph (`warn_at`: a warning that `-W error` turns into one).
_CALL_PATH_FILES = frozenset(
    {__file__, sys.modules[run_resumes.__module__].__file__, side_effects.__file__}
)


def _user_traceback(error: BaseException) -> None:
    """`error`'s traceback as eager's would read, for code that walks it (logging, depth
    checks): the frames of framejit's call path left out, and a compiled frame followed by its
    own resume function (the rest of the frame after a break, whose line is the one that
    raised) counted once. Frames of framejit's compiler stay: an error of its own shows them."""
    kept = []
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename not in _CALL_PATH_FILES:
            kept.append(tb)
        tb = tb.tb_next
    for k in range(len(kept) - 2, -1, -1):
        code, after = kept[k].tb_frame.f_code, kept[k + 1].tb_frame.f_code
        if resumes(after) and code.co_name == after.co_name and not resumes(code):
            del kept[k]
    for tb, following in zip(kept, kept[1:]):
        tb.tb_next = following
    if kept:
        kept[-1].tb_next = None
    error.__traceback__ = kept[0] if kept else None


def _jit_function(fn: types.FunctionType, settings: _Settings, target: Any = None) -> JitFunction:
    if _graphed(settings):
        return _GraphedJitFunction(fn, settings, target)
    return JitFunction(fn, settings, target)


def _call_module(self: torch.nn.Module, /, *args: Any, **kwargs: Any) -> Any:
    """`module(*args, **kwargs)` as a frame to compile (the call eager makes: hooks, the
    class's `__call__`, a forward set on the instance); positional-only, so no keyword of the
    module's can clash, and guards read `L['self']` as in a method."""
    return self(*args, **kwargs)


# Modules whose call the translator captures as one op (frontend/variables/rnn.py).
_CALLED_AS_A_WHOLE = (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)
_MODULE_CALL = torch.nn.Module.__call__


def _forward_as_call(call: JitFunction, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """`rnn.forward(x)` of a JitModule: the compiled module call (one op) is the forward while no
    hook would run; with hooks it is not (`rnn.forward(x)` runs none), so the forward runs as
    it is."""
    if _has_hooks(module):
        return type(module).forward(module, *args, **kwargs)
    return call(module, *args, **kwargs)


def _forward_function(mod: torch.nn.Module) -> types.FunctionType:
    """The function `JitModule.forward` binds (made again when the original's forward
    changes): it runs the compiled forward, and introspects as the original's bound forward
    (signature, name, doc), which libraries read to pick the inputs they pass."""

    def forward(self: JitModule, *args: Any, **kwargs: Any) -> Any:
        return self._forward(*args, **kwargs)

    original = mod.forward
    try:
        sig: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        # one leading parameter for the wrapper, which inspect drops from a bound method
        first = inspect.Parameter("__framejit_module", inspect.Parameter.POSITIONAL_ONLY)
        forward.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=[first, *sig.parameters.values()]
        )
    forward.__doc__ = getattr(original, "__doc__", None)
    qualname = getattr(original, "__qualname__", None)
    forward.__qualname__ = qualname if isinstance(qualname, str) else "JitModule.forward"
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


class _ForwardDescriptor:
    """`JitModule.forward`: read on a wrapper, a bound method of the wrapper's own forward
    function (`_forward_function`), so `inspect.signature(fast.forward)` is the original's."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return JitModule._forward
        obj._follow_forward()
        return types.MethodType(obj.__dict__["_forward_function"], obj)


def _global_module_hooks() -> bool:
    """Are hooks registered for every module (`register_module_forward_hook` and friends)?"""
    m = _nn_module
    return bool(
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
    )


def _has_hooks(obj: Any) -> bool:
    if not isinstance(obj, torch.nn.Module):
        return False
    return bool(
        obj._forward_hooks
        or obj._forward_pre_hooks
        or obj._backward_hooks
        or obj._backward_pre_hooks
        or _global_module_hooks()
    )


# The containers nn.Module.__init__ makes (parameters, buffers, submodules, every kind of hook):
# a JitModule holds the original's own objects under these names.
_MODULE_CONTAINERS = tuple(
    name for name, value in vars(torch.nn.Module()).items() if isinstance(value, (dict, set))
)


class JitModule(torch.nn.Module):
    """An nn.Module whose forward runs through framejit; it stands in for the original.

    Invariants:
    - The wrapper keeps no module state of its own. Its nn.Module containers are the original's
      own objects (`_parameters`, `_modules`, the hook dicts: `_MODULE_CONTAINERS`); every other
      attribute read, written or deleted on it is the original's, `training` included.
    - Every nn.Module method is the original's, called on the original (`_delegate`): hooks
      registered through the wrapper are the original's hooks, `apply(fn)`, `modules()` and
      `state_dict()` see the original, and a method that returns the module itself (`to()`,
      `train()`, `apply()`) returns the wrapper.
    - A call is the original's call as eager makes it: global module hooks and the original's
      own hooks run once each and see the original, never the wrapper.
    """

    _OWN = frozenset(
        {
            "_orig_mod",
            "_jit_forward",
            "_jit_call",
            "_settings",
            "_bound_to",
            "_forward_function",
            "_jit_override",
            "_forwards",
        }
    )

    def __new__(cls, mod: torch.nn.Module, settings: _Settings, forwards: Any = None) -> JitModule:
        # Python finds `fast[0]`, `len(fast)`, `for m in fast` on the class, not through
        # __getattr__: the wrapper of a Sequential, ModuleList or ModuleDict is of a subclass
        # with the original's container methods.
        special = tuple(n for n in _CONTAINER_METHODS if getattr(type(mod), n, None) is not None)
        return super().__new__(_with_methods(special) if special else cls)

    def __init__(self, mod: torch.nn.Module, settings: _Settings, forwards: Any = None) -> None:
        # No nn.Module.__init__: it would make state of the wrapper's own.
        own = self.__dict__
        own["_orig_mod"] = mod
        own["_settings"] = settings
        # forward function -> its jit, shared with other modules (JitFunction._forwards), or None
        own["_forwards"] = forwards
        for name in _MODULE_CONTAINERS:
            if name in mod.__dict__:
                own[name] = mod.__dict__[name]
        self._bind_forward()
        own["_jit_call"] = _jit_function(_call_module, settings)

    def _bind_forward(self) -> None:
        """Compile the original's forward as it is now; `forward` binds it again when the
        original's class or forward changed (`m.forward = ...`, `m.__class__ = Other`)."""
        mod, settings = self.__dict__["_orig_mod"], self.__dict__["_settings"]
        cls = type(mod)
        forward = cls.forward
        own_forward = mod.__dict__.get("forward")
        jitted: Any
        if own_forward is None and cls in _CALLED_AS_A_WHOLE:
            # captured through the module call itself (an aten op), not its Python forward
            jitted = functools.partial(_forward_as_call, _jit_function(_call_module, settings), mod)
        elif own_forward is None and isinstance(forward, types.FunctionType):
            forwards = self.__dict__.get("_forwards")
            compiled = forwards.get(forward) if forwards is not None else None
            if compiled is None:
                compiled = _jit_function(forward, settings)
                if forwards is not None:
                    forwards[forward] = compiled
                    compiled._forwards = forwards
            jitted = types.MethodType(compiled, mod)
        elif _is_disabled(mod.forward):
            jitted = mod.forward
        else:
            # a forward set on the instance (accelerate and PEFT put a functools.partial there)
            # or a class forward that is not a plain function (`@framejit.jit` on it): any
            # callable compiles, as the call of it where it is not a Python function
            jitted = _compile_callable(mod.forward, settings)
        object.__setattr__(self, "_jit_forward", jitted)
        object.__setattr__(
            self, "_bound_to", (cls, forward if own_forward is None else own_forward)
        )
        object.__setattr__(self, "_forward_function", _forward_function(mod))

    @property  # type: ignore[override]
    def training(self) -> bool:
        return self.__dict__["_orig_mod"].training

    @training.setter
    def training(self, mode: bool) -> None:
        self.__dict__["_orig_mod"].training = mode

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._module_call(*args, **kwargs)
        except BaseException as e:
            _user_traceback(e)
            raise

    def _module_call(self, *args: Any, **kwargs: Any) -> Any:
        mod = self._orig_mod
        if _global_module_hooks() or mod._compiled_call_impl is not None:
            # global hooks are not captured (every module call would break the graph), nor is
            # `mod.compile()`: the call is the original's own
            return mod(*args, **kwargs)
        call = type(mod).__call__
        if call is not _MODULE_CALL:
            # the class's own `__call__` is what eager runs (work around `super().__call__`)
            return self._call_override(mod, call, args, kwargs)
        if (
            mod._forward_hooks
            or mod._forward_pre_hooks
            or mod._backward_hooks
            or mod._backward_pre_hooks
        ):
            # the original's hooks must run: compile the call itself, hooks included
            return self._jit_call(mod, *args, **kwargs)
        return self._forward(*args, **kwargs)

    _call_impl = _wrapped_call_impl = __call__

    def _call_override(
        self, mod: torch.nn.Module, call: Any, args: tuple, kwargs: dict[str, Any]
    ) -> Any:
        """`mod(*args)` through its class's `__call__`, compiled as a function of its own (its
        `super().__call__` is traced through nn.Module's call, hooks included); a `__call__`
        that is not a Python function runs as it is. Followed when the class's changes."""
        cached = self.__dict__.get("_jit_override")
        if cached is None or cached[0] is not call:
            settings = self.__dict__["_settings"]
            jitted = _jit_function(call, settings) if isinstance(call, types.FunctionType) else None
            cached = (call, jitted)
            object.__setattr__(self, "_jit_override", cached)
        if cached[1] is None:
            return mod(*args, **kwargs)
        return cached[1](mod, *args, **kwargs)

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        """The original's forward, compiled (no hooks, as `mod.forward(x)` runs none)."""
        self._follow_forward()
        return self._jit_forward(*args, **kwargs)

    def _follow_forward(self) -> None:
        mod = self._orig_mod
        cls, forward = self._bound_to
        if type(mod) is not cls or mod.__dict__.get("forward", cls.forward) is not forward:
            self._bind_forward()

    forward = _ForwardDescriptor()

    def __getattr__(self, name: str) -> Any:
        mod = self.__dict__.get("_orig_mod")
        if mod is None:  # only while the wrapper is being built
            raise AttributeError(name)
        return getattr(mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:  # `training` too
            setattr(self.__dict__["_orig_mod"], name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.__dict__["_orig_mod"], name)

    def __dir__(self) -> list[str]:
        return dir(self.__dict__["_orig_mod"])

    def __repr__(self) -> str:
        return f"framejit.JitModule({self._orig_mod!r})"

    # copy, deepcopy and pickle make a JitModule of a copy of the original, with caches of its own
    def __reduce_ex__(self, protocol: Any) -> Any:
        return (JitModule, (self._orig_mod, self._settings))

    def __copy__(self) -> JitModule:
        return JitModule(copy.copy(self._orig_mod), self._settings)

    def __deepcopy__(self, memo: dict[int, Any]) -> JitModule:
        return JitModule(copy.deepcopy(self._orig_mod, memo), self._settings)


def _delegate(name: str) -> Callable[..., Any]:
    """JitModule.<name>: the original's own method of that name (its class may override
    nn.Module's), called on the original; where it returns the original, the wrapper."""

    def method(self: JitModule, *args: Any, **kwargs: Any) -> Any:
        mod = self.__dict__["_orig_mod"]
        result = getattr(mod, name)(*args, **kwargs)
        return self if result is mod else result

    method.__name__ = name
    method.__qualname__ = f"JitModule.{name}"
    method.__doc__ = getattr(getattr(torch.nn.Module, name, None), "__doc__", None)
    return method


# Methods of module containers (Sequential, ModuleList, ModuleDict) that Python looks up on the
# class: a JitModule of such a module has them (JitModule.__new__).
_CONTAINER_METHODS = (
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__len__",
    "__iter__",
    "__reversed__",
    "__contains__",
    "__add__",
    "__iadd__",
    "__mul__",
    "__rmul__",
    "__imul__",
)


@functools.cache
def _with_methods(names: tuple[str, ...]) -> type[JitModule]:
    """The JitModule subclass with these container methods of the original's."""
    methods: dict[str, Any] = {name: _delegate(name) for name in names}
    methods["__qualname__"] = "JitModule"
    return type("JitModule", (JitModule,), methods)


# Every nn.Module method the wrapper does not define itself (register_*_hook, state_dict,
# load_state_dict, apply, to, train, modules, named_parameters, ...: whatever this torch has).
for _name, _value in vars(torch.nn.Module).items():
    if (
        isinstance(_value, types.FunctionType)
        and _name not in JitModule.__dict__
        and _name not in ("__getstate__", "__setstate__")  # pickling goes by __reduce_ex__
    ):
        setattr(JitModule, _name, _delegate(_name))
del _name, _value


def disable(fn: Any = None) -> Any:
    """Never compile `fn`: the translator will not inline it, and `jit(fn)` runs it as is.

    A Python function (a module, a class, a callable object) is marked itself, so every use of
    it is left alone. A bound method, a builtin or another callable that cannot be marked alone
    gives a marked wrapper to use instead (the class's function stays compilable for other
    instances), as torch's `disable` does. A `jit` function stops compiling: its entries are
    dropped and it runs its function as it is."""
    if fn is None:
        return disable
    if not callable(fn):
        raise TypeError(f"framejit.disable expects a callable, got {type(fn).__name__}")
    if isinstance(fn, JitFunction):
        # its own calls run the function as it is, and so do compiled callers (a break)
        fn._framejit_disabled = True  # type: ignore[attr-defined]
        fn._fn._framejit_disabled = True  # type: ignore[attr-defined]
        fn._cache.entries.clear()
        return fn
    if not isinstance(fn, types.MethodType):
        try:
            fn._framejit_disabled = True
            return fn
        except (AttributeError, TypeError):  # a builtin such as torch.sin
            pass
    return _disabled_wrapper(fn)


def _disabled_wrapper(fn: Any) -> Any:
    """A marked function that calls `fn`, named as it. Not `functools.wraps`: through the
    module, qualified name or `__wrapped__` it copies, the translator would know a torch
    builtin again and capture it."""

    def run_as_it_is(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    name = getattr(fn, "__name__", None)
    run_as_it_is.__name__ = run_as_it_is.__qualname__ = (
        name if isinstance(name, str) else type(fn).__name__
    )
    run_as_it_is.__doc__ = getattr(fn, "__doc__", None)
    run_as_it_is._framejit_disabled = True  # type: ignore[attr-defined]
    return run_as_it_is


def reset() -> None:
    """Drop every compiled entry and cache (guards, graphs, transformed code, CUDA graphs)."""
    for cache in _live_caches:
        cache.entries.clear()
        cache.eager = False
        cache.eager_reason = ""
        cache.recompile_reasons.clear()
        cache.shape_history = None
    clear_caches()
    forget_skip_marks()  # code the frame hook marked skip is looked at again
    if "framejit.cudagraphs" in sys.modules:  # free every CUDA graph pool
        sys.modules["framejit.cudagraphs"].reset()


def mark_step_begin() -> None:
    """Start a new step for CUDA graph trees (mode="reduce-overhead"): from now on a replay may
    overwrite the outputs of earlier steps (reading one that was overwritten raises an error;
    `.clone()` what you keep). Calling a compiled function again also starts a step, unless a
    backward of the current step is still to run."""
    from framejit import cudagraphs

    cudagraphs.mark_step_begin()


def check_index_errors() -> None:
    """Raise `IndexOutOfBounds` if a Triton kernel of an earlier call read an index out of
    range and its check was deferred (on CUDA by default, `config.index_checks`): a later
    call of the same graph raises too, this raises now (it waits for the device)."""
    from framejit.backend.triton import bounds

    bounds.check_index_errors()


@dataclass
class ExplainOutput:
    graph_count: int
    graph_break_count: int
    break_reasons: list[str]
    graphs: list[torch.fx.GraphModule]
    ops_per_graph: list[int]
    guards: list[str]
    compile_seconds: float

    def __str__(self) -> str:
        lines = [
            f"graphs: {self.graph_count}, graph breaks: {self.graph_break_count}, "
            f"compile time: {self.compile_seconds * 1e3:.1f} ms"
        ]
        for i, (gm, ops) in enumerate(zip(self.graphs, self.ops_per_graph)):
            lines.append(f"graph {i}: {ops} ops")
            lines.append("  " + gm.code.strip().replace("\n", "\n  "))
        for r in self.break_reasons:
            lines.append(f"break: {r}")
        lines.append(f"guards ({len(self.guards)}):")
        lines += [f"  {g}" for g in self.guards]
        return "\n".join(lines)


def _module_target(mod: torch.nn.Module) -> tuple[Any, Any]:
    """What explain compiles for `mod(*args)`: its forward as it is now (set on the instance
    too) when the call is just that, so breaks inside it are found as `jit(mod)` finds them;
    otherwise the call itself (hooks, the class's own `__call__`, the RNN op)."""
    if type(mod).__call__ is _MODULE_CALL and not _has_hooks(mod):
        forward = mod.forward
        if type(mod) in _CALLED_AS_A_WHOLE and "forward" not in mod.__dict__:
            return _call_module, mod
        if isinstance(forward, types.MethodType) and isinstance(
            forward.__func__, types.FunctionType
        ):
            return forward.__func__, forward.__self__
        if isinstance(forward, types.FunctionType):
            return forward, None
    return _call_module, mod


def explain(fn: Any, *args: Any, **kwargs: Any) -> ExplainOutput:
    """Run `fn(*args, **kwargs)` once under a fresh, private jit and report what framejit
    captured: graphs (including those of resume functions after graph breaks), ops, graph
    breaks with their reasons, and guards. No existing cache is used or changed."""
    if isinstance(fn, JitModule):
        fn = fn._orig_mod
    if isinstance(fn, JitFunction):
        fn = fn._target
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, JitFunction):
        fn = types.MethodType(fn.__func__._target, fn.__self__)
    if isinstance(fn, torch.nn.Module):
        target, self_obj = _module_target(fn)
    elif isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        target, self_obj = fn.__func__, fn.__self__
    elif isinstance(fn, types.FunctionType):
        target, self_obj = fn, None
    elif isinstance(fn, staticmethod) and isinstance(fn.__func__, types.FunctionType):
        target, self_obj = fn.__func__, None
    elif callable(fn) and not isinstance(fn, type):
        target, self_obj = _call_through(fn), None
    else:
        raise TypeError(
            f"framejit.explain expects a function, method, nn.Module or another callable, got "
            f"{type(fn).__name__}"
        )
    results: list[Any] = []
    settings = _Settings(lookup_backend("eager"), None, False, None, {}, results.append)
    jitted = JitFunction(target, settings)
    call_args = (self_obj, *args) if self_obj is not None else args
    jitted(*call_args, **kwargs)
    graphs = [g for r in results for g in r.graphs]
    reasons = [b for r in results for b in r.break_reasons]
    guards: list[str] = []
    for r in results:
        report = guard_report(r.entry.code, r.entry.guards).splitlines()[1:]
        guards += [line.strip() for line in report]
    return ExplainOutput(
        graph_count=len(graphs),
        graph_break_count=len(reasons),
        break_reasons=[r.describe() for r in reasons],
        graphs=[g.gm for g in graphs],
        ops_per_graph=[g.op_count for g in graphs],
        guards=guards,
        compile_seconds=sum(r.seconds for r in results),
    )
