#pragma once

// nanobind support for extension authors: take ANY GPU array (cai, CuPy, PyTorch, JAX, Numba,
// anything with __cuda_array_interface__ or DLPack) as a typed argument, order work on a stream
// with the CAI v3 rules, and hand your own buffers to Python. Header-only over the C API of
// cai/capi.h: the import, the checks, the streams and the backend are those of the `cai`
// package (one runtime per process), fetched on first use, so a module needs no init call and
// links no cai library, and may be built by another compiler than cai's.
//
//   #include <cai/nanobind/for_each.h>
//   struct Add {
//     CAI_HOST_DEVICE void operator()(const float& a, const float& b, float& out) const {
//       out = a + b;
//     }
//   };
//   using In = cai::nb::array<const float, 1>;
//   using Out = cai::nb::array<float, 1, cai::writable>;
//   m.def("add", [](In a, In b, Out out, cai::nb::stream s) { cai::nb::for_each(s, Add{}, a, b,
//   out); },
//         "a"_a, "b"_a, "out"_a, "stream"_a = nanobind::none());

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "cai/arrays/array_ref.h"
#include "cai/arrays/dlpack_type.h"
#include "cai/arrays/host_device.h"
#include "cai/capi.h"
#include "cai/nanobind/api.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)  // as nanobind's namespace (cai/nanobind/api.h)
#endif

namespace cai {

/// Constraint tags for cai::nb::array.
struct c_contig {};    ///< C-contiguous (row-major) layout required
struct f_contig {};    ///< F-contiguous (column-major) layout required
struct writable {};    ///< the data must not be read-only (the element type is then non-const)
struct allow_mask {};  ///< accept masked arrays (info().has_mask says whether there is one)

namespace nb {

namespace detail {

template <class Tag, class... Opts>
inline constexpr bool has_v = (std::is_same_v<Tag, Opts> || ...);

namespace nbd = ::nanobind::detail;

// "float32", "int64", "bool", "complex64", "bfloat16": NumPy's names, at compile time.
template <class T>
constexpr auto dtype_name() {
  constexpr DLDataType t = dlpack_type_of<T>();
  constexpr auto bits = nbd::const_name<static_cast<std::size_t>(t.bits)>();
  if constexpr (t.lanes != 1) {
    return nbd::const_name("dlpack(") + nbd::const_name<static_cast<std::size_t>(t.code)>() +
           nbd::const_name(", ") + bits + nbd::const_name(", ") +
           nbd::const_name<static_cast<std::size_t>(t.lanes)>() + nbd::const_name(")");
  } else if constexpr (t.code == kDLBool) {
    return nbd::const_name("bool");
  } else if constexpr (t.code == kDLInt) {
    return nbd::const_name("int") + bits;
  } else if constexpr (t.code == kDLUInt) {
    return nbd::const_name("uint") + bits;
  } else if constexpr (t.code == kDLFloat) {
    return nbd::const_name("float") + bits;
  } else if constexpr (t.code == kDLComplex) {
    return nbd::const_name("complex") + bits;
  } else if constexpr (t.code == kDLBfloat) {
    return nbd::const_name("bfloat") + bits;
  } else {
    return nbd::const_name("dlpack(") + nbd::const_name<static_cast<std::size_t>(t.code)>() +
           nbd::const_name(", ") + bits + nbd::const_name(")");
  }
}

inline CaiArrayInfo empty_info() noexcept {
  CaiArrayInfo info{};
  info.size = sizeof(CaiArrayInfo);
  return info;
}

}  // namespace detail

/// A GPU array argument: element type T, N dimensions, and constraints among c_contig,
/// f_contig, writable, allow_mask. Holds a reference to the imported array (and through it the
/// producer) for as long as it lives; ref() is the typed view to pass to a kernel.
template <class T, int N, class... Opts>
class array {
  static constexpr bool need_writable = detail::has_v<writable, Opts...>;
  static constexpr bool need_c = detail::has_v<c_contig, Opts...>;
  static constexpr bool need_f = detail::has_v<f_contig, Opts...>;
  static constexpr bool mask_ok = detail::has_v<allow_mask, Opts...>;
  static_assert(N >= 0, "cai::nb::array<T, N>: N is the number of dimensions.");
  static_assert(HasDLPackType<T>,
                "cai::nb::array<T, N>: T needs a DLPack type (bool, integers, floats, complex, "
                "__half, __nv_bfloat16, or a specialisation of cai::DLPackType<T>).");
  static_assert(((std::is_same_v<Opts, c_contig> || std::is_same_v<Opts, f_contig> ||
                  std::is_same_v<Opts, writable> || std::is_same_v<Opts, allow_mask>)&&...),
                "cai::nb::array: constraints must be among cai::c_contig, cai::f_contig, "
                "cai::writable and cai::allow_mask.");
  static_assert(!(need_c && need_f && N > 1),
                "cai::nb::array: an array of more than one dimension cannot be required to be "
                "both C- and F-contiguous; keep one of cai::c_contig and cai::f_contig.");
  static_assert(!(need_writable && std::is_const_v<T>),
                "cai::nb::array: cai::writable asks for a non-const element type; drop the "
                "const, or drop cai::writable to accept read-only arrays.");

 public:
  using element_type = std::conditional_t<need_writable, T, const std::remove_const_t<T>>;
  static constexpr int ndim = N;
  /// Whether the work on this array writes it (for_each's race-detector declaration).
  static constexpr bool is_writable = need_writable;

  /// What the C API checks (cai/capi.h), built at compile time.
  static constexpr CaiArrayRequest request{
      sizeof(CaiArrayRequest),
      N,
      dlpack_type_of<std::remove_const_t<T>>(),
      (need_writable ? CAI_REQUIRE_WRITABLE : 0u) | (need_c ? CAI_REQUIRE_C_CONTIG : 0u) |
          (need_f ? CAI_REQUIRE_F_CONTIG : 0u) | (mask_ok ? CAI_ALLOW_MASK : 0u),
      static_cast<std::int64_t>(sizeof(T)),
      static_cast<std::int64_t>(alignof(T))};

  /// "float32, ndim=2, c_contig, writable": what the argument must be.
  static constexpr auto spec = detail::dtype_name<std::remove_const_t<T>>() +
                               detail::nbd::const_name(", ndim=") +
                               detail::nbd::const_name<static_cast<std::size_t>(N)>() +
                               detail::nbd::const_name<need_c>(", c_contig", "") +
                               detail::nbd::const_name<need_f>(", f_contig", "") +
                               detail::nbd::const_name<need_writable>(", writable", "") +
                               detail::nbd::const_name<mask_ok>(", allow_mask", "");
  /// "cai.array[float32, ndim=2, c_contig, writable]": the Python-side name, in messages.
  static constexpr auto name =
      detail::nbd::const_name("cai.array[") + spec + detail::nbd::const_name("]");
  static const char* signature() noexcept { return name.text; }
  /// 'cai.array[typing.Literal["float32, ndim=2, c_contig, writable"]]': the annotation in
  /// signatures and stubs, valid Python that type checkers read (cai.array in cai/typing.py
  /// takes any GPU array; the spec keeps overloads of different dtypes apart).
  static constexpr auto annotation = detail::nbd::const_name("cai.array[typing.Literal[\"") + spec +
                                     detail::nbd::const_name("\"]]");

  array() noexcept = default;
  /// Imports `obj` for this signature; a GPU array that does not fit is a TypeError that says
  /// why, anything else the import's own exception (both as nanobind::python_error).
  explicit array(::nanobind::handle obj) {
    if (import_from(obj.ptr(), 0) != 0) throw ::nanobind::python_error();
  }
  array(const array& other) noexcept : info_(other.info_), ref_(other.ref_) {
    if (info_.array) detail::api_or_null()->retain_array(info_.array);
  }
  array(array&& other) noexcept : info_(other.info_), ref_(other.ref_) {
    other.info_.array = nullptr;
  }
  array& operator=(array other) noexcept {
    std::swap(info_, other.info_);
    std::swap(ref_, other.ref_);
    return *this;
  }
  ~array() {
    if (info_.array) detail::api_or_null()->release_array(info_.array);
  }

  /// The typed view for kernels (trivially copyable; pass it by value).
  ArrayRef<element_type, N> ref() const noexcept { return ref_; }
  element_type* data() const noexcept { return ref_.data(); }
  std::int64_t shape(int i) const noexcept { return ref_.shape(i); }
  std::int64_t stride(int i) const noexcept { return ref_.stride(i); }  ///< elements
  std::int64_t size() const noexcept { return ref_.size(); }
  bool readonly() const noexcept { return info_.readonly != 0; }
  bool has_mask() const noexcept { return info_.has_mask != 0; }
  /// The plain view as imported: byte strides, dtype, typestr, the stream at import time.
  const CaiArrayInfo& info() const noexcept { return info_; }
  /// The runtime's handle (for the C API); null for a default-constructed array.
  CaiArray* handle() const noexcept { return info_.array; }
  explicit operator bool() const noexcept { return info_.array != nullptr; }

  /// Imports `obj`: 0 when it fits; 1 when it is a GPU array that does not (a TypeError set,
  /// unless `options` has CAI_IMPORT_QUIET); -1 when it cannot be imported (exception set).
  int import_from(PyObject* obj, std::uint32_t options) noexcept {
    const CaiCApi* api = detail::api_or_null();
    if (!api) return -1;
    cai::detail::ExtentArray<N> strides;
    if (!info_.array) {  // the caster's case: the table fills info_ in place (only on success)
      const int rc = api->import_array(obj, &request, signature(), options, &info_, strides);
      if (rc == 0) set_ref(strides);
      return rc;
    }
    CaiArrayInfo info = detail::empty_info();
    const int rc = api->import_array(obj, &request, signature(), options, &info, strides);
    if (rc == 0) adopt(info, strides);
    return rc;
  }

  /// Takes over `info.array` (a reference from the C API that fits this signature) with its
  /// element strides.
  void adopt(const CaiArrayInfo& info, const std::int64_t* element_strides) noexcept {
    if (info_.array) detail::api_or_null()->release_array(info_.array);  // info holds its own
    info_ = info;
    set_ref(element_strides);
  }

 private:
  void set_ref(const std::int64_t* element_strides) noexcept {
    auto* data = reinterpret_cast<element_type*>(static_cast<std::uintptr_t>(info_.data));
    if constexpr (N == 0) {
      ref_ = ArrayRef<element_type, 0>(data);
    } else {
      cai::detail::ExtentArray<N> shape, strides;
      for (int k = 0; k < N; ++k) {
        shape[k] = info_.shape[k];
        strides[k] = element_strides[k];
      }
      ref_ = ArrayRef<element_type, N>(data, shape, strides);
    }
  }

  CaiArrayInfo info_ = detail::empty_info();
  ArrayRef<element_type, N> ref_{};
};

/// A `stream=` argument: a cai.Stream, an int handle, None or 0 (cai's default stream), or any
/// object with __cuda_stream__ (cuda.core, CuPy, PyTorch streams). Keeps the stream's owner.
class stream {
 public:
  /// cai's default stream (the legacy default stream, handle 1).
  stream() noexcept = default;
  /// A CAI stream handle (1 legacy default, 2 per-thread default, else a CUstream), and what
  /// keeps it alive.
  explicit stream(std::uint64_t handle, ::nanobind::object owner = {}) noexcept
      : handle_(handle), owner_(std::move(owner)) {}
  /// No stream: for make_array(), memory with no pending work.
  static stream none() noexcept { return stream(0); }

  /// The CAI handle, which CUDA's runtime API takes as a cudaStream_t as it is.
  std::uint64_t handle() const noexcept { return handle_; }
  CaiStream c_stream() const noexcept { return {handle_, owner_.ptr()}; }

 private:
  std::uint64_t handle_ = 1;
  ::nanobind::object owner_;
};

/// Orders work on a stream against the arrays it touches, with the CAI v3 rules (in cai._cai):
/// on construction the stream waits (event, no host block) for each array's stream; finish()
/// (or the destructor) makes each array's stream wait for the work enqueued in between.
class stream_order {
 public:
  template <class... Arrays>
  explicit stream_order(const stream& s, const Arrays&... arrays) {
    CaiArray* handles[sizeof...(Arrays) > 0 ? sizeof...(Arrays) : 1] = {arrays.handle()...};
    const CaiStream work = s.c_stream();
    detail::check(detail::api().order_begin(&work, handles, sizeof...(Arrays), &order_));
  }
  stream_order(const stream_order&) = delete;
  stream_order& operator=(const stream_order&) = delete;
  /// Call after enqueueing the work; reports failures (the destructor cannot).
  void finish() {
    if (CaiOrder* order = std::exchange(order_, nullptr))
      detail::check(detail::api_or_null()->order_end(order));
  }
  ~stream_order() {
    if (CaiOrder* order = std::exchange(order_, nullptr)) {
      if (detail::api_or_null()->order_end(order) != 0) PyErr_Clear();  // call finish() to see it
    }
  }

 private:
  CaiOrder* order_ = nullptr;
};

namespace detail {

inline ::nanobind::object wrap_memory(CaiMemory& m) {
  PyObject* out = api().wrap_memory(&m);
  if (!out) throw ::nanobind::python_error();
  return ::nanobind::steal(out);
}

inline CaiMemory memory(std::uint64_t ptr, DLDataType dtype, std::span<const std::int64_t> shape,
                        std::span<const std::int64_t> byte_strides, const stream& pending,
                        bool readonly) noexcept {
  CaiMemory m{};
  m.size = sizeof(CaiMemory);
  m.ndim = static_cast<std::int32_t>(shape.size());
  m.data = ptr;
  m.shape = shape.data();
  m.strides = byte_strides.empty() ? nullptr : byte_strides.data();
  m.dtype = dtype;
  m.readonly = readonly ? 1 : 0;
  m.stream = pending.c_stream();
  return m;
}

}  // namespace detail

/// Producer helper: your own device memory as a cai.DeviceNDArray, which exports both the CAI
/// (v3, with `pending`, the stream of your pending work: stream::none() for none) and DLPack.
/// `byte_strides` empty means C-contiguous; `owner` is kept alive while any view exists.
inline ::nanobind::object make_array(std::uint64_t ptr, DLDataType dtype,
                                     std::span<const std::int64_t> shape,
                                     std::span<const std::int64_t> byte_strides,
                                     const stream& pending, ::nanobind::handle owner,
                                     bool readonly = false) {
  CaiMemory m = detail::memory(ptr, dtype, shape, byte_strides, pending, readonly);
  m.owner = owner.ptr();
  return detail::wrap_memory(m);
}

/// The same with a C++ owner, released (from any thread, maybe without the GIL) when the last
/// view goes away.
inline ::nanobind::object make_array(std::uint64_t ptr, DLDataType dtype,
                                     std::span<const std::int64_t> shape,
                                     std::span<const std::int64_t> byte_strides,
                                     const stream& pending, std::shared_ptr<const void> owner,
                                     bool readonly = false) {
  CaiMemory m = detail::memory(ptr, dtype, shape, byte_strides, pending, readonly);
  m.context = new std::shared_ptr<const void>(std::move(owner));
  m.release_context = [](void* context) {
    delete static_cast<std::shared_ptr<const void>*>(context);
  };
  return detail::wrap_memory(m);
}

/// A new uninitialized array of cai's runtime whose stream is `s`, as a writable argument type
/// (returning it from a bound function hands it to Python as a cai.DeviceNDArray).
template <class T, int N>
array<std::remove_const_t<T>, N, writable> empty(const std::array<std::int64_t, N>& shape,
                                                 const stream& s = stream(),
                                                 bool fortran_order = false) {
  using Result = array<std::remove_const_t<T>, N, writable>;
  CaiArraySpec spec{};
  spec.size = sizeof(CaiArraySpec);
  spec.ndim = N;
  spec.shape = shape.data();
  spec.dtype = dlpack_type_of<std::remove_const_t<T>>();
  spec.fortran_order = fortran_order ? 1 : 0;
  spec.stream = s.c_stream();
  CaiArrayInfo info = detail::empty_info();
  cai::detail::ExtentArray<N> strides{};
  detail::check(detail::api().new_array(&spec, &info, strides));
  Result out;
  out.adopt(info, strides);
  return out;
}

}  // namespace nb
}  // namespace cai

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

namespace nanobind::detail {

template <class T, int N, class... Opts>
struct type_caster<cai::nb::array<T, N, Opts...>> {
  using Value = cai::nb::array<T, N, Opts...>;
  static constexpr auto Name = Value::annotation;
  template <typename T_>
  using Cast = movable_cast_t<T_>;
  template <typename T_>
  static constexpr bool can_cast() {
    return true;
  }

  // First pass (no conversions): only arrays that fit, so that another overload can take the
  // rest; no message is built. Second pass: a GPU array that breaks a constraint is taken, and
  // the cast below raises the TypeError that says which one.
  bool from_python(handle src, uint8_t flags, cleanup_list*) noexcept {
    const bool convert = (flags & static_cast<uint8_t>(cast_flags::convert)) != 0;
    const int rc = value.import_from(src.ptr(), convert ? 0u : CAI_IMPORT_QUIET);
    if (rc == 0) return true;
    if (rc == 1 && convert) {
      failure.emplace();  // takes the TypeError
      return true;
    }
    PyErr_Clear();
    return false;
  }

  static handle from_cpp(const Value& v, rv_policy, cleanup_list*) noexcept {
    if (!v.handle()) {
      PyErr_SetString(PyExc_TypeError, "cai::nb::array: cannot return an empty array");
      return handle();
    }
    return cai::nb::detail::api_or_null()->array_to_python(v.handle());
  }

  explicit operator Value*() { return &checked(); }
  explicit operator Value&() { return checked(); }
  explicit operator Value&&() { return std::move(checked()); }

  Value value;
  std::optional<python_error> failure;

 private:
  Value& checked() {
    if (failure) throw *failure;
    return value;
  }
};

template <>
struct type_caster<cai::nb::stream> {
  // None is accepted where the argument is declared so (`= nb::none()`, `.none()`), and
  // nanobind then adds "| None" to the signature itself.
  NB_TYPE_CASTER(cai::nb::stream, const_name("cai.typing.StreamLike"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    const CaiCApi* api = cai::nb::detail::api_or_null();
    CaiStream s{0, nullptr};
    if (!api || api->read_stream(src.ptr(), "stream=", &s) != 0) {
      PyErr_Clear();
      return false;
    }
    value = cai::nb::stream(s.handle, steal(s.owner));
    return true;
  }

  static handle from_cpp(const cai::nb::stream& s, rv_policy, cleanup_list*) noexcept {
    return PyLong_FromUnsignedLongLong(s.handle());
  }
};

}  // namespace nanobind::detail
