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
//
// A module's guards are one module_check(module, spec) call (guards/compile.py groups them): it
// is the module, with its `training` flag and class, no hooks, `forward` not shadowed, its
// parameters' and buffers' TENSOR_MATCH, then its facts: guards on values a few attribute, item
// or type() steps away (`m.eps == 1e-5`, `type(m).forward.__code__ is c`) and its submodules'
// own specs, checked as their Python lines read. After a full check passes it remembers what
// it read; while the module's instance dict and the exact dicts it read through keep their
// versions (PEP 509) and its class its version tag, the same objects are there, so the fast
// path re-checks only the hook dicts, the tensors, the submodules and the facts whose outcome
// could change without those (a function's `__code__`, a value of a heap type).

#include <ATen/ATen.h>
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
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>

#include <weakrefobject.h>

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
  bool dynamic;  // some sizes are -1 (any); strides are not compared, contiguity is...
  bool fixed_strides;  // ...unless the strides are fixed (a view of a bigger buffer)
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

// The truth of `obj` into `*out`; false (an exception set) when it has none.
bool as_bool(PyObject* obj, bool* out) {
  int v = PyObject_IsTrue(obj);
  if (v < 0) return false;
  *out = v != 0;
  return true;
}

// spec(tensor[, dynamic_dims[, fixed_strides]]) -> Spec describing it. Raises TypeError for
// non-tensors, non-strided layouts, or dynamic_dims that is not a tuple of in-range ints. With
// fixed_strides, a tensor with dynamic dims must have the strides it has now (a growing slice
// of a preallocated buffer), not be contiguous.
PyObject* make_spec(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 3) {
    PyErr_SetString(PyExc_TypeError, "spec(tensor[, dynamic_dims[, fixed_strides]])");
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
  s->fixed_strides = false;
  if (nargs == 3 && !as_bool(args[2], &s->fixed_strides)) {
    Py_DECREF(reinterpret_cast<PyObject*>(s));
    return nullptr;
  }
  if (nargs >= 2) {
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
      if (s->fixed_strides && strides[i] != s->strides[i]) return false;
    }
    return s->fixed_strides || t.is_contiguous();
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

// A tensor over `storage` with `prototype`'s dispatch keys and dtype and the given sizes,
// strides and storage offset, made directly (no dispatch): a TensorImpl whose constructor drops
// or adds the autograd keys as the current inference mode says, as for any new tensor.
at::Tensor tensor_over(const c10::Storage& storage, const at::Tensor& prototype,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), prototype.key_set(), prototype.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  t.unsafeGetTensorImpl()->set_storage_offset(offset);
  return t;
}

// alias_outputs(blocks, places) -> (tensors, storages): the tensors one CUDA-graph replay hands
// out (cudagraphs/tree.py, Node.hand_out). blocks: a tuple of (address, nbytes, prototype) of the
// recorded output memory; places: a tuple of (block index, prototype, storage offset, sizes,
// strides), one per tensor output. Each block gets one fresh storage that does not own its memory
// (the node keeps the owning storage), and each place a tensor of its prototype's dtype and device
// over that storage. storages[i] is the storage under tensors[i] (one Python object per block).
// The same as `torch._C._construct_storage_from_data_pointer` plus `prototype.new().set_(...)`
// per output, in one call.
PyObject* alias_outputs(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "alias_outputs(blocks, places) takes two tuples");
    return nullptr;
  }
  const Py_ssize_t nblocks = PyTuple_GET_SIZE(args[0]);
  const Py_ssize_t nplaces = PyTuple_GET_SIZE(args[1]);
  std::vector<c10::Storage> storages;
  storages.reserve(static_cast<size_t>(nblocks));
  for (Py_ssize_t b = 0; b < nblocks; ++b) {
    PyObject* block = PyTuple_GET_ITEM(args[0], b);
    if (!PyTuple_Check(block) || PyTuple_GET_SIZE(block) != 3 ||
        !THPVariable_Check(PyTuple_GET_ITEM(block, 2))) {
      PyErr_SetString(PyExc_TypeError, "alias_outputs: a block is (address, nbytes, prototype)");
      return nullptr;
    }
    void* address = PyLong_AsVoidPtr(PyTuple_GET_ITEM(block, 0));
    Py_ssize_t nbytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(block, 1));
    if (PyErr_Occurred()) return nullptr;
    c10::Device device = THPVariable_Unpack(PyTuple_GET_ITEM(block, 2)).device();
    storages.emplace_back(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes),
                          at::DataPtr(address, device), /*allocator=*/nullptr,
                          /*resizable=*/false);
  }
  std::vector<PyObject*> wrapped(static_cast<size_t>(nblocks), nullptr);
  PyObject* tensors = PyTuple_New(nplaces);
  PyObject* under = PyTuple_New(nplaces);
  auto fail = [&]() -> PyObject* {
    Py_XDECREF(tensors);
    Py_XDECREF(under);
    for (PyObject* w : wrapped) Py_XDECREF(w);
    return nullptr;
  };
  if (tensors == nullptr || under == nullptr) return fail();
  try {
    for (Py_ssize_t i = 0; i < nplaces; ++i) {
      PyObject* place = PyTuple_GET_ITEM(args[1], i);
      if (!PyTuple_Check(place) || PyTuple_GET_SIZE(place) != 5 ||
          !THPVariable_Check(PyTuple_GET_ITEM(place, 1))) {
        PyErr_SetString(PyExc_TypeError,
                        "alias_outputs: a place is (block, prototype, offset, sizes, strides)");
        return fail();
      }
      Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(place, 0));
      int64_t offset = PyLong_AsLongLong(PyTuple_GET_ITEM(place, 2));
      if (PyErr_Occurred()) return fail();
      if (k < 0 || k >= nblocks) {
        PyErr_SetString(PyExc_IndexError, "alias_outputs: a place names no block");
        return fail();
      }
      std::vector<int64_t> sizes, strides;
      for (int which = 3; which <= 4; ++which) {
        PyObject* seq = PyTuple_GET_ITEM(place, which);
        if (!PyTuple_Check(seq)) {
          PyErr_SetString(PyExc_TypeError, "alias_outputs: sizes and strides are tuples");
          return fail();
        }
        auto& into = which == 3 ? sizes : strides;
        for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(seq); ++d) {
          into.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(seq, d)));
        }
        if (PyErr_Occurred()) return fail();
      }
      const at::Tensor& prototype = THPVariable_Unpack(PyTuple_GET_ITEM(place, 1));
      at::Tensor t = tensor_over(storages[static_cast<size_t>(k)], prototype, sizes, strides,
                                 offset);
      PyObject* tensor = THPVariable_Wrap(std::move(t));
      if (tensor == nullptr) return fail();
      PyTuple_SET_ITEM(tensors, i, tensor);
      if (wrapped[static_cast<size_t>(k)] == nullptr) {
        wrapped[static_cast<size_t>(k)] = THPStorage_Wrap(storages[static_cast<size_t>(k)]);
        if (wrapped[static_cast<size_t>(k)] == nullptr) return fail();
      }
      Py_INCREF(wrapped[static_cast<size_t>(k)]);
      PyTuple_SET_ITEM(under, i, wrapped[static_cast<size_t>(k)]);
    }
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return fail();
  }
  for (PyObject* w : wrapped) Py_XDECREF(w);
  PyObject* result = PyTuple_Pack(2, tensors, under);
  Py_DECREF(tensors);
  Py_DECREF(under);
  return result;
}

// alias_view(tensor, sizes, strides, delta) -> a tensor over `tensor`'s storage with those sizes
// and strides, at `tensor`'s storage offset plus delta: what `tensor.as_strided(sizes, strides,
// tensor.storage_offset() + delta)` gives, made directly (a TensorImpl with `tensor`'s dispatch
// keys and dtype) instead of through the dispatcher: ~0.3 us instead of ~1.5 us. The Triton
// backend's wrapper passes such views to the ops it calls (a matmul's operands are views of
// earlier buffers); the view carries no autograd or view history, so it is only for tensors
// that do not escape the wrapper. The caller computed the sizes and strides from a view chain
// that is valid on the tensor's layout. A tensor that is not a plain strided one (one with a
// Python dispatch key, a sparse or nested tensor) takes `as_strided`.
PyObject* alias_view(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || !THPVariable_Check(args[0]) || !PyTuple_Check(args[1]) ||
      !PyTuple_Check(args[2]) || PyTuple_GET_SIZE(args[1]) != PyTuple_GET_SIZE(args[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "alias_view(tensor, sizes, strides, delta): sizes and strides are tuples of "
                    "one length");
    return nullptr;
  }
  const Py_ssize_t ndim = PyTuple_GET_SIZE(args[1]);
  c10::SmallVector<int64_t, 6> sizes, strides;
  for (Py_ssize_t d = 0; d < ndim; ++d) {
    sizes.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(args[1], d)));
    strides.push_back(PyLong_AsLongLong(PyTuple_GET_ITEM(args[2], d)));
  }
  const int64_t delta = PyLong_AsLongLong(args[3]);
  if (PyErr_Occurred()) return nullptr;
  try {
    const at::Tensor& base = THPVariable_Unpack(args[0]);
    const int64_t offset = base.storage_offset() + delta;
    at::Tensor t;
    if (base.layout() == c10::kStrided && base.has_storage() &&
        !base.key_set().has(c10::DispatchKey::Python) &&
        !base.key_set().has(c10::DispatchKey::PythonTLSSnapshot)) {
      t = tensor_over(base.storage(), base, sizes, strides, offset);
    } else {
      t = base.as_strided(sizes, strides, offset);
    }
    return THPVariable_Wrap(std::move(t));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// launch_key(args) -> the key of a Triton launch's arguments (backend/triton/launch.py, where
// the same key is written in Python): a tuple of small ints, one per argument. A tensor gives
// 1000 + 2 * its ScalarType + (1 if its data pointer is 16-byte aligned); an int (exactly int)
// gives bit 0: it is 1, bit 1: 16 divides it, bit 2: it fits int32, bit 3: it is >= 2**63; a
// bool 100 and a float 101. None for any other argument, or an int outside [-2**63, 2**64):
// Triton's own launch path decides for those. ~0.1 us for a kernel's arguments, where the key
// written in Python costs ~1 us; a GPT-2 call makes about 60 launches.
PyObject* launch_key(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1 || !PyTuple_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "launch_key(args) takes a tuple");
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(args[0]);
  PyObject* key = PyTuple_New(n);
  if (key == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyTuple_GET_ITEM(args[0], i);
    long code = -1;
    if (THPVariable_Check(a)) {
      const at::Tensor& t = THPVariable_Unpack(a);
      if (!t.has_storage()) {
        Py_DECREF(key);
        Py_RETURN_NONE;
      }
      const auto address = reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()->data());
      code = 1000 + 2 * static_cast<long>(t.scalar_type()) + ((address & 15) == 0 ? 1 : 0);
    } else if (PyBool_Check(a)) {
      code = 100;
    } else if (PyFloat_CheckExact(a)) {
      code = 101;
    } else if (PyLong_CheckExact(a)) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
      if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
        code = (v == 1 ? 1 : 0) | ((v & 15) == 0 ? 2 : 0) |
               (v >= INT32_MIN && v <= INT32_MAX ? 4 : 0);
      } else if (overflow > 0) {
        const unsigned long long u = PyLong_AsUnsignedLongLong(a);
        if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
          PyErr_Clear();  // 2**64 or more
        } else {
          code = ((u & 15) == 0 ? 2 : 0) | 8;
        }
      }
      PyErr_Clear();
    }
    PyObject* item = code < 0 ? nullptr : PyLong_FromLong(code);
    if (item == nullptr) {  // an argument with no key (or no memory): no key at all
      Py_DECREF(key);
      if (PyErr_Occurred()) return nullptr;
      Py_RETURN_NONE;
    }
    PyTuple_SET_ITEM(key, i, item);
  }
  return key;
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

// --- MODULE_MATCH groups -----------------------------------------------------------------------

PyObject* object_getattribute = nullptr;  // object.__getattribute__ (a slot wrapper; owned)
PyObject* str_getattribute = nullptr;     // interned names (owned)
PyObject* str_training = nullptr;
PyObject* str_dict = nullptr;
PyObject* str_hooks[4] = {nullptr, nullptr, nullptr, nullptr};

// What a Python read `obj.name` returns (a new reference; nullptr with an exception set).
// `dict` is obj's instance dict, or nullptr when the fast path does not apply (see
// instance_dict). Fast path: when nothing on obj's type is named `name`, generic attribute
// lookup returns the instance dict's entry if there is one, so read it there; else, or when
// the dict lacks the name, ask Python (and set `*from_dict` to false).
PyObject* read_attr(PyObject* obj, PyObject* dict, PyObject* name, bool* from_dict) {
  if (dict != nullptr && _PyType_Lookup(Py_TYPE(obj), name) == nullptr) {
    PyObject* value = PyDict_GetItemWithError(dict, name);
    if (value != nullptr) {
      Py_INCREF(value);
      return value;
    }
    if (PyErr_Occurred()) return nullptr;
  }
  *from_dict = false;
  return PyObject_GetAttr(obj, name);
}

#if PY_VERSION_HEX < 0x030D0000
#define FRAMEJIT_DICT_VERSIONS 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
// PEP 509: changes on every write to the dict, to a value no dict had before.
inline uint64_t dict_version(PyObject* dict) {
  return reinterpret_cast<PyDictObject*>(dict)->ma_version_tag;
}
#pragma GCC diagnostic pop
#else
#define FRAMEJIT_DICT_VERSIONS 0
#endif

// The class's version tag: changes with any change to the class or a base; 0: none.
inline unsigned int type_tag(PyTypeObject* tp) {
  return PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
}

// obj's instance dict when attribute reads on obj are generic (its class, as nn.Module, has
// object's __getattribute__: a `__getattr__` only runs after generic lookup failed), else
// nullptr (read_attr then asks Python for every read). A new reference.
PyObject* instance_dict(PyObject* obj) {
  PyTypeObject* tp = Py_TYPE(obj);
  if (tp->tp_getattro != PyObject_GenericGetAttr &&
      _PyType_Lookup(tp, str_getattribute) != object_getattribute) {
    return nullptr;
  }
  PyObject* dict = PyObject_GenericGetDict(obj, nullptr);
  if (dict == nullptr || !PyDict_CheckExact(dict)) {
    PyErr_Clear();
    Py_XDECREF(dict);
    return nullptr;
  }
  return dict;
}

struct ModuleTensor {
  PyObject* container;  // "_parameters" or "_buffers", interned (owned)
  PyObject* key;        // owned
  PyObject* spec;       // a Spec (owned)
};

// A fact about a value reached from the module: `type(m).forward.__code__ is c`, `m.eps == 1e-5`,
// `len(m.normalized_shape) == 1`, or a submodule's own ModuleSpec (`m._modules['fc']`).
enum StepKind { STEP_ATTR = 0, STEP_ITEM = 1, STEP_TYPE = 2 };
enum FactKind {
  FACT_IS = 0,
  FACT_EQ = 1,
  FACT_TYPE = 2,
  FACT_LEN = 3,
  FACT_MODULE = 4,
  FACT_KEYS = 5,  // list(value) == list(expected): a dict's keys, in order
};

struct Step {
  StepKind kind;
  PyObject* arg;  // STEP_ATTR: the name (interned); STEP_ITEM: the key; STEP_TYPE: nullptr
};

struct Fact {
  std::vector<Step> path;  // from the module to the value (owned args)
  FactKind kind;
  PyObject* expected;  // FACT_IS: the object; FACT_EQ: an equal value of the exact type; FACT_TYPE:
                       // the type; FACT_MODULE: the submodule's ModuleSpec; FACT_KEYS: a list of
                       // the keys; FACT_LEN: nullptr
  Py_ssize_t length;   // FACT_LEN
  // What the last full check found (used only while its module's fast path holds): the value
  // after the first `fixed_steps` steps is the same object while the module's instance dict
  // and class and the exact dicts read on the way (`containers`, with their versions,
  // outermost first) are unchanged, and is `value` (borrowed, held by the last of those);
  // `stable`: the whole path is fixed and so is the outcome: the fast path skips the fact.
  size_t fixed_steps;
  bool stable;
  PyObject* value;
  std::vector<std::pair<PyObject*, uint64_t>> containers;
};

struct ModuleSpec;
bool module_matches(PyObject* obj, ModuleSpec* s);

struct ModuleSpec {
  PyObject_HEAD
  PyObject* module;  // the module, a weak reference to it, or nullptr: any instance of cls (owned)
  PyObject* training;  // Py_True or Py_False (owned)
  PyObject* cls;       // the module's exact class, or nullptr: not checked (owned)
  bool no_hooks;       // the module has no forward/backward (pre-)hooks
  PyObject* absent;    // a tuple of keys that must not be in the module's __dict__ (owned)
  std::vector<ModuleTensor> tensors;  // getattr(module, container)[key] matches spec
  std::vector<Fact> facts;            // then these hold, in order
  // The fast path's memory of the last full check that passed (valid: `cached`). Borrowed
  // pointers, used only while the versions show that the objects holding them are unchanged.
  bool cached;
  PyObject* cached_dict;  // the module's instance dict...
  uint64_t cached_dict_version;  // ...and its version
  PyTypeObject* cached_type;
  unsigned int cached_type_tag;
  PyObject* cached_hooks[4];  // the hook dicts
  std::vector<PyObject*> cached_containers;  // per tensor: its container (an exact dict)...
  std::vector<uint64_t> cached_container_versions;  // ...with its version
  std::vector<PyObject*> cached_tensors;  // per tensor: the tensor
};

void module_spec_dealloc(PyObject* self) {
  ModuleSpec* s = reinterpret_cast<ModuleSpec*>(self);
  Py_XDECREF(s->module);
  Py_XDECREF(s->training);
  Py_XDECREF(s->cls);
  Py_XDECREF(s->absent);
  for (ModuleTensor& t : s->tensors) {
    Py_XDECREF(t.container);
    Py_XDECREF(t.key);
    Py_XDECREF(t.spec);
  }
  s->tensors.~vector();
  for (Fact& f : s->facts) {
    for (Step& step : f.path) Py_XDECREF(step.arg);
    Py_XDECREF(f.expected);
  }
  s->facts.~vector();
  s->cached_containers.~vector();
  s->cached_container_versions.~vector();
  s->cached_tensors.~vector();
  Py_TYPE(self)->tp_free(self);
}

PyTypeObject ModuleSpecType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// One fact from its Python form (path, kind, expected): path is a tuple of steps, each a str
// (an attribute), a 1-tuple (an item: its key) or None (`type(...)`). False with TypeError set
// when it is malformed.
bool parse_fact(PyObject* item, Fact* f) {
  static const char* usage =
      "module_spec(): facts are (path, kind, expected); a step is a str, a 1-tuple or None";
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3 ||
      !PyTuple_Check(PyTuple_GET_ITEM(item, 0)) || !PyLong_Check(PyTuple_GET_ITEM(item, 1))) {
    PyErr_SetString(PyExc_TypeError, usage);
    return false;
  }
  const long kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
  PyObject* expected = PyTuple_GET_ITEM(item, 2);
  if (kind < FACT_IS || kind > FACT_KEYS || (kind == FACT_LEN && !PyLong_Check(expected)) ||
      (kind == FACT_KEYS && !PyList_CheckExact(expected)) ||
      (kind == FACT_TYPE && !PyType_Check(expected)) ||
      (kind == FACT_MODULE && Py_TYPE(expected) != &ModuleSpecType)) {
    PyErr_SetString(PyExc_TypeError, usage);
    return false;
  }
  f->kind = static_cast<FactKind>(kind);
  f->stable = false;
  f->fixed_steps = 0;
  f->value = nullptr;
  f->length = 0;
  f->expected = nullptr;
  if (f->kind == FACT_LEN) {
    f->length = PyLong_AsSsize_t(expected);
    if (f->length < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, usage);
      return false;
    }
  } else {
    f->expected = Py_NewRef(expected);
  }
  PyObject* path = PyTuple_GET_ITEM(item, 0);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(path); ++i) {
    PyObject* step = PyTuple_GET_ITEM(path, i);
    if (PyUnicode_Check(step)) {
      PyObject* name = Py_NewRef(step);
      PyUnicode_InternInPlace(&name);
      f->path.push_back(Step{STEP_ATTR, name});
    } else if (PyTuple_Check(step) && PyTuple_GET_SIZE(step) == 1) {
      f->path.push_back(Step{STEP_ITEM, Py_NewRef(PyTuple_GET_ITEM(step, 0))});
    } else if (step == Py_None) {
      f->path.push_back(Step{STEP_TYPE, nullptr});
    } else {
      PyErr_SetString(PyExc_TypeError, usage);
      return false;
    }
  }
  return true;
}

// module_spec(module_or_weakref_or_None, training, cls_or_None, no_hooks, absent_keys, tensors
// [, facts]); module None: any instance of cls
// tensors: a tuple of (container name, key, Spec); facts: a tuple of (path, kind, expected).
PyObject* make_module_spec(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 6 || nargs > 7 || !PyBool_Check(args[1]) ||
      !(args[2] == Py_None || PyType_Check(args[2])) || !PyTuple_Check(args[4]) ||
      !PyTuple_Check(args[5]) || (nargs == 7 && !PyTuple_Check(args[6]))) {
    PyErr_SetString(PyExc_TypeError,
                    "module_spec(module, training, cls, no_hooks, absent_keys, tensors[, facts])");
    return nullptr;
  }
  if (args[0] == Py_None && args[2] == Py_None) {
    PyErr_SetString(PyExc_TypeError, "module_spec(): any instance (None) needs a class");
    return nullptr;
  }
  ModuleSpec* s = PyObject_New(ModuleSpec, &ModuleSpecType);
  if (s == nullptr) return nullptr;
  new (&s->tensors) std::vector<ModuleTensor>();
  new (&s->facts) std::vector<Fact>();
  new (&s->cached_containers) std::vector<PyObject*>();
  new (&s->cached_container_versions) std::vector<uint64_t>();
  new (&s->cached_tensors) std::vector<PyObject*>();
  s->cached = false;
  PyObject* self = reinterpret_cast<PyObject*>(s);
  s->module = args[0] == Py_None ? nullptr : Py_NewRef(args[0]);
  s->training = Py_NewRef(args[1]);
  s->cls = args[2] == Py_None ? nullptr : Py_NewRef(args[2]);
  s->absent = Py_NewRef(args[4]);
  s->no_hooks = false;
  if (!as_bool(args[3], &s->no_hooks)) {
    Py_DECREF(self);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[5]); ++i) {
    PyObject* item = PyTuple_GET_ITEM(args[5], i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(item, 0)) ||
        Py_TYPE(PyTuple_GET_ITEM(item, 2)) != &SpecType) {
      Py_DECREF(self);
      PyErr_SetString(PyExc_TypeError, "module_spec(): tensors are (container, key, spec)");
      return nullptr;
    }
    PyObject* container = Py_NewRef(PyTuple_GET_ITEM(item, 0));
    PyUnicode_InternInPlace(&container);
    s->tensors.push_back(ModuleTensor{container, Py_NewRef(PyTuple_GET_ITEM(item, 1)),
                                      Py_NewRef(PyTuple_GET_ITEM(item, 2))});
  }
  for (Py_ssize_t i = 0; nargs == 7 && i < PyTuple_GET_SIZE(args[6]); ++i) {
    s->facts.emplace_back();
    if (!parse_fact(PyTuple_GET_ITEM(args[6], i), &s->facts.back())) {
      Py_DECREF(self);
      return nullptr;
    }
  }
  return self;
}

// `list(value) == keys` (keys: a list), as Python compares them: an exact dict's keys are
// compared in place, anything else is listed first.
bool keys_equal(PyObject* value, PyObject* keys) {
  if (PyDict_CheckExact(value)) {
    if (PyDict_GET_SIZE(value) != PyList_GET_SIZE(keys)) return false;
    Py_ssize_t pos = 0, i = 0;
    PyObject* key = nullptr;
    PyObject* item = nullptr;
    while (PyDict_Next(value, &pos, &key, &item)) {
      Py_INCREF(key);  // a key's __eq__ may change the dict: hold it while comparing
      const int same = PyObject_RichCompareBool(key, PyList_GET_ITEM(keys, i++), Py_EQ);
      Py_DECREF(key);
      if (same != 1) return false;
    }
    return true;
  }
  PyObject* listed = PySequence_List(value);
  if (listed == nullptr) return false;
  const int same = PyObject_RichCompareBool(listed, keys, Py_EQ);
  Py_DECREF(listed);
  return same == 1;
}

// Whether `value` passes the fact's comparison; false, with no exception left set, when it does
// not. `*stable`: whether the outcome is fixed as long as `value` is the same object: identity,
// an immutable value, a tuple's length, or a builtin (non-heap) type, which cannot be assigned
// away; never for a submodule, whose spec has its own fast path.
bool value_passes(PyObject* value, const Fact* f, bool* stable) {
  bool ok = false;
  *stable = true;
  switch (f->kind) {
    case FACT_IS:
      ok = value == f->expected;
      break;
    case FACT_EQ:
      ok = Py_TYPE(value) == Py_TYPE(f->expected) &&
           PyObject_RichCompareBool(value, f->expected, Py_EQ) == 1;
      break;
    case FACT_TYPE:
      ok = reinterpret_cast<PyObject*>(Py_TYPE(value)) == f->expected;
      *stable = !PyType_HasFeature(Py_TYPE(value), Py_TPFLAGS_HEAPTYPE);
      break;
    case FACT_LEN:
      ok = PyObject_Size(value) == f->length;
      *stable = PyTuple_CheckExact(value);
      break;
    case FACT_MODULE:
      ok = module_matches(value, reinterpret_cast<ModuleSpec*>(f->expected));
      *stable = false;
      break;
    case FACT_KEYS:
      ok = keys_equal(value, f->expected);
      *stable = false;  // fact_holds: fixed while the dict's version is (an exact dict)
      break;
  }
  if (!ok) PyErr_Clear();
  return ok;
}

// One step of a fact's path from `value` (a new reference; nullptr with an exception set), read
// as its Python line reads it (`x.name`, `x[key]`, `type(x)`); `dict` is the module's instance
// dict when `i` is 0 (see read_attr). `*fixed` (in: the value read so far is fixed) becomes
// whether the result is fixed too (see fact_holds); an exact dict read from while fixed goes
// into `containers` with its version.
PyObject* read_step(PyObject* value, const Fact* f, size_t i, PyObject* dict, bool* fixed,
                    std::vector<std::pair<PyObject*, uint64_t>>* containers) {
  const Step& step = f->path[i];
  if (step.kind == STEP_TYPE) {
    *fixed = *fixed && i == 0;
    return Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(value)));
  }
  if (step.kind == STEP_ITEM) {
#if FRAMEJIT_DICT_VERSIONS
    const bool exact_dict = PyDict_CheckExact(value);
    const uint64_t version = exact_dict ? dict_version(value) : 0;
#else
    const bool exact_dict = false;
    const uint64_t version = 0;
#endif
    if (exact_dict && *fixed) containers->emplace_back(value, version);
    *fixed = *fixed && (PyTuple_CheckExact(value) || exact_dict);
    return PyObject_GetItem(value, step.arg);
  }
  if (i == 0) {
    bool direct = true;
    PyObject* next = read_attr(value, dict, step.arg, &direct);
    *fixed = direct;
    return next;
  }
  if (PyFunction_Check(value) && Py_TYPE(value) == &PyFunction_Type &&
      PyUnicode_CompareWithASCIIString(step.arg, "__code__") == 0) {
    *fixed = false;  // a function's code can be assigned
    return Py_NewRef(PyFunction_GET_CODE(value));
  }
  PyObject* next = PyObject_GetAttr(value, step.arg);
  // `type(m).name`: the attribute on the class itself, unchanged while its tag is
  *fixed = *fixed && i == 1 && f->path[0].kind == STEP_TYPE && Py_TYPE(value) == &PyType_Type &&
           next == _PyType_Lookup(reinterpret_cast<PyTypeObject*>(value), step.arg);
  return next;
}

// The value at the end of f's path, read from step `from` on, starting at `start` (borrowed): a
// new reference, or nullptr with no exception set. `*fixed` as in read_step; the longest fixed
// start read is noted in `*fixed_steps` and `*fixed_value` (borrowed, see fact_holds).
PyObject* read_path(PyObject* start, const Fact* f, size_t from, PyObject* dict, bool* fixed,
                    std::vector<std::pair<PyObject*, uint64_t>>* containers,
                    size_t* fixed_steps, PyObject** fixed_value) {
  PyObject* value = Py_NewRef(start);
  for (size_t i = from; i < f->path.size(); ++i) {
    PyObject* next = read_step(value, f, i, dict, fixed, containers);
    Py_DECREF(value);
    if (next == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    value = next;
    if (*fixed) {
      *fixed_steps = i + 1;
      *fixed_value = value;
    }
  }
  return value;
}

// Whether the fact holds for module `obj` (whose instance dict is `dict`, or nullptr: see
// instance_dict); false, with no exception left set, when it does not or a read raises. With
// `record`, notes what the fast path may reuse: the longest fixed start of the path (its
// length and value, Fact::fixed_steps and value) and whether the outcome is fixed (stable). A
// value is fixed, the same object while the module's instance dict and class and the recorded
// containers are unchanged, when the first read came from the instance dict (or was
// `type(obj)`) and each later one from an exact tuple, an exact dict (recorded, with its
// version) or, for `type(obj).name`, the class itself.
bool fact_holds(PyObject* obj, PyObject* dict, Fact* f, bool record) {
  bool fixed = true;
  size_t fixed_steps = 0;
  PyObject* fixed_value = obj;  // borrowed: held by what holds it (see above)
  std::vector<std::pair<PyObject*, uint64_t>> containers;
  PyObject* value =
      read_path(obj, f, 0, dict, &fixed, &containers, &fixed_steps, &fixed_value);
  if (value == nullptr) return false;
  bool stable = false;
#if FRAMEJIT_DICT_VERSIONS
  const uint64_t keys_version =
      f->kind == FACT_KEYS && PyDict_CheckExact(value) ? dict_version(value) : 0;
#endif
  const bool ok = value_passes(value, f, &stable);
#if FRAMEJIT_DICT_VERSIONS
  if (record && fixed && keys_version != 0 && dict_version(value) == keys_version) {
    containers.emplace_back(value, keys_version);  // the keys are fixed while it is unchanged
    stable = true;
  }
#endif
  if (record) {
    f->fixed_steps = fixed_steps;
    f->value = fixed_value;
    f->stable = fixed && stable;
    f->containers = std::move(containers);
  }
  Py_DECREF(value);
  return ok;
}

// Whether the fact still holds, from what its module's last full check recorded (the module's
// fast path has found its instance dict and class unchanged); false: run the full check.
bool fact_still_holds(PyObject* obj, PyObject* dict, Fact* f) {
#if FRAMEJIT_DICT_VERSIONS
  if (f->fixed_steps == 0) return fact_holds(obj, dict, f, false);
  // outermost first: while a dict is unchanged, the next one it holds is alive
  for (const auto& [container, version] : f->containers) {
    if (dict_version(container) != version) return false;
  }
  if (f->stable) return true;
  bool fixed = false;
  size_t unused_steps = 0;
  PyObject* unused_value = nullptr;
  std::vector<std::pair<PyObject*, uint64_t>> unused;
  PyObject* value = read_path(f->value, f, f->fixed_steps, nullptr, &fixed, &unused,
                              &unused_steps, &unused_value);
  if (value == nullptr) return false;
  bool stable = false;
  const bool ok = value_passes(value, f, &stable);
  Py_DECREF(value);
  return ok;
#else
  return fact_holds(obj, dict, f, false);
#endif
}

// Whether the containers the facts' last reads recorded are unchanged (nothing changed them
// while the check read on).
bool containers_unchanged(const ModuleSpec* s) {
#if FRAMEJIT_DICT_VERSIONS
  for (const Fact& f : s->facts) {
    for (const auto& [container, version] : f.containers) {
      if (dict_version(container) != version) return false;
    }
  }
#endif
  (void)s;
  return true;
}

// The fast path: nothing the last passing full check read has changed (see the top of the
// file), the hook dicts are still empty and every tensor still matches. False: run the full
// check.
bool cached_matches(PyObject* obj, ModuleSpec* s) {
#if FRAMEJIT_DICT_VERSIONS
  PyTypeObject* tp = Py_TYPE(obj);
  if (tp != s->cached_type || type_tag(tp) != s->cached_type_tag) return false;
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  if (dictptr == nullptr || *dictptr != s->cached_dict ||
      dict_version(s->cached_dict) != s->cached_dict_version) {
    return false;
  }
  if (s->no_hooks) {
    for (PyObject* hooks : s->cached_hooks) {
      const int truth = PyObject_IsTrue(hooks);
      if (truth != 0) {
        if (truth < 0) PyErr_Clear();
        return false;
      }
    }
  }
  for (size_t i = 0; i < s->tensors.size(); ++i) {
    if (dict_version(s->cached_containers[i]) != s->cached_container_versions[i]) return false;
    if (!matches(s->cached_tensors[i], reinterpret_cast<const Spec*>(s->tensors[i].spec))) {
      return false;
    }
  }
  for (Fact& f : s->facts) {
    if (!fact_still_holds(obj, s->cached_dict, &f)) return false;
  }
  return true;
#else
  (void)obj;
  (void)s;
  return false;
#endif
}

// Every fact of the spec holds for `obj`; false, with no exception left set, when one does not
// or cannot be read.
bool module_matches(PyObject* obj, ModuleSpec* s) {
  PyObject* expected = s->module;
  if (expected != nullptr) {  // this instance (else any instance of the class)
    if (PyWeakref_CheckRef(expected)) expected = PyWeakref_GetObject(expected);  // borrowed
    if (obj != expected || expected == Py_None) return false;
  }
  if (s->cls != nullptr && reinterpret_cast<PyObject*>(Py_TYPE(obj)) != s->cls) return false;
  if (s->cached && cached_matches(obj, s)) return true;
  s->cached = false;
  PyObject* dict = instance_dict(obj);
  // Whether every read came from the instance dict (and each container is an exact dict): only
  // then may the fast path stand in for this check next time.
  bool from_dict = FRAMEJIT_DICT_VERSIONS && dict != nullptr && type_tag(Py_TYPE(obj)) != 0;
  PyObject* hooks[4] = {nullptr, nullptr, nullptr, nullptr};  // borrowed, while dict holds them
  std::vector<PyObject*> containers;
  std::vector<uint64_t> versions;  // each container's, when it was read
  std::vector<PyObject*> tensors;
#if FRAMEJIT_DICT_VERSIONS
  const unsigned int tag = type_tag(Py_TYPE(obj));
  const uint64_t version = from_dict ? dict_version(dict) : 0;
#endif
  bool ok = false;
  PyObject* value = read_attr(obj, dict, str_training, &from_dict);
  if (value == nullptr || value != s->training) goto done;
  Py_CLEAR(value);
  if (s->no_hooks) {
    for (int i = 0; i < 4; ++i) {
      value = read_attr(obj, dict, str_hooks[i], &from_dict);
      if (value == nullptr) goto done;
      const int truth = PyObject_IsTrue(value);
      hooks[i] = value;
      Py_CLEAR(value);
      if (truth != 0) goto done;
    }
  }
  if (PyTuple_GET_SIZE(s->absent) != 0) {
    value = PyObject_GetAttr(obj, str_dict);
    if (value == nullptr) goto done;
    if (value != dict) from_dict = false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(s->absent); ++i) {
      if (PySequence_Contains(value, PyTuple_GET_ITEM(s->absent, i)) != 0) goto done;
    }
    Py_CLEAR(value);
  }
  for (const ModuleTensor& t : s->tensors) {
    value = read_attr(obj, dict, t.container, &from_dict);
    if (value == nullptr) goto done;
    if (!PyDict_CheckExact(value)) from_dict = false;
    containers.push_back(value);
#if FRAMEJIT_DICT_VERSIONS
    versions.push_back(from_dict ? dict_version(value) : 0);
#endif
    PyObject* tensor = PyObject_GetItem(value, t.key);
    tensors.push_back(tensor);
    Py_CLEAR(value);
    if (tensor == nullptr) goto done;
    const bool same = THPVariable_Check(tensor) &&
                      matches(tensor, reinterpret_cast<const Spec*>(t.spec));
    Py_DECREF(tensor);
    if (!same) goto done;
  }
  for (Fact& f : s->facts) {
    if (!fact_holds(obj, dict, &f, true)) goto done;
  }
  ok = true;
#if FRAMEJIT_DICT_VERSIONS
  // Remember what this check read, for the fast path, if nothing changed while it read (a
  // hook dict's __bool__ could run Python code).
  for (size_t i = 0; from_dict && i < containers.size(); ++i) {
    from_dict = dict_version(containers[i]) == versions[i];
  }
  if (from_dict && dict_version(dict) == version && type_tag(Py_TYPE(obj)) == tag &&
      containers_unchanged(s)) {
    s->cached_dict = dict;
    s->cached_dict_version = version;
    s->cached_type = Py_TYPE(obj);
    s->cached_type_tag = tag;
    for (int i = 0; i < 4; ++i) s->cached_hooks[i] = hooks[i];
    s->cached_containers = containers;
    s->cached_container_versions = versions;
    s->cached_tensors = tensors;
    s->cached = true;
  }
#endif
done:
  Py_XDECREF(value);
  Py_XDECREF(dict);
  if (!ok) PyErr_Clear();
  return ok;
}

// module_check(module, spec) -> bool
PyObject* module_check(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || Py_TYPE(args[1]) != &ModuleSpecType) {
    PyErr_SetString(PyExc_TypeError, "module_check(module, spec)");
    return nullptr;
  }
  if (module_matches(args[0], reinterpret_cast<ModuleSpec*>(args[1]))) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

PyMethodDef methods[] = {
    {"module_spec", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(make_module_spec)),
     METH_FASTCALL, "module_spec(...) -> the facts about one module module_check() compares"},
    {"module_check", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(module_check)),
     METH_FASTCALL, "module_check(module, spec) -> True if every fact of the spec holds"},
    {"state_spec", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(make_state_spec)),
     METH_FASTCALL, "state_spec(...) -> the global state state_check() compares"},
    {"state_check", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(state_check)),
     METH_FASTCALL, "state_check(spec) -> True if the global state is the spec's"},
    {"same_storages", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(same_storages)),
     METH_FASTCALL, "same_storages(tensors, groups) -> True if the tensors share storages so"},
    {"alias_outputs", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(alias_outputs)),
     METH_FASTCALL, "alias_outputs(blocks, places): the tensors a CUDA-graph replay hands out"},
    {"alias_view", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(alias_view)),
     METH_FASTCALL, "alias_view(tensor, sizes, strides, delta): a view made without dispatch"},
    {"launch_key", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(launch_key)),
     METH_FASTCALL, "launch_key(args): the key of a Triton launch's arguments"},
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

// Fill in and ready one of the module's plain types (no GC, no methods: a spec object).
static bool ready_type(PyTypeObject* type, const char* name, Py_ssize_t size,
                       destructor dealloc, const char* doc) {
  type->tp_name = name;
  type->tp_basicsize = size;
  type->tp_dealloc = dealloc;
  type->tp_flags = Py_TPFLAGS_DEFAULT;
  type->tp_doc = doc;
  return PyType_Ready(type) == 0;
}

PyMODINIT_FUNC PyInit__tensor_check(void) {
  if (!ready_type(&SpecType, "framejit.guards._tensor_check.Spec", sizeof(Spec), spec_dealloc,
                  "expected tensor metadata for a TENSOR_MATCH guard") ||
      !ready_type(&StateSpecType, "framejit.guards._tensor_check.StateSpec", sizeof(StateSpec),
                  state_spec_dealloc, "expected global state for a GLOBAL_STATE guard") ||
      !ready_type(&ModuleSpecType, "framejit.guards._tensor_check.ModuleSpec",
                  sizeof(ModuleSpec), module_spec_dealloc,
                  "expected facts about one module for module_check")) {
    return nullptr;
  }
  str_getattribute = PyUnicode_InternFromString("__getattribute__");
  str_training = PyUnicode_InternFromString("training");
  str_dict = PyUnicode_InternFromString("__dict__");
  const char* hooks[4] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                          "_backward_pre_hooks"};
  for (int i = 0; i < 4; ++i) str_hooks[i] = PyUnicode_InternFromString(hooks[i]);
  // (not object's tp_dict: since 3.12 a static type's dict lives in the interpreter)
  object_getattribute = _PyType_Lookup(&PyBaseObject_Type, str_getattribute);
  if (object_getattribute == nullptr || str_training == nullptr || str_dict == nullptr ||
      str_hooks[3] == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "_tensor_check: init failed");
    return nullptr;
  }
  Py_INCREF(object_getattribute);
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  // module_spec's facts argument (older builds of this file lack it): 1, kinds IS to MODULE;
  // 2, KEYS too
  if (PyModule_AddIntConstant(m, "MODULE_FACTS", 2) < 0 ||
      PyModule_AddStringConstant(m, "TORCH_VERSION_STR", FRAMEJIT_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
