/* The cai C API: one table of plain C functions through which extension modules use the one
 * cai runtime of the process (backend, simulator and race detector, CAI v3 stream ordering,
 * exit handling), all of which live only in the extension cai._cai. It is published as the
 * capsule "cai._cai._C_API" (NumPy's C-API pattern). Only C types cross it: no C++ objects,
 * no compiler or standard-library ABI, nothing nanobind-typed, so a module built by another
 * compiler than cai's works (the Python version must match, as for any extension).
 *
 * C++ extension authors use the header-only layer in cai/nanobind/ instead of this header.
 * C code fetches the table with cai_capi_import() (below) once, with the GIL held.
 *
 * Conventions:
 *  - Every function is called with the GIL held, except where its comment says otherwise.
 *  - Functions that return int return 0 on success and -1 with a Python exception set (a
 *    TypeError, ValueError, cai.RaceError, ... as cai itself would raise) on failure.
 *  - Structs passed in or out start with `size` = sizeof(struct) as the caller knows it, so
 *    fields can be appended: the callee reads and writes only what the given size covers.
 *
 * Compatibility rule: CAI_CAPI_VERSION grows by one whenever functions or fields are
 * appended; nothing is ever removed, reordered or changed in meaning. A module built against
 * version V runs with any cai._cai whose table has version >= V (check `version`, or
 * `size` > offsetof(CaiCApi, function) for one function). An incompatible change would
 * publish a capsule under a new name. */
#ifndef CAI_CAPI_H_
#define CAI_CAPI_H_

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#include "cai/core/dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAI_CAPI_CAPSULE "cai._cai._C_API"
#define CAI_CAPI_VERSION 2

/** An array of the runtime (a cai.DeviceNDArray): reference counted, released with
 *  CaiCApi::release_array. Opaque. */
typedef struct CaiArray CaiArray;

/** Stream ordering in progress, from CaiCApi::order_begin to CaiCApi::order_end. Opaque. */
typedef struct CaiOrder CaiOrder;

/** A stream as the CUDA Array Interface writes it: 1 is the legacy default stream, 2 the
 *  per-thread default stream, any other value a CUstream; 0 is never a stream. */
typedef struct CaiStream {
  uint64_t handle;
  PyObject* owner; /**< keeps the stream alive, or NULL (default streams, raw handles) */
} CaiStream;

/** What a typed argument asks of an array (flags below). */
typedef struct CaiArrayRequest {
  uint32_t size;     /**< sizeof(CaiArrayRequest) */
  int32_t ndim;      /**< the rank; -1 accepts any */
  DLDataType dtype;  /**< the element type (native byte order) */
  uint32_t flags;    /**< CAI_REQUIRE_* and CAI_ALLOW_MASK */
  int64_t item_size; /**< sizeof the element type; must match dtype */
  int64_t alignment; /**< alignof the element type; checked for non-empty arrays */
} CaiArrayRequest;

#define CAI_REQUIRE_WRITABLE 1u /**< refuse read-only arrays */
#define CAI_REQUIRE_C_CONTIG 2u /**< require NumPy's C-contiguity */
#define CAI_REQUIRE_F_CONTIG 4u /**< require NumPy's F-contiguity */
#define CAI_ALLOW_MASK 8u       /**< accept masked arrays (the mask is not part of the view) */

#define CAI_IMPORT_QUIET 1u /**< import_array: no message for an array that does not fit */

/** One array as a plain view. The pointers belong to `array` and live as long as it does. */
typedef struct CaiArrayInfo {
  uint32_t size;          /**< sizeof(CaiArrayInfo), set by the caller */
  int32_t ndim;           /**< number of dimensions */
  uint64_t data;          /**< address of element (0, ..., 0); 0 for an empty array */
  const int64_t* shape;   /**< ndim extents */
  const int64_t* strides; /**< ndim strides in BYTES */
  DLDataType dtype;       /**< the element type; lanes 0 when DLPack has none (see typestr) */
  int32_t readonly;       /**< 1 when the producer exported data=(ptr, True) */
  int64_t itemsize;       /**< bytes per element */
  uint64_t stream;        /**< the CAI stream of the pending work on the data; 0: none */
  int32_t has_mask;       /**< 1 when the array carries a CAI mask */
  char typestr[24];       /**< NumPy's dtype.str ("<f4", "|V12"), for messages */
  CaiArray* array;        /**< a new reference: release it with release_array */
} CaiArrayInfo;

/** A new array of the runtime (CaiCApi::new_array). */
typedef struct CaiArraySpec {
  uint32_t size;         /**< sizeof(CaiArraySpec) */
  int32_t ndim;          /**< number of dimensions */
  const int64_t* shape;  /**< ndim extents */
  DLDataType dtype;      /**< the element type */
  int32_t fortran_order; /**< 1: column-major; 0: row-major */
  CaiStream stream;      /**< becomes the array's stream (handle 0: cai's default stream) */
} CaiArraySpec;

/** Memory the caller owns, to hand to Python as a cai.DeviceNDArray (CaiCApi::wrap_memory). */
typedef struct CaiMemory {
  uint32_t size;          /**< sizeof(CaiMemory) */
  int32_t ndim;           /**< number of dimensions */
  uint64_t data;          /**< device address of element (0, ..., 0) */
  const int64_t* shape;   /**< ndim extents (copied) */
  const int64_t* strides; /**< ndim byte strides (copied), or NULL for C-contiguous */
  DLDataType dtype;       /**< the element type, unless typestr is set */
  const char* typestr;    /**< a NumPy typestr ("<f4", "|V12"), or NULL to use dtype */
  int32_t readonly;       /**< 1: consumers must not write */
  CaiStream stream;       /**< where pending work on the memory is; handle 0: none */
  PyObject* owner;        /**< kept alive while any view of the memory exists, or NULL */
  void* context;          /**< passed to release_context, or NULL */
  /** Called once when the last view goes away (from any thread, maybe without the GIL). */
  void (*release_context)(void* context);
} CaiMemory;

/** Work for the simulator's stream, run like a kernel (CaiCApi::enqueue_host_task). */
typedef struct CaiHostTask {
  uint32_t size;    /**< sizeof(CaiHostTask) */
  const char* name; /**< for race reports (copied) */
  void* context;    /**< passed to run_at and destroy */
  /** Unused since version 2 (device memory is not readable at its device address); NULL. */
  const char* (*run)(void* context);
  /** Called once, after run_at or instead of it (from any thread, maybe without the GIL). */
  void (*destroy)(void* context);
  /* ---- version 2 ---- */
  /** Runs on a simulator thread without the GIL, with data[i] the address at which the host
   *  reaches the element at index 0 of arrays[i] (the simulator keeps device memory
   *  unreadable at its device address, as a GPU does); returns NULL, or an error message that
   *  lives until destroy (reported by the next synchronize, as a failed kernel would be). */
  const char* (*run_at)(void* context, const uint64_t* data);
} CaiHostTask;

#define CAI_BACKEND_SIMULATOR 1 /**< the CPU simulator (CAI_BACKEND=sim, or no GPU) */
#define CAI_BACKEND_CUDA 2      /**< the CUDA driver; kernels use the primary contexts */

/** cai::Errc, for set_error: which Python exception a cai error is. */
#define CAI_ERROR_TYPE 0
#define CAI_ERROR_VALUE 1
#define CAI_ERROR_INDEX 2
#define CAI_ERROR_OVERFLOW 3
#define CAI_ERROR_NOT_IMPLEMENTED 4
#define CAI_ERROR_BUFFER 5
#define CAI_ERROR_DEVICE 6
#define CAI_ERROR_RACE 7

/* The table's function slots, in table order: X(return type, name, (parameters), version the
 * slot came with). APPEND ONLY: a new function goes at the end of this list with the next
 * CAI_CAPI_VERSION; no slot is ever removed, reordered or changed in meaning. Extension modules
 * (built by any compiler) call through the slots by position, so the order is the ABI
 * (tests/python/test_capi_layout.py checks each offset). cai._cai fills slot NAME with its
 * function capi_NAME (python/_cai/capi.cpp). */
#define CAI_CAPI_SLOTS(X)                                                                       \
  /** Imports `obj` (anything with __cuda_array_interface__ or DLPack; cai arrays as they are)  \
   *  with the CAI v3 import rules, and checks it against `request` (NULL: no check) with the   \
   *  typed-view rule of docs/cpp-typed-view.md; `entry` starts the messages. Returns 0 and     \
   *  fills `out` (and the request->ndim `element_strides`, if not NULL) when it fits; 1 when   \
   *  obj is a GPU array that does not fit, or (with a request) a host array, with a TypeError   \
   *  set that says why (none with CAI_IMPORT_QUIET in `options`); -1 with the exception set    \
   *  when obj cannot be imported.                                                              \
   *  Allocation-free for a cai array that fits. */                                             \
  X(int, import_array,                                                                          \
    (PyObject * obj, const CaiArrayRequest* request, const char* entry, uint32_t options,       \
     CaiArrayInfo* out, int64_t* element_strides),                                              \
    1)                                                                                          \
  /** Another reference to `array`. Any thread; takes the GIL itself. */                        \
  X(void, retain_array, (CaiArray * array), 1)                                                  \
  /** Drops a reference (NULL is ignored). Any thread; takes the GIL itself; does nothing once  \
   *  the interpreter is finalizing. */                                                         \
  X(void, release_array, (CaiArray * array), 1)                                                 \
  /** The cai.DeviceNDArray of `array`: a new reference, or NULL with an exception. */          \
  X(PyObject*, array_to_python, (CaiArray * array), 1)                                          \
  /** Where the array's memory is (a pointer query: about 1 us on a GPU, asked once). */        \
  X(int, array_device, (CaiArray * array, DLDevice * out), 1)                                   \
  /** A new uninitialized array of the runtime; `out` and `element_strides` (may be NULL) as    \
   *  import_array gives them. */                                                               \
  X(int, new_array, (const CaiArraySpec* spec, CaiArrayInfo* out, int64_t* element_strides), 1) \
  /** Memory the caller owns as a new cai.DeviceNDArray (a new reference), which exports the    \
   *  CAI (v3, with the stream) and DLPack; NULL with an exception on failure, in which case    \
   *  release_context has been called. */                                                       \
  X(PyObject*, wrap_memory, (const CaiMemory* memory), 1)                                       \
  /** Reads a `stream=` argument as cai does: a cai.Stream, an int handle, None or 0 (cai's     \
   *  default stream), or an object with __cuda_stream__. out->owner is a new reference or      \
   *  NULL. */                                                                                  \
  X(int, read_stream, (PyObject * obj, const char* entry, CaiStream* out), 1)                   \
  /** CAI v3 ordering of work on `work` against `arrays` (include/cai/sync/ordering.h): the     \
   *  work stream waits now, with events, for each array's stream (no host block). Since        \
   *  version 2 it also checks that a kernel can use the arrays (device memory of one device,   \
   *  or pinned or managed memory, each inside a live allocation: a ValueError or               \
   *  cai.DeviceError otherwise) and makes their device current until order_end, so that a      \
   *  kernel launched in between runs there. Enqueue the work, then call order_end. */          \
  X(int, order_begin,                                                                           \
    (const CaiStream* work, CaiArray* const* arrays, size_t count, CaiOrder** out), 1)          \
  /** After the work is enqueued: each array's stream waits for it; arrays without a stream     \
   *  adopt the work stream; the previous current device is restored. Frees `order` whatever    \
   *  happens (NULL is ignored). Call it on the thread that called order_begin. */              \
  X(int, order_end, (CaiOrder * order), 1)                                                      \
  /** The process's backend, chosen on first use: CAI_BACKEND_SIMULATOR or CAI_BACKEND_CUDA. */ \
  X(int, backend_kind, (int32_t * out), 1)                                                      \
  /** cai's current device ordinal (kernels of the CUDA backend run in its primary context). */ \
  X(int, current_device, (int32_t * out), 1)                                                    \
  /** Simulator only: enqueues `task` on `stream` as an operation that reads the arrays whose   \
   *  `writes` entry is 0 and writes the others, so that the race detector checks it like a     \
   *  kernel. Like a kernel it does not keep the arrays alive (cai's frees wait for pending     \
   *  work). task->destroy is called even when this fails. Needs task->size to cover run_at     \
   *  (a module built against version 1 is refused: rebuild it). */                             \
  X(int, enqueue_host_task,                                                                     \
    (const CaiStream* stream, CaiArray* const* arrays, const uint8_t* writes, size_t count,     \
     const CaiHostTask* task),                                                                  \
    1)                                                                                          \
  /** Sets the Python exception cai raises for a cai::Errc `code` (CAI_ERROR_*). */             \
  X(void, set_error, (int32_t code, const char* message), 1)

typedef struct CaiCApi {
  uint32_t version;        /**< CAI_CAPI_VERSION of cai._cai */
  uint32_t size;           /**< sizeof(CaiCApi) in cai._cai */
  const char* cai_version; /**< the cai package's version, "MAJOR.MINOR.PATCH" */
#define CAI_CAPI_SLOT_FIELD(ret, name, params, since) ret(*name) params;
  CAI_CAPI_SLOTS(CAI_CAPI_SLOT_FIELD)
#undef CAI_CAPI_SLOT_FIELD
} CaiCApi;

/** The table, importing cai on first use; NULL with an ImportError set when cai is missing or
 *  older than this header. Call with the GIL held. */
static inline const CaiCApi* cai_capi_import(void) {
  PyObject* cai = PyImport_ImportModule("cai"); /* registers cai's exit handling */
  if (!cai) return NULL;
  Py_DECREF(cai);
  const CaiCApi* api = (const CaiCApi*)PyCapsule_Import(CAI_CAPI_CAPSULE, 0);
  if (!api) return NULL;
  if (api->version < CAI_CAPI_VERSION) {
    PyErr_Format(PyExc_ImportError,
                 "cai C API: this module needs version %d of the table, but the installed cai "
                 "%s has version %u; upgrade cai",
                 CAI_CAPI_VERSION, api->cai_version, (unsigned)api->version);
    return NULL;
  }
  return api;
}

#ifdef __cplusplus
}
#endif

#endif /* CAI_CAPI_H_ */
