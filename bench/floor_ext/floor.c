/* _cai_bench_floor: the least a CPython extension can do on each exchange path that
 * bench/interop.py times, so that each row reads "cai / floor" from one run. Plain C over the
 * CPython API and DLPack's header, no cai: an array is a pointer, a shape and strides, an owner.
 * Each function does the work its cai counterpart must do and nothing more (no stream state, no
 * dtype other than the one typestr it caches, no messages beyond a TypeError). Nothing here
 * ships; it is built with the benchmark (bench/floor_ext/CMakeLists.txt). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "cai/core/dlpack.h"

#define MAX_NDIM 8

typedef struct {
  PyObject_HEAD uint64_t ptr;
  int ndim;
  int readonly;
  int64_t shape[MAX_NDIM];
  int64_t strides[MAX_NDIM]; /* bytes */
  int64_t elem_strides[MAX_NDIM];
  uint64_t stream;
  PyObject* owner;                  /* a CAI producer, or NULL */
  DLManagedTensorVersioned* tensor; /* a DLPack tensor this array owns, or NULL */
  PyObject* cai;                    /* the fixed entries of its CAI dict */
} FloorArray;

static PyTypeObject FloorArrayType;
static PyObject *k_shape, *k_typestr, *k_data, *k_version, *k_strides, *k_stream, *k_cai, *k_f4,
    *k_dlpack, *k_dlpack_device, *k_max_version, *k_exchange, *kw_stream_version, *v_version13;

static FloorArray* new_array(void) {
  FloorArray* a = PyObject_New(FloorArray, &FloorArrayType);
  if (!a) return NULL;
  a->owner = NULL;
  a->tensor = NULL;
  a->cai = NULL;
  a->stream = 0;
  return a;
}

static void array_dealloc(FloorArray* a) {
  if (a->tensor && a->tensor->deleter) a->tensor->deleter(a->tensor);
  Py_XDECREF(a->owner);
  Py_XDECREF(a->cai);
  PyObject_Free(a);
}

/* ---- CAI export: a new dict per read, cloned from the fixed entries ---------------------- */
static PyObject* array_cai(FloorArray* a, void* closure) {
  (void)closure;
  if (!a->cai) {
    PyObject* shape = PyTuple_New(a->ndim);
    for (int i = 0; i < a->ndim; ++i) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(a->shape[i]));
    a->cai = Py_BuildValue("{O:N,O:O,O:(NO),O:i,O:O,O:O}", k_shape, shape, k_typestr, k_f4, k_data,
                           PyLong_FromUnsignedLongLong(a->ptr), a->readonly ? Py_True : Py_False,
                           k_version, 3, k_strides, Py_None, k_stream, Py_None);
    if (!a->cai) return NULL;
  }
  return PyDict_Copy(a->cai);
}

/* ---- DLPack export: one allocation, the tensor borrowing the array ----------------------- */
typedef struct {
  DLManagedTensorVersioned managed;
  PyObject* array;
} Export;

static void export_deleter(DLManagedTensorVersioned* m) {
  Export* e = (Export*)m->manager_ctx;
  PyGILState_STATE s = PyGILState_Ensure();
  Py_DECREF(e->array);
  PyMem_Free(e);
  PyGILState_Release(s);
}

static const char kVersioned[] = "dltensor_versioned";

static void capsule_destructor(PyObject* cap) {
  if (PyCapsule_GetName(cap) != kVersioned) return; /* a consumer renamed it */
  DLManagedTensorVersioned* t = (DLManagedTensorVersioned*)PyCapsule_GetContext(cap);
  if (t) t->deleter(t);
}

static PyObject* array_dlpack(FloorArray* a, PyObject* const* args, Py_ssize_t nargs,
                              PyObject* kwnames) {
  (void)args;
  (void)nargs;
  (void)kwnames; /* stream=None: nothing pending in a floor */
  Export* e = (Export*)PyMem_Malloc(sizeof(Export));
  if (!e) return PyErr_NoMemory();
  memset(e, 0, sizeof *e);
  e->managed.version.major = DLPACK_MAJOR_VERSION;
  e->managed.version.minor = DLPACK_MINOR_VERSION;
  e->managed.manager_ctx = e;
  e->managed.deleter = export_deleter;
  e->managed.flags = a->readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  DLTensor* t = &e->managed.dl_tensor;
  t->data = (void*)(uintptr_t)a->ptr;
  t->device.device_type = kDLCUDA;
  t->ndim = a->ndim;
  t->dtype.code = kDLFloat;
  t->dtype.bits = 32;
  t->dtype.lanes = 1;
  t->shape = a->shape;
  t->strides = a->elem_strides;
  e->array = (PyObject*)a;
  Py_INCREF(a);
  PyObject* cap = PyCapsule_New(&e->managed, kVersioned, capsule_destructor);
  if (!cap) {
    export_deleter(&e->managed);
    return NULL;
  }
  PyCapsule_SetContext(cap, &e->managed);
  return cap;
}

static PyObject* array_dlpack_device(FloorArray* a, PyObject* unused) {
  (void)a;
  (void)unused;
  return Py_BuildValue("(ii)", kDLCUDA, 0);
}

static PyGetSetDef array_getset[] = {
    {"__cuda_array_interface__", (getter)array_cai, NULL, NULL, NULL}, {NULL}};
static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"__dlpack_device__", (PyCFunction)array_dlpack_device, METH_NOARGS, NULL},
    {NULL}};

static PyTypeObject FloorArrayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_cai_bench_floor.Array",
    .tp_basicsize = sizeof(FloorArray),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = array_getset,
    .tp_methods = array_methods,
};

/* ---- CAI import: read the dict's plain values, check them, make an array ---------------- */
static int read_dims(PyObject* t, int64_t* out, int* n) {
  if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) > MAX_NDIM) return -1;
  *n = (int)PyTuple_GET_SIZE(t);
  for (int i = 0; i < *n; ++i) {
    out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if (out[i] < 0) return -1;
  }
  return 0;
}

static PyObject* import_dict(PyObject* d, PyObject* owner) {
  if (!PyDict_Check(d)) goto bad;
  PyObject *shape = NULL, *typestr = NULL, *data = NULL, *version = NULL, *strides = NULL,
           *stream = NULL, *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(d, &pos, &key, &value)) {
    if (key == k_shape)
      shape = value;
    else if (key == k_typestr)
      typestr = value;
    else if (key == k_data)
      data = value;
    else if (key == k_version)
      version = value;
    else if (key == k_strides)
      strides = value;
    else if (key == k_stream)
      stream = value;
  }
  if (!shape || !typestr || !data || !version) goto bad;
  FloorArray* a = new_array();
  if (!a) return NULL;
  if (read_dims(shape, a->shape, &a->ndim) != 0) goto bad_array;
  /* one dtype: float32, by the typestr's identity or text */
  if (typestr != k_f4 && (!PyUnicode_Check(typestr) || PyUnicode_Compare(typestr, k_f4) != 0))
    goto bad_array;
  if (!PyTuple_CheckExact(data) || PyTuple_GET_SIZE(data) != 2) goto bad_array;
  a->ptr = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(data, 0));
  a->readonly = PyTuple_GET_ITEM(data, 1) == Py_True;
  if (PyLong_AsLong(version) < 0) goto bad_array;
  int64_t step = 4;
  if (strides && strides != Py_None) {
    int n = 0;
    if (read_dims(strides, a->strides, &n) != 0 || n != a->ndim) goto bad_array;
  } else {
    for (int i = a->ndim - 1; i >= 0; --i) {
      a->strides[i] = step;
      step *= a->shape[i];
    }
  }
  for (int i = 0; i < a->ndim; ++i) a->elem_strides[i] = a->strides[i] / 4;
  if (stream && stream != Py_None) {
    a->stream = PyLong_AsUnsignedLongLong(stream);
    if (a->stream == 0) goto bad_array;
  }
  if (PyErr_Occurred()) goto bad_array;
  a->owner = owner;
  Py_XINCREF(owner);
  return (PyObject*)a;
bad_array:
  Py_DECREF(a);
bad:
  if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "not a float32 CAI dict");
  return NULL;
}

static PyObject* as_cuda_array(PyObject* self, PyObject* obj) {
  (void)self;
  if (Py_TYPE(obj) == &FloorArrayType) return Py_NewRef(obj);
  PyObject* d = PyObject_GetAttr(obj, k_cai);
  if (!d) return NULL;
  PyObject* a = import_dict(d, obj);
  Py_DECREF(d);
  return a;
}

/* ---- the caster: an argument's fields into a plain struct, for a bound function ---------- */
typedef struct {
  uint64_t data;
  int32_t ndim;
  const int64_t* shape;
  const int64_t* strides;
  int32_t readonly;
  PyObject* array;
} Info;

static int cast(PyObject* obj, Info* out) {
  PyObject* a = Py_TYPE(obj) == &FloorArrayType ? Py_NewRef(obj) : as_cuda_array(NULL, obj);
  if (!a) return -1;
  FloorArray* f = (FloorArray*)a;
  if (f->ndim != 2) {
    Py_DECREF(a);
    PyErr_SetString(PyExc_TypeError, "expected ndim 2");
    return -1;
  }
  out->data = f->ptr;
  out->ndim = f->ndim;
  out->shape = f->shape;
  out->strides = f->elem_strides;
  out->readonly = f->readonly;
  out->array = a;
  return 0;
}

static PyObject* noop0(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  Py_RETURN_NONE;
}

static PyObject* noop1(PyObject* self, PyObject* obj) {
  (void)self;
  Info info;
  if (cast(obj, &info) != 0) return NULL;
  Py_DECREF(info.array);
  Py_RETURN_NONE;
}

static PyObject* noop8(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  Info info[8];
  if (nargs != 8) return PyErr_Format(PyExc_TypeError, "noop8 takes 8 arrays");
  for (int i = 0; i < 8; ++i) {
    if (cast(args[i], &info[i]) != 0) {
      while (i-- > 0) Py_DECREF(info[i].array);
      return NULL;
    }
  }
  for (int i = 0; i < 8; ++i) Py_DECREF(info[i].array);
  Py_RETURN_NONE;
}

/* ---- DLPack import: a tensor taken over by an array --------------------------------------- */
static PyObject* wrap_tensor(DLManagedTensorVersioned* t) {
  FloorArray* a = new_array();
  if (!a) {
    t->deleter(t);
    return NULL;
  }
  a->tensor = t;
  const DLTensor* d = &t->dl_tensor;
  if (d->ndim < 0 || d->ndim > MAX_NDIM || d->dtype.code != kDLFloat || d->dtype.bits != 32) {
    Py_DECREF(a);
    PyErr_SetString(PyExc_BufferError, "not a float32 tensor");
    return NULL;
  }
  a->ndim = d->ndim;
  a->ptr = (uint64_t)(uintptr_t)d->data + d->byte_offset;
  a->readonly = (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  for (int i = 0; i < a->ndim; ++i) {
    a->shape[i] = d->shape[i];
    a->elem_strides[i] = d->strides ? d->strides[i] : 0;
    a->strides[i] = a->elem_strides[i] * 4;
  }
  return (PyObject*)a;
}

static PyObject* from_dlpack(PyObject* self, PyObject* obj) {
  (void)self;
  /* The type's C exchange table, when it has one. */
  PyObject* table = _PyType_Lookup(Py_TYPE(obj), k_exchange);
  if (table && PyCapsule_IsValid(table, "dlpack_exchange_api")) {
    const DLPackExchangeAPI* api =
        (const DLPackExchangeAPI*)PyCapsule_GetPointer(table, "dlpack_exchange_api");
    DLManagedTensorVersioned* t = NULL;
    if (api->managed_tensor_from_py_object_no_sync(obj, &t) != 0) return NULL;
    void* stream = NULL;
    if (api->current_work_stream(kDLCUDA, 0, &stream) != 0) {
      t->deleter(t);
      return NULL;
    }
    return wrap_tensor(t);
  }
  /* Else __dlpack_device__() and __dlpack__(stream=1, max_version=(1, 3)). */
  PyObject* dev =
      PyObject_VectorcallMethod(k_dlpack_device, &obj, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
  if (!dev) return NULL;
  Py_DECREF(dev);
  PyObject* one = PyLong_FromLong(1);
  PyObject* args[3] = {obj, one, v_version13};
  PyObject* cap = PyObject_VectorcallMethod(k_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            kw_stream_version);
  Py_DECREF(one);
  if (!cap) return NULL;
  DLManagedTensorVersioned* t =
      (DLManagedTensorVersioned*)PyCapsule_GetPointer(cap, "dltensor_versioned");
  if (!t || PyCapsule_SetName(cap, "used_dltensor_versioned") != 0) {
    Py_DECREF(cap);
    return NULL;
  }
  Py_DECREF(cap);
  return wrap_tensor(t);
}

static PyObject* array_of(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  /* array_of(ptr, rows, cols): a C-contiguous float32 array at ptr (the export rows' array). */
  (void)self;
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "array_of(ptr, rows, cols)");
  FloorArray* a = new_array();
  if (!a) return NULL;
  a->ptr = PyLong_AsUnsignedLongLong(args[0]);
  a->ndim = 2;
  a->readonly = 0;
  a->shape[0] = PyLong_AsLongLong(args[1]);
  a->shape[1] = PyLong_AsLongLong(args[2]);
  a->strides[1] = 4;
  a->strides[0] = 4 * a->shape[1];
  a->elem_strides[1] = 1;
  a->elem_strides[0] = a->shape[1];
  if (PyErr_Occurred()) {
    Py_DECREF(a);
    return NULL;
  }
  return (PyObject*)a;
}

static PyMethodDef methods[] = {
    {"as_cuda_array", as_cuda_array, METH_O, "The CAI import floor."},
    {"from_dlpack", from_dlpack, METH_O, "The DLPack import floor (exchange table or __dlpack__)."},
    {"noop0", noop0, METH_NOARGS, "The call floor."},
    {"noop1", noop1, METH_O, "The caster floor, one array."},
    {"noop8", (PyCFunction)(void (*)(void))noop8, METH_FASTCALL, "The caster floor, 8 arrays."},
    {"array_of", (PyCFunction)(void (*)(void))array_of, METH_FASTCALL, "A floor array."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cai_bench_floor",
                                    "The floors of bench/interop.py's rows.", -1, methods};

PyMODINIT_FUNC PyInit__cai_bench_floor(void) {
  if (PyType_Ready(&FloorArrayType) < 0) return NULL;
  k_shape = PyUnicode_InternFromString("shape");
  k_typestr = PyUnicode_InternFromString("typestr");
  k_data = PyUnicode_InternFromString("data");
  k_version = PyUnicode_InternFromString("version");
  k_strides = PyUnicode_InternFromString("strides");
  k_stream = PyUnicode_InternFromString("stream");
  k_cai = PyUnicode_InternFromString("__cuda_array_interface__");
  k_f4 = PyUnicode_InternFromString("<f4");
  k_dlpack = PyUnicode_InternFromString("__dlpack__");
  k_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  k_max_version = PyUnicode_InternFromString("max_version");
  k_exchange = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  kw_stream_version = PyTuple_Pack(2, k_stream, k_max_version);
  v_version13 = Py_BuildValue("(ii)", 1, 3);
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
  Py_INCREF(&FloorArrayType);
  PyModule_AddObject(m, "Array", (PyObject*)&FloorArrayType);
  return m;
}
