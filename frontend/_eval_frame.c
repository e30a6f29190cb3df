/* framejit.frontend._eval_frame: the PEP 523 frame hook (CPython 3.11 and 3.12).
 *
 * What it does.  While the hook is on for the current thread, every function frame the
 * interpreter is about to evaluate comes here first.  Each code object carries one state in its
 * "extra" slot (PyUnstable_Code_SetExtra):
 *
 *     NULL        not seen yet: ask Python (the callback) what to do
 *     skip_mark   skip: evaluate the frame normally, from now on.  Python says "skip" with None;
 *                 the hook stores its current skip_mark instead, and `new_skip_epoch()`
 *                 (framejit.reset()) replaces the mark, so every older mark reads as "not
 *                 seen" (marks are ints; a CodeCache never is)
 *     any object  a guards.CodeCache: try `entry.guards.check(fn, *frame_args)` for each of
 *                 `cache.entries`; on a hit run the entry, on a miss ask Python again
 *
 * Running an entry.  An entry whose `code` is the frame's own code ("run the original") is
 * evaluated normally by _PyEval_EvalFrameDefault.  Otherwise the hook calls `entry.fn` (same
 * signature, globals, defaults and closure as the original) with the frame's arguments and the
 * intercepted frame never executes; its result is the call's result.
 *
 * Invariants (read these before changing anything):
 *  - Who clears the frame.  3.11: the caller of the evaluator (_PyEval_Vector) clears and pops
 *    the frame after we return, so the hook must leave it as it came (arguments in localsplus,
 *    stacktop untouched).  3.12: the evaluator that RECEIVES a frame clears and pops it, so when
 *    the hook does not hand the frame to _PyEval_EvalFrameDefault it must do that itself:
 *    drop_frame() below follows _PyFrame_ClearExceptCode / _PyThreadState_PopFrame from the 3.12
 *    headers and sources (those symbols are not exported).
 *  - Only frames owned by the thread, with no frame object, no f_locals (function frames, not
 *    module/class bodies or exec), entered with throwflag == 0, are ever intercepted.  Generator,
 *    coroutine and async-generator code is always evaluated normally.
 *  - Frames entered while a trace or profile function is set (sys.settrace / sys.setprofile, a
 *    debugger, cProfile on 3.11), while tstate->tracing is set, or while 3.12's sys.monitoring
 *    has events set (`monitoring`, kept by hook.py) are evaluated normally.  So are frames that
 *    reach this evaluator while another one is installed over it and calls it as its previous
 *    (torch.compile's, while a compiled function runs): its frames are that compiler's.
 *  - Re-entrancy: while the callback or a guard check runs, `tls_busy` is set and every frame of
 *    this thread is evaluated normally (framejit's compiler and torch are never hooked by it).
 *  - Enable state is per thread (`tls_mode`: -1 follow the global switch, 0 off, 1 on).  The
 *    evaluator is installed in the interpreter while any thread may want it and removed when
 *    none does, restoring whatever was there before.
 *  - Everything here runs with the GIL held.  Python code called from here may release it, so
 *    objects read from the extra slot are held by a new reference while in use.
 *  - Any error from the callback propagates as the call's exception (the Python side catches its
 *    own internal errors unless config.raise_internal_errors asks otherwise); guard errors mean
 *    "does not hold".
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "framejit's frame hook supports CPython 3.11 and 3.12 only"
#endif

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#if PY_VERSION_HEX >= 0x030C0000
#define FRAME_FUNC(frame) ((frame)->f_funcobj)
#define CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define CODE_SET_EXTRA PyUnstable_Code_SetExtra
#define REQUEST_EXTRA_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#else
#define FRAME_FUNC(frame) ((PyObject *)(frame)->f_func)
#define CODE_GET_EXTRA _PyCode_GetExtra
#define CODE_SET_EXTRA _PyCode_SetExtra
#define REQUEST_EXTRA_INDEX _PyEval_RequestCodeExtraIndex
#endif

#define NOT_COMPILED (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)

static Py_ssize_t extra_index = -1;
static PyObject *skip_mark = NULL; /* a fresh int per epoch (see the top of this file) */
static long long skip_epoch = 0;
static PyObject *callback = NULL;          /* callback(fn, args) -> (state, entry | None) */
static PyObject *on_error = NULL; /* on_error(exc): an entry's exception, before it leaves it */
static PyObject *undecided = NULL; /* a state the callback returns to leave the code's as it was */
static int global_on = 0;                  /* whole-script mode: threads with tls_mode -1 */
static long threads_on = 0;                /* threads with tls_mode == 1 */
static int installed = 0;
static _PyFrameEvalFunction previous_eval = NULL;
static _Thread_local int tls_mode = -1;
static _Thread_local int tls_busy = 0;
/* C stack guard. With an evaluator installed, CPython cannot run a Python call inside the
   caller's C loop: every frame nests one more C call (through here), so a recursion that eager
   Python runs in constant C stack grows it here, and 3.12 counts each against its C recursion
   limit. Past DEPTH_LIMIT frames nested through the hook in one thread, the hook steps aside
   (the default evaluator is installed: deeper frames run uncompiled, inline, as eager) until
   that thread is back under half of it. */
#if PY_VERSION_HEX >= 0x030C0000
#define DEPTH_LIMIT 300
#else
#define DEPTH_LIMIT 1500
#endif
static _Thread_local int tls_depth = 0;
static int suspended = 0;
/* 3.12's sys.monitoring (a debugger or coverage in sysmon mode) has events set: frames run
   uncompiled, so every line and call they expect happens (set from Python, hook.py). */
static int monitoring = 0;

/* Counters for tests and the summary (all under the GIL). */
static unsigned long long n_intercepted, n_hits, n_callbacks, n_skipped, n_chunk_pops, n_not_top;

static PyObject *str_entries, *str_guards, *str_check, *str_code, *str_fn;

static void
free_extra(void *p)
{
    Py_XDECREF((PyObject *)p);
}

/* The layout of a code object's co_extra block in CPython 3.11 and 3.12 (private to
   Objects/codeobject.c there; what _PyCode_GetExtra reads): its size, then the slots. */
typedef struct {
    Py_ssize_t ce_size;
    void *ce_extras[1];
} CodeExtra;

/* get_state without a call, for the hot path (borrowed; NULL when the slot is empty). */
static inline PyObject *
peek_state(PyCodeObject *co)
{
    CodeExtra *extra = (CodeExtra *)co->co_extra;
    if (extra == NULL || extra_index < 0 || extra->ce_size <= extra_index) {
        return NULL;
    }
    return (PyObject *)extra->ce_extras[extra_index];
}

static PyObject *
get_state(PyObject *code)
{
    void *extra = NULL;
    if (CODE_GET_EXTRA(code, extra_index, &extra) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return (PyObject *)extra;
}

/* Store a new reference to `state` (or NULL).  SetExtra itself calls free_extra on the old
   value, so the old state is released there, not here. */
static int
set_state(PyObject *code, PyObject *state)
{
    if (state == Py_None) {
        state = skip_mark;
    }
    Py_XINCREF(state);
    if (CODE_SET_EXTRA(code, extra_index, state) < 0) {
        Py_XDECREF(state);
        return -1;
    }
    return 0;
}

static inline int
thread_on(void)
{
    return tls_mode == 1 || (tls_mode == -1 && global_on);
}

static inline PyObject *
eval_default(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

/* The frame was not evaluated: clear and pop it where this version makes that our job. */
static PyObject *
drop_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, PyObject *result)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyCodeObject *co = frame->f_code;
    PyObject **base = (PyObject **)frame;
    if (base + co->co_framesize != tstate->datastack_top) {
        /* Not the top frame: popping would drop live frames.  Never expected; leaking the
           slot is the only safe thing left. */
        n_not_top++;
        return result;
    }
    tstate->c_recursion_remaining--;
    /* _PyFrame_ClearExceptCode: frame_obj is NULL (checked before intercepting). */
    for (int i = 0; i < frame->stacktop; i++) {
        Py_XDECREF(frame->localsplus[i]);
    }
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(co);
    tstate->c_recursion_remaining++;
    /* _PyThreadState_PopFrame */
    if (base == &tstate->datastack_chunk->data[0]) {
        _PyStackChunk *chunk = tstate->datastack_chunk;
        _PyStackChunk *prev = chunk->previous;
        PyObjectArenaAllocator arena;
        n_chunk_pops++;
        tstate->datastack_top = &prev->data[prev->top];
        tstate->datastack_chunk = prev;
        tstate->datastack_limit = (PyObject **)(((char *)prev) + prev->size);
        PyObject_GetArenaAllocator(&arena);
        arena.free(arena.ctx, chunk, chunk->size);
    }
    else {
        tstate->datastack_top = base;
    }
#else
    (void)tstate;
    (void)frame; /* 3.11: _PyEval_Vector clears and pops it after we return */
#endif
    return result;
}

/* Call `callable` the way the frame was called, from the arguments in its localsplus. */
static PyObject *
call_with_frame_args(PyObject *callable, _PyInterpreterFrame *frame)
{
    PyCodeObject *co = frame->f_code;
    PyObject **locals = frame->localsplus;
    int argcount = co->co_argcount, kwonly = co->co_kwonlyargcount;
    int varargs = (co->co_flags & CO_VARARGS) != 0, varkw = (co->co_flags & CO_VARKEYWORDS) != 0;
    if (!varargs && !varkw && kwonly == 0) {
        return PyObject_Vectorcall(callable, locals, argcount, NULL);
    }
    PyObject *result = NULL, *args = NULL, *kwargs = NULL;
    PyObject *extra_args = varargs ? locals[argcount + kwonly] : NULL;
    Py_ssize_t n_extra = extra_args ? PyTuple_GET_SIZE(extra_args) : 0;
    args = PyTuple_New(argcount + n_extra);
    kwargs = PyDict_New();
    if (args == NULL || kwargs == NULL) {
        goto done;
    }
    for (int i = 0; i < argcount; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(locals[i]));
    }
    for (Py_ssize_t i = 0; i < n_extra; i++) {
        PyTuple_SET_ITEM(args, argcount + i, Py_NewRef(PyTuple_GET_ITEM(extra_args, i)));
    }
    for (int i = 0; i < kwonly; i++) {
        PyObject *name = PyTuple_GET_ITEM(co->co_localsplusnames, argcount + i);
        if (PyDict_SetItem(kwargs, name, locals[argcount + i]) < 0) {
            goto done;
        }
    }
    if (varkw && PyDict_Update(kwargs, locals[argcount + kwonly + varargs]) < 0) {
        goto done;
    }
    result = PyObject_Call(callable, args, kwargs);
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    return result;
}

static inline int
frame_nargs(PyCodeObject *co)
{
    return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) != 0) +
           ((co->co_flags & CO_VARKEYWORDS) != 0);
}

/* First entry of `cache` whose guards hold, as a new reference; NULL (no error) on a miss. */
static PyObject *
lookup(PyObject *cache, PyObject *fn, _PyInterpreterFrame *frame)
{
    PyObject *entries = PyObject_GetAttr(cache, str_entries);
    if (entries == NULL || !PyList_Check(entries)) {
        PyErr_Clear();
        Py_XDECREF(entries);
        return NULL;
    }
    int nargs = frame_nargs(frame->f_code);
    PyObject *small[16];
    PyObject **argv = nargs + 1 <= 16 ? small : PyMem_Malloc((nargs + 1) * sizeof(PyObject *));
    if (argv == NULL) {
        Py_DECREF(entries);
        return NULL;
    }
    argv[0] = fn;
    memcpy(argv + 1, frame->localsplus, nargs * sizeof(PyObject *));
    PyObject *found = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries) && found == NULL; i++) {
        PyObject *entry = Py_NewRef(PyList_GET_ITEM(entries, i));
        PyObject *guards = PyObject_GetAttr(entry, str_guards);
        PyObject *check = guards ? PyObject_GetAttr(guards, str_check) : NULL;
        PyObject *ok = check ? PyObject_Vectorcall(check, argv, nargs + 1, NULL) : NULL;
        if (ok == Py_True) {
            found = Py_NewRef(entry);
        }
        else if (ok == NULL) {
            PyErr_Clear(); /* a guard that cannot be checked does not hold */
        }
        Py_XDECREF(ok);
        Py_XDECREF(check);
        Py_XDECREF(guards);
        Py_DECREF(entry);
    }
    if (argv != small) {
        PyMem_Free(argv);
    }
    Py_DECREF(entries);
    return found;
}

/* The exception an entry's function raised, shown to `on_error` (which tidies its traceback:
   framejit's frames of the call path out) and raised again. The hook is off meanwhile. */
static void
pass_error(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL && exc != NULL) {
        PyException_SetTraceback(exc, tb);
    }
    Py_XDECREF(tb);
#endif
    if (exc != NULL) {
        int busy = tls_busy;
        tls_busy = 1;
        PyObject *ok = PyObject_CallOneArg(on_error, exc);
        tls_busy = busy;
        if (ok == NULL) {
            PyErr_Clear(); /* the exception raised stays the program's */
        }
        Py_XDECREF(ok);
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    tb = exc != NULL ? PyException_GetTraceback(exc) : NULL;
    PyErr_Restore(type, exc, tb);
#endif
}

static PyObject *
run_entry(PyThreadState *tstate, _PyInterpreterFrame *frame, PyObject *entry)
{
    PyObject *code = PyObject_GetAttr(entry, str_code);
    if (code == NULL) {
        return drop_frame(tstate, frame, NULL);
    }
    int original = code == (PyObject *)frame->f_code;
    Py_DECREF(code);
    if (original) {
        return eval_default(tstate, frame, 0);
    }
    PyObject *fn = PyObject_GetAttr(entry, str_fn);
    if (fn == NULL) {
        return drop_frame(tstate, frame, NULL);
    }
    /* The entry's function carries the closure of the function it was compiled for; another
       function object of the same code (a nested function made again at each call of its
       parent) has its own cells: the transformed code must read and write those. */
    PyObject *live = FRAME_FUNC(frame);
    if (live != NULL && PyFunction_Check(live) && PyFunction_Check(fn)) {
        PyObject *closure = PyFunction_GET_CLOSURE(live);
        if (closure != NULL && closure != PyFunction_GET_CLOSURE(fn)) {
            PyObject *rebound = PyFunction_New(PyFunction_GET_CODE(fn), PyFunction_GET_GLOBALS(fn));
            if (rebound == NULL || PyFunction_SetClosure(rebound, closure) < 0) {
                Py_XDECREF(rebound);
                Py_DECREF(fn);
                return drop_frame(tstate, frame, NULL);
            }
            Py_SETREF(fn, rebound);
        }
    }
    n_hits++;
    PyObject *result = call_with_frame_args(fn, frame);
    Py_DECREF(fn);
    if (result == NULL && on_error != NULL) {
        pass_error();
    }
    return drop_frame(tstate, frame, result);
}

static PyObject *
ask_python(PyThreadState *tstate, _PyInterpreterFrame *frame, PyObject *fn)
{
    int nargs = frame_nargs(frame->f_code);
    PyObject *args = PyTuple_New(nargs);
    if (args == NULL) {
        return drop_frame(tstate, frame, NULL);
    }
    for (int i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(frame->localsplus[i]));
    }
    n_callbacks++;
    tls_busy = 1;
    PyObject *reply = PyObject_CallFunctionObjArgs(callback, fn, args, NULL);
    tls_busy = 0;
    Py_DECREF(args);
    if (reply == NULL) {
        return drop_frame(tstate, frame, NULL);
    }
    if (!PyTuple_Check(reply) || PyTuple_GET_SIZE(reply) != 2) {
        Py_DECREF(reply);
        PyErr_SetString(PyExc_SystemError, "framejit hook callback must return (state, entry)");
        return drop_frame(tstate, frame, NULL);
    }
    PyObject *state = PyTuple_GET_ITEM(reply, 0), *entry = PyTuple_GET_ITEM(reply, 1);
    if (state != undecided && set_state((PyObject *)frame->f_code, state) < 0) {
        PyErr_Clear();
    }
    PyObject *result;
    if (entry == Py_None) {
        result = eval_default(tstate, frame, 0);
    }
    else {
        result = run_entry(tstate, frame, entry);
    }
    Py_DECREF(reply);
    return result;
}

static PyObject *framejit_eval(PyThreadState *, _PyInterpreterFrame *, int);

static void
set_suspended(PyThreadState *tstate, int on)
{
    suspended = on;
    if (!on && _PyInterpreterState_GetEvalFrameFunc(tstate->interp) != previous_eval) {
        return; /* someone else installed an evaluator meanwhile: leave it */
    }
    _PyInterpreterState_SetEvalFrameFunc(tstate->interp, on ? previous_eval : framejit_eval);
}

static PyObject *
evaluate(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    /* Code marked skip (the common case in whole-script mode) runs at once: two loads. */
    if (peek_state(frame->f_code) == skip_mark) {
        n_skipped++;
        return eval_default(tstate, frame, throwflag);
    }
    if (throwflag || tls_busy || monitoring || !thread_on() || callback == NULL ||
        frame->owner != FRAME_OWNED_BY_THREAD || frame->frame_obj != NULL ||
        frame->f_locals != NULL || tstate->tracing || tstate->c_tracefunc != NULL ||
        tstate->c_profilefunc != NULL ||
        _PyInterpreterState_GetEvalFrameFunc(tstate->interp) != framejit_eval) {
        return eval_default(tstate, frame, throwflag);
    }
    PyCodeObject *co = frame->f_code;
    if ((co->co_flags & NOT_COMPILED) || !(co->co_flags & CO_OPTIMIZED)) {
        return eval_default(tstate, frame, throwflag);
    }
    PyObject *state = get_state((PyObject *)co);
    if (state == skip_mark) {
        n_skipped++;
        return eval_default(tstate, frame, throwflag);
    }
    if (state != NULL && PyLong_CheckExact(state)) {
        state = NULL; /* a skip mark from before the last reset: not seen */
    }
    n_intercepted++;
    PyObject *fn = FRAME_FUNC(frame);
    if (fn == NULL || !PyFunction_Check(fn)) {
        return eval_default(tstate, frame, throwflag);
    }
    Py_INCREF(fn);
    PyObject *result;
    if (state != NULL) {
        Py_INCREF(state);
        tls_busy = 1;
        PyObject *entry = lookup(state, fn, frame);
        tls_busy = 0;
        Py_DECREF(state);
        if (entry != NULL) {
            result = run_entry(tstate, frame, entry);
            Py_DECREF(entry);
            Py_DECREF(fn);
            return result;
        }
    }
    result = ask_python(tstate, frame, fn);
    Py_DECREF(fn);
    return result;
}

static PyObject *
framejit_eval(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    if (tls_depth >= DEPTH_LIMIT && !suspended) {
        set_suspended(tstate, 1);
    }
    tls_depth++;
    PyObject *result = evaluate(tstate, frame, throwflag);
    tls_depth--;
    if (suspended && installed && tls_depth < DEPTH_LIMIT / 2) {
        set_suspended(tstate, 0);
    }
    return result;
}

/* ---- installing and removing ---------------------------------------------------------------- */

static int
update_installed(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    int want = global_on || threads_on > 0;
    if (want && !installed) {
        _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
        if (current != _PyEval_EvalFrameDefault && current != framejit_eval) {
            PyErr_SetString(PyExc_RuntimeError,
                            "framejit: another PEP 523 frame evaluator (torch.compile's, for "
                            "example) is installed; framejit's hook cannot run with it");
            return -1;
        }
        previous_eval = current;
        _PyInterpreterState_SetEvalFrameFunc(interp, framejit_eval);
        installed = 1;
    }
    else if (!want && installed) {
        _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval);
        installed = 0;
        suspended = 0;
    }
    return 0;
}

static PyObject *
py_set_callback(PyObject *self, PyObject *arg)
{
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable or None");
        return NULL;
    }
    Py_XSETREF(callback, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyObject *
py_set_error_callback(PyObject *self, PyObject *arg)
{
    if (arg != Py_None && !PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable or None");
        return NULL;
    }
    Py_XSETREF(on_error, arg == Py_None ? NULL : Py_NewRef(arg));
    Py_RETURN_NONE;
}

static PyObject *
py_set_global(PyObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    int before = global_on;
    global_on = on;
    if (update_installed() < 0) {
        global_on = before;
        return NULL;
    }
    return PyBool_FromLong(before);
}

static PyObject *
py_set_thread(PyObject *self, PyObject *arg)
{
    long mode = PyLong_AsLong(arg);
    if (mode == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (mode < -1 || mode > 1) {
        PyErr_SetString(PyExc_ValueError, "thread mode must be -1 (follow global), 0 or 1");
        return NULL;
    }
    int before = tls_mode;
    threads_on += (mode == 1) - (before == 1);
    tls_mode = (int)mode;
    if (update_installed() < 0) {
        threads_on -= (mode == 1) - (before == 1);
        tls_mode = before;
        return NULL;
    }
    return PyLong_FromLong(before);
}

static PyObject *
py_thread_enabled(PyObject *self, PyObject *noargs)
{
    return PyBool_FromLong(thread_on() && installed && !tls_busy);
}

static PyObject *
py_set_code_state(PyObject *self, PyObject *args)
{
    PyObject *code, *state;
    if (!PyArg_ParseTuple(args, "O!O:set_code_state", &PyCode_Type, &code, &state)) {
        return NULL;
    }
    if (set_state(code, state) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_get_code_state(PyObject *self, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "expected a code object");
        return NULL;
    }
    PyObject *state = get_state(code);
    if (state == skip_mark) {
        Py_RETURN_NONE;
    }
    if (state == NULL || PyLong_CheckExact(state)) {
        return Py_NewRef(Py_Ellipsis); /* not seen (or marked before the last reset) */
    }
    return Py_NewRef(state);
}

static int
next_skip_mark(void)
{
    PyObject *mark = PyLong_FromLongLong(((long long)1 << 40) + skip_epoch++);
    if (mark == NULL) {
        return -1;
    }
    Py_XSETREF(skip_mark, mark);
    return 0;
}

static PyObject *
py_new_skip_epoch(PyObject *self, PyObject *noargs)
{
    if (next_skip_mark() < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_clear_code_state(PyObject *self, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "expected a code object");
        return NULL;
    }
    if (set_state(code, NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_stats(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:i}", "intercepted", n_intercepted, "hits",
                         n_hits, "callbacks", n_callbacks, "skipped", n_skipped, "chunk_pops",
                         n_chunk_pops, "not_top", n_not_top, "installed", installed);
}

static PyObject *
py_set_monitoring(PyObject *self, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    int before = monitoring;
    monitoring = on;
    return PyBool_FromLong(before);
}

static PyMethodDef methods[] = {
    {"set_monitoring", py_set_monitoring, METH_O,
     "set_monitoring(on) -> previous: sys.monitoring has events set, step aside"},
    {"set_callback", py_set_callback, METH_O, "set_callback(fn | None): fn(func, args) -> (state, entry)"},
    {"set_error_callback", py_set_error_callback, METH_O,
     "set_error_callback(fn | None): fn(exc) sees an exception leaving a compiled entry"},
    {"set_global", py_set_global, METH_O, "set_global(on) -> previous: whole-script switch"},
    {"set_thread", py_set_thread, METH_O, "set_thread(mode) -> previous: -1 follow global, 0 off, 1 on"},
    {"thread_enabled", py_thread_enabled, METH_NOARGS, "is the hook active for this thread now"},
    {"set_code_state", py_set_code_state, METH_VARARGS, "set_code_state(code, None | cache)"},
    {"get_code_state", py_get_code_state, METH_O, "the code's state; Ellipsis when not seen"},
    {"new_skip_epoch", py_new_skip_epoch, METH_NOARGS,
     "forget every skip mark (framejit.reset()): marked code is asked about again"},
    {"clear_code_state", py_clear_code_state, METH_O, "forget the code's state"},
    {"stats", py_stats, METH_NOARGS, "counters: intercepted, hits, callbacks, skipped, installed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_eval_frame", "framejit's PEP 523 frame hook (see hook.py)", -1, methods,
};

PyMODINIT_FUNC
PyInit__eval_frame(void)
{
    if (extra_index < 0) {
        extra_index = REQUEST_EXTRA_INDEX(free_extra);
        if (extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "framejit: no code extra index left");
            return NULL;
        }
    }
    str_entries = PyUnicode_InternFromString("entries");
    str_guards = PyUnicode_InternFromString("guards");
    str_check = PyUnicode_InternFromString("check");
    str_code = PyUnicode_InternFromString("code");
    str_fn = PyUnicode_InternFromString("fn");
    if (!str_entries || !str_guards || !str_check || !str_code || !str_fn) {
        return NULL;
    }
    if (skip_mark == NULL && next_skip_mark() < 0) {
        return NULL;
    }
    if (undecided == NULL) {
        undecided = PyUnicode_InternFromString("framejit: undecided");
        if (undecided == NULL) {
            return NULL;
        }
    }
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) {
        return NULL;
    }
    /* UNDECIDED as the callback's state: run this call as the reply's entry says and ask
       again next time (another thread holds the compiler). */
    if (PyModule_AddObjectRef(mod, "UNDECIDED", undecided) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
