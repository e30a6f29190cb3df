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

#include <Python.h>
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

PyMethodDef methods[] = {
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
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  if (PyModule_AddStringConstant(m, "TORCH_VERSION_STR", FRAMEJIT_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
