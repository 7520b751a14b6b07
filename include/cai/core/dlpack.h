/* The DLPack v1.3 C ABI, restated for cai. Type, field and enumerator names are the official
 * ones because they are the ABI. Plain C, only <stdint.h> and <stddef.h>.
 *
 * If the real <dlpack/dlpack.h> was included first, its definitions are used (they describe
 * the same ABI) and nothing here is redefined. If this header comes first it defines the real
 * header's include guard, so a later #include <dlpack/dlpack.h> is a no-op. */
#ifndef CAI_CORE_DLPACK_H_
#define CAI_CORE_DLPACK_H_

#if defined(DLPACK_DLPACK_H_) || defined(DLPACK_EXTERN_C) || defined(DLPACK_VERSION)

/* Someone else's copy of the header: make sure it knows everything we use. */
#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION != 1 || DLPACK_MINOR_VERSION < 3
#error "cai needs DLPack 1.3 or a later 1.x; an older <dlpack/dlpack.h> was included first"
#endif

#else /* our own definitions */

#define DLPACK_DLPACK_H_

#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif

/* Compatibility rule: a consumer that sees a different MAJOR version in
 * DLManagedTensorVersioned::version may only call the deleter; a different MINOR version only
 * adds enumerators, so the tensor is usable if every field value is understood. */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

#ifdef _WIN32
#ifdef DLPACK_EXPORTS
#define DLPACK_DLL __declspec(dllexport)
#else
#define DLPACK_DLL __declspec(dllimport)
#endif
#else
#define DLPACK_DLL
#endif

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version carried by every versioned tensor and by the exchange API table. */
typedef struct {
  uint32_t major; /**< changes when the memory layout changes */
  uint32_t minor; /**< changes when enumerators are added */
} DLPackVersion;

/* Where the memory lives. The numbers are fixed by the ABI. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,          /**< ordinary host memory */
  kDLCUDA = 2,         /**< CUDA device memory */
  kDLCUDAHost = 3,     /**< page-locked host memory from cudaMallocHost */
  kDLOpenCL = 4,       /**< OpenCL buffer */
  kDLVulkan = 7,       /**< Vulkan buffer */
  kDLMetal = 8,        /**< Apple Metal buffer */
  kDLVPI = 9,          /**< Verilog simulator buffer */
  kDLROCM = 10,        /**< AMD ROCm device memory */
  kDLROCMHost = 11,    /**< page-locked host memory from hipMallocHost */
  kDLExtDev = 12,      /**< reserved for experimental devices; meaning is local */
  kDLCUDAManaged = 13, /**< CUDA managed (unified) memory from cudaMallocManaged */
  kDLOneAPI = 14,      /**< oneAPI unified shared memory */
  kDLWebGPU = 15,      /**< WebGPU buffer */
  kDLHexagon = 16,     /**< Qualcomm Hexagon DSP */
  kDLMAIA = 17,        /**< Microsoft MAIA */
  kDLTrn = 18,         /**< AWS Trainium */
} DLDeviceType;

/* A device: its type and its ordinal. */
typedef struct {
  DLDeviceType device_type; /**< kind of memory */
  int32_t device_id;        /**< device ordinal; 0 for host, pinned and managed memory */
} DLDevice;

/* Type codes for DLDataType::code. */
typedef enum {
  kDLInt = 0U,                /**< signed two's-complement integer */
  kDLUInt = 1U,               /**< unsigned integer */
  kDLFloat = 2U,              /**< IEEE 754 binary floating point */
  kDLOpaqueHandle = 3U,       /**< opaque handle; only meaningful between agreeing parties */
  kDLBfloat = 4U,             /**< bfloat16 */
  kDLComplex = 5U,            /**< pair of floats (real, imag), bits counts both */
  kDLBool = 6U,               /**< boolean, stored in 8 bits by convention */
  kDLFloat8_e3m4 = 7U,        /**< 8-bit float, 3 exponent and 4 mantissa bits */
  kDLFloat8_e4m3 = 8U,        /**< 8-bit float, 4/3, IEEE-like with infinities */
  kDLFloat8_e4m3b11fnuz = 9U, /**< 8-bit float, 4/3, bias 11, finite, no negative zero */
  kDLFloat8_e4m3fn = 10U,     /**< 8-bit float, 4/3, finite only */
  kDLFloat8_e4m3fnuz = 11U,   /**< 8-bit float, 4/3, finite, no negative zero */
  kDLFloat8_e5m2 = 12U,       /**< 8-bit float, 5/2, IEEE-like */
  kDLFloat8_e5m2fnuz = 13U,   /**< 8-bit float, 5/2, finite, no negative zero */
  kDLFloat8_e8m0fnu = 14U,    /**< 8-bit exponent-only scale, finite, unsigned */
  kDLFloat6_e2m3fn = 15U,     /**< 6-bit float, 2/3; bits must be 6 */
  kDLFloat6_e3m2fn = 16U,     /**< 6-bit float, 3/2; bits must be 6 */
  kDLFloat4_e2m1fn = 17U,     /**< 4-bit float, 2/1; bits must be 4 */
} DLDataTypeCode;

/* Element type. Data are in native byte order; sub-byte types are packed little bit-endian
 * unless DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED is set. */
typedef struct {
  uint8_t code;   /**< a DLDataTypeCode value (kept to 8 bits for size) */
  uint8_t bits;   /**< bits per lane, e.g. 8, 16, 32 */
  uint16_t lanes; /**< vector lanes; 1 for scalars */
} DLDataType;

/* A strided view; owns nothing. */
typedef struct {
  void* data;           /**< base pointer (device pointer for GPU memory); NULL allowed if empty */
  DLDevice device;      /**< where data lives */
  int32_t ndim;         /**< number of dimensions */
  DLDataType dtype;     /**< element type */
  int64_t* shape;       /**< ndim extents; may be NULL when ndim == 0 */
  int64_t* strides;     /**< ndim strides in ELEMENTS; NULL meant row-major before v1.2 */
  uint64_t byte_offset; /**< bytes from data to the first element */
} DLTensor;

/* Legacy (unversioned) managed tensor, exchanged in capsules named "dltensor". */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;                            /**< the view */
  void* manager_ctx;                             /**< producer's private context; may be NULL */
  void (*deleter)(struct DLManagedTensor* self); /**< frees manager_ctx and self; may be NULL */
} DLManagedTensor;

/* Bits of DLManagedTensorVersioned::flags. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)              /* consumer must not write */
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)              /* producer made a copy */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2) /* sub-byte: 1 per byte */

/* Versioned managed tensor, exchanged in capsules named "dltensor_versioned". The fields up to
 * and including flags keep their layout across major versions so the deleter is always safe. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; /**< ABI version of this struct; check major before anything else */
  void* manager_ctx;     /**< producer's private context; may be NULL */
  void (*deleter)(struct DLManagedTensorVersioned* self); /**< frees ctx and self; may be NULL */
  uint64_t flags;     /**< DLPACK_FLAG_BITMASK_* bits; 0 by default */
  DLTensor dl_tensor; /**< the view */
} DLManagedTensorVersioned;

/* ---- C exchange API (type(x).__dlpack_c_exchange_api__, capsule "dlpack_exchange_api") ----
 * Python objects are passed as void* (a PyObject*) so the header needs no Python. No function
 * in the table synchronizes streams, and none may throw. */

/* Allocates a new tensor like `prototype` (dtype, ndim, shape, device used). Returns 0 on
 * success; on failure calls SetError(error_ctx, kind, message) and returns non-zero. */
typedef int (*DLPackManagedTensorAllocator)(DLTensor* prototype, DLManagedTensorVersioned** out,
                                            void* error_ctx,
                                            void (*SetError)(void* error_ctx, const char* kind,
                                                             const char* message));

/* Exports the Python object py_object to an owning tensor. 0 on success, -1 with a Python
 * exception set (BufferError if the data cannot be described). */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void* py_object,
                                                     DLManagedTensorVersioned** out);

/* Fills a caller-provided DLTensor that borrows from py_object until control returns to it.
 * 0 on success, -1 with a Python exception set. */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object, DLTensor* out);

/* Reports the producer's current work stream for a device (NULL for CPU is fine).
 * 0 on success, -1 with a Python exception set. */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void** out_current_stream);

/* Wraps an owning tensor (ownership is taken) into the producer's Python type.
 * 0 on success, -1 with a Python exception set. */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned* tensor,
                                                   void** out_py_object);

/* The part of the table that stays the same across versions. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version; /**< version of the table that follows; check major first */
  struct DLPackExchangeAPIHeader* prev_api; /**< an older-version table, or NULL */
} DLPackExchangeAPIHeader;

/* The table a producer type publishes; static, alive for the whole process. */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;                        /**< version and chain to older tables */
  DLPackManagedTensorAllocator managed_tensor_allocator; /**< never NULL */
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync; /**< never NULL */
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;     /**< never NULL */
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync; /**< NULL if unsupported */
  DLPackCurrentWorkStream current_work_stream;                      /**< never NULL */
} DLPackExchangeAPI;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* own definitions */

#endif /* CAI_CORE_DLPACK_H_ */
