// framejit.guards._tensor_check: the TENSOR_MATCH guard in C++.
//
// Why: a TENSOR_MATCH written in Python reads seven attributes (~350 ns per tensor); a model's
// parameters make that the bulk of a guard check. Here one call compares the exact Python type,
// dtype, device, sizes, strides, requires_grad and the full dispatch key set (which covers
// inference-mode, conjugate and negative bits) of a tensor against a spec taken from the tensor
// the graph was traced with. With dynamic shapes, spec(tensor, dims) leaves the sizes of `dims`
// unchecked (they are symbolic: SHAPE_EXPR guards check them) and checks contiguity instead of
// exact strides.
//
// Invariant: check(t, spec) is True only if every one of those facts is equal. It never raises
// for a non-tensor argument (it returns False). Built against one torch version: the Python side
// refuses to use it if torch's version differs from TORCH_VERSION_STR.
//
// The GLOBAL_STATE guard is here too (state_spec / state_check): it runs first on every call of
// every compiled function, and one C call reads grad and inference mode, the default dtype,
// deterministic mode, autocast (per device: enabled, dtype) and its cache flag, and the mode
// stacks (no dispatch mode; the function modes are exactly torch's DeviceContexts, each with the
// device it selects) straight from torch's thread-local state, where the Python check makes one
// call per fact. guards/guard.py's `_global_state_check` renders the same facts as Python.

#include <ATen/Context.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <Python.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <utility>
#include <vector>

#ifndef FRAMEJIT_TORCH_VERSION
#define FRAMEJIT_TORCH_VERSION "unknown"
#endif

namespace {

struct Spec {
  PyObject_HEAD
  PyObject* cls;  // exact Python type expected (owned)
  at::ScalarType dtype;
  c10::Device device;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool requires_grad;
  bool dynamic;  // some sizes are -1 (any); strides are not compared, contiguity is
  c10::DispatchKeySet keys;
};

void spec_dealloc(PyObject* self) {
  Spec* s = reinterpret_cast<Spec*>(self);
  Py_XDECREF(s->cls);
  s->sizes.~vector();
  s->strides.~vector();
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject SpecType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// spec(tensor[, dynamic_dims]) -> Spec describing it. Raises TypeError for non-tensors,
// non-strided layouts, or dynamic_dims that is not a tuple of in-range ints.
PyObject* make_spec(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "spec(tensor[, dynamic_dims])");
    return nullptr;
  }
  PyObject* arg = args[0];
  if (!THPVariable_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "spec() expects a tensor");
    return nullptr;
  }
  const at::Tensor& t = THPVariable_Unpack(arg);
  if (t.layout() != c10::kStrided) {
    PyErr_SetString(PyExc_TypeError, "spec() supports strided tensors only");
    return nullptr;
  }
  Spec* s = PyObject_New(Spec, &SpecType);
  if (s == nullptr) return nullptr;
  new (&s->sizes) std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
  new (&s->strides) std::vector<int64_t>(t.strides().begin(), t.strides().end());
  s->cls = reinterpret_cast<PyObject*>(Py_TYPE(arg));
  Py_INCREF(s->cls);
  s->dtype = t.scalar_type();
  new (&s->device) c10::Device(t.device());
  s->requires_grad = t.requires_grad();
  s->keys = t.key_set();
  s->dynamic = false;
  if (nargs == 2) {
    PyObject* dims = args[1];
    if (!PyTuple_Check(dims)) {
      Py_DECREF(reinterpret_cast<PyObject*>(s));
      PyErr_SetString(PyExc_TypeError, "spec(): dynamic_dims must be a tuple of ints");
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dims); ++i) {
      long d = PyLong_AsLong(PyTuple_GET_ITEM(dims, i));
      if ((d == -1 && PyErr_Occurred()) || d < 0 || static_cast<size_t>(d) >= s->sizes.size()) {
        Py_DECREF(reinterpret_cast<PyObject*>(s));
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "spec(): dynamic_dims out of range");
        return nullptr;
      }
      s->sizes[d] = -1;
      s->dynamic = true;
    }
  }
  return reinterpret_cast<PyObject*>(s);
}

inline bool matches(PyObject* obj, const Spec* s) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != s->cls) return false;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.key_set() != s->keys || t.scalar_type() != s->dtype || t.device() != s->device ||
      t.requires_grad() != s->requires_grad || t.layout() != c10::kStrided) {
    return false;
  }
  auto sizes = t.sizes();
  auto strides = t.strides();
  if (sizes.size() != s->sizes.size()) return false;
  if (s->dynamic) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (s->sizes[i] != -1 && sizes[i] != s->sizes[i]) return false;
    }
    return t.is_contiguous();
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] != s->sizes[i] || strides[i] != s->strides[i]) return false;
  }
  return true;
}

// check(tensor, spec) -> bool
PyObject* check(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || Py_TYPE(args[1]) != &SpecType) {
    PyErr_SetString(PyExc_TypeError, "check(tensor, spec)");
    return nullptr;
  }
  if (!THPVariable_Check(args[0])) Py_RETURN_FALSE;
  if (matches(args[0], reinterpret_cast<Spec*>(args[1]))) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

// swap_storage_data(a, b): the storages of tensors a and b exchange their memory (same size and
// device), so every tensor, view and autograd record over a's storage now reads what b's
// storage held. CUDA graph trees (cudagraphs/outputs.py) use it to give an output that is still
// held elsewhere its own copy before a replay overwrites its memory, on torch versions whose
// UntypedStorage has no _swap_data_ptr_. (It lives here because this is framejit's one C++
// extension built against torch.)
PyObject* swap_storage_data(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !THPVariable_Check(args[0]) || !THPVariable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "swap_storage_data(a, b) takes two tensors");
    return nullptr;
  }
  c10::StorageImpl* a = THPVariable_Unpack(args[0]).storage().unsafeGetStorageImpl();
  c10::StorageImpl* b = THPVariable_Unpack(args[1]).storage().unsafeGetStorageImpl();
  if (a->nbytes() != b->nbytes() || a->device() != b->device()) {
    PyErr_SetString(PyExc_ValueError,
                    "swap_storage_data: the storages differ in size or device");
    return nullptr;
  }
  at::DataPtr b_memory = b->set_data_ptr(at::DataPtr(nullptr, b->device()));
  at::DataPtr a_memory = a->set_data_ptr(std::move(b_memory));
  b->set_data_ptr(std::move(a_memory));
  Py_RETURN_NONE;
}

// same_storages(tensors, groups) -> bool: tensors[i] and tensors[j] share a storage exactly when
// groups[i] == groups[j], where groups numbers the storages in order of first appearance (the
// STORAGE_GROUPS guard). A tensor with no storage counts as a storage of its own. A graph that
// writes one input in place was compiled knowing which inputs share memory: views of one base
// passed as two arguments must not replay a graph traced with unrelated tensors.
PyObject* same_storages(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) ||
      PyTuple_GET_SIZE(args[0]) != PyTuple_GET_SIZE(args[1])) {
    PyErr_SetString(PyExc_TypeError, "same_storages(tensors, groups): two tuples of one length");
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
  // (storage, expected group) pairs, sorted by storage: equal storages must carry equal groups,
  // and the first of each run of storages must carry a group no other run carries. O(n log n):
  // a model's parameters and buffers are all in the tuple.
  std::vector<std::pair<const void*, long>> pairs;
  pairs.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* obj = PyTuple_GET_ITEM(args[0], i);
    if (!THPVariable_Check(obj)) Py_RETURN_FALSE;
    const at::Tensor& t = THPVariable_Unpack(obj);
    const void* key = t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl())
                                      : static_cast<const void*>(obj);
    long want = PyLong_AsLong(PyTuple_GET_ITEM(args[1], i));
    if (want == -1 && PyErr_Occurred()) return nullptr;
    pairs.emplace_back(key, want);
  }
  std::sort(pairs.begin(), pairs.end());
  std::vector<long> firsts;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i > 0 && pairs[i].first == pairs[i - 1].first) {
      if (pairs[i].second != pairs[i - 1].second) Py_RETURN_FALSE;
    } else {
      firsts.push_back(pairs[i].second);
    }
  }
  std::sort(firsts.begin(), firsts.end());
  if (std::adjacent_find(firsts.begin(), firsts.end()) != firsts.end()) Py_RETURN_FALSE;
  Py_RETURN_TRUE;
}

// --- GLOBAL_STATE ------------------------------------------------------------------------------

struct AutocastFact {
  c10::DeviceType device;
  bool enabled;
  bool check_dtype;  // false: the dtype is not pinned for this device
  at::ScalarType dtype;
};

struct StateSpec {
  PyObject_HEAD
  bool grad;
  bool inference;
  at::ScalarType default_dtype;
  bool deterministic;
  std::vector<AutocastFact> autocast;
  bool autocast_cache;
  bool function_mode;  // torch function modes are enabled (then `devices` lists the stack)
  std::vector<c10::Device> devices;  // the DeviceContext stack, bottom first
  PyObject* device_context;  // torch.utils._device.DeviceContext (owned)
  PyObject* device_attr;     // "device", interned (owned)
};

void state_spec_dealloc(PyObject* self) {
  StateSpec* s = reinterpret_cast<StateSpec*>(self);
  Py_XDECREF(s->device_context);
  Py_XDECREF(s->device_attr);
  s->autocast.~vector();
  s->devices.~vector();
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject StateSpecType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool as_bool(PyObject* obj, bool* out) {
  int v = PyObject_IsTrue(obj);
  if (v < 0) return false;
  *out = v != 0;
  return true;
}

// state_spec(grad, inference, default_dtype, deterministic, autocast, autocast_cache,
//            function_mode, devices, device_context_cls) -> StateSpec
// autocast: a tuple of (torch.device, enabled, dtype or None); devices: a tuple of torch.device.
PyObject* make_state_spec(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_SetString(PyExc_TypeError,
                    "state_spec(grad, inference, default_dtype, deterministic, autocast, "
                    "autocast_cache, function_mode, devices, device_context_cls)");
    return nullptr;
  }
  if (!THPDtype_Check(args[2]) || !PyTuple_Check(args[4]) || !PyTuple_Check(args[7]) ||
      !PyType_Check(args[8])) {
    PyErr_SetString(PyExc_TypeError, "state_spec(): bad argument types");
    return nullptr;
  }
  StateSpec* s = PyObject_New(StateSpec, &StateSpecType);
  if (s == nullptr) return nullptr;
  new (&s->autocast) std::vector<AutocastFact>();
  new (&s->devices) std::vector<c10::Device>();
  s->device_context = args[8];
  Py_INCREF(s->device_context);
  s->device_attr = PyUnicode_InternFromString("device");
  PyObject* self = reinterpret_cast<PyObject*>(s);
  if (s->device_attr == nullptr || !as_bool(args[0], &s->grad) ||
      !as_bool(args[1], &s->inference) || !as_bool(args[3], &s->deterministic) ||
      !as_bool(args[5], &s->autocast_cache) || !as_bool(args[6], &s->function_mode)) {
    Py_DECREF(self);
    return nullptr;
  }
  s->default_dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[4]); ++i) {
    PyObject* fact = PyTuple_GET_ITEM(args[4], i);
    AutocastFact f{c10::DeviceType::CPU, false, false, at::ScalarType::Undefined};
    if (!PyTuple_Check(fact) || PyTuple_GET_SIZE(fact) != 3 ||
        !THPDevice_Check(PyTuple_GET_ITEM(fact, 0)) ||
        !as_bool(PyTuple_GET_ITEM(fact, 1), &f.enabled)) {
      Py_DECREF(self);
      if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "state_spec(): autocast facts are (device, bool, dtype)");
      }
      return nullptr;
    }
    f.device = reinterpret_cast<THPDevice*>(PyTuple_GET_ITEM(fact, 0))->device.type();
    PyObject* dtype = PyTuple_GET_ITEM(fact, 2);
    if (dtype != Py_None) {
      if (!THPDtype_Check(dtype)) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_TypeError, "state_spec(): an autocast dtype is not a dtype");
        return nullptr;
      }
      f.check_dtype = true;
      f.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
    }
    s->autocast.push_back(f);
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[7]); ++i) {
    PyObject* dev = PyTuple_GET_ITEM(args[7], i);
    if (!THPDevice_Check(dev)) {
      Py_DECREF(self);
      PyErr_SetString(PyExc_TypeError, "state_spec(): devices must be torch.device");
      return nullptr;
    }
    s->devices.push_back(reinterpret_cast<THPDevice*>(dev)->device);
  }
  return self;
}

// The function-mode stack is exactly DeviceContexts (exact type) selecting s->devices.
bool device_stack_matches(const StateSpec* s) {
  const int64_t n = at::impl::PythonTorchFunctionTLS::stack_len();
  if (n != static_cast<int64_t>(s->devices.size())) return false;
  for (int64_t i = 0; i < n; ++i) {
    PyObject* mode =
        at::impl::PythonTorchFunctionTLS::get_stack_at(i)->ptr(getPyInterpreter());
    if (reinterpret_cast<PyObject*>(Py_TYPE(mode)) != s->device_context) return false;
    PyObject* dev = PyObject_GetAttr(mode, s->device_attr);
    if (dev == nullptr) {
      PyErr_Clear();
      return false;
    }
    const bool same = THPDevice_Check(dev) &&
                      reinterpret_cast<THPDevice*>(dev)->device == s->devices[static_cast<size_t>(i)];
    Py_DECREF(dev);
    if (!same) return false;
  }
  return true;
}

bool state_matches(const StateSpec* s) {
  if (c10::GradMode::is_enabled() != s->grad || c10::InferenceMode::is_enabled() != s->inference ||
      c10::get_default_dtype_as_scalartype() != s->default_dtype ||
      at::globalContext().deterministicAlgorithms() != s->deterministic ||
      at::autocast::is_autocast_cache_enabled() != s->autocast_cache) {
    return false;
  }
  for (const AutocastFact& f : s->autocast) {
    if (at::autocast::is_autocast_enabled(f.device) != f.enabled) return false;
    if (f.check_dtype && at::autocast::get_autocast_dtype(f.device) != f.dtype) return false;
  }
  if (c10::impl::TorchDispatchModeTLS::stack_len() != 0) return false;
  const bool function_mode = at::impl::torch_function_mode_enabled();
  if (function_mode != s->function_mode) return false;
  return !function_mode || device_stack_matches(s);
}

// state_check(spec) -> bool: the current thread's global state is the spec's.
PyObject* state_check(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 || Py_TYPE(args[0]) != &StateSpecType) {
    PyErr_SetString(PyExc_TypeError, "state_check(spec)");
    return nullptr;
  }
  if (state_matches(reinterpret_cast<StateSpec*>(args[0]))) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

PyMethodDef methods[] = {
    {"state_spec", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(make_state_spec)),
     METH_FASTCALL, "state_spec(...) -> the global state state_check() compares"},
    {"state_check", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(state_check)),
     METH_FASTCALL, "state_check(spec) -> True if the global state is the spec's"},
    {"same_storages", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(same_storages)),
     METH_FASTCALL, "same_storages(tensors, groups) -> True if the tensors share storages so"},
    {"swap_storage_data",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(swap_storage_data)), METH_FASTCALL,
     "swap_storage_data(a, b): the storages of tensors a and b exchange their memory"},
    {"spec", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(make_spec)), METH_FASTCALL,
     "spec(tensor[, dynamic_dims]) -> the facts check() compares"},
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(check)), METH_FASTCALL,
     "check(tensor, spec) -> True if the tensor matches the spec"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tensor_check",
                          "TENSOR_MATCH guards in C++", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__tensor_check(void) {
  SpecType.tp_name = "framejit.guards._tensor_check.Spec";
  SpecType.tp_basicsize = sizeof(Spec);
  SpecType.tp_dealloc = spec_dealloc;
  SpecType.tp_flags = Py_TPFLAGS_DEFAULT;
  SpecType.tp_doc = "expected tensor metadata for a TENSOR_MATCH guard";
  if (PyType_Ready(&SpecType) < 0) return nullptr;
  StateSpecType.tp_name = "framejit.guards._tensor_check.StateSpec";
  StateSpecType.tp_basicsize = sizeof(StateSpec);
  StateSpecType.tp_dealloc = state_spec_dealloc;
  StateSpecType.tp_flags = Py_TPFLAGS_DEFAULT;
  StateSpecType.tp_doc = "expected global state for a GLOBAL_STATE guard";
  if (PyType_Ready(&StateSpecType) < 0) return nullptr;
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  if (PyModule_AddStringConstant(m, "TORCH_VERSION_STR", FRAMEJIT_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
