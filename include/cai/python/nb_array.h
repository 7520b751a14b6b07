#pragma once

// nanobind support for extension authors: take ANY GPU array (cai, CuPy, PyTorch, JAX, Numba,
// anything with __cuda_array_interface__ or DLPack) as a typed argument, order your kernel on a
// stream with the CAI v3 rules, and hand your own buffers to Python.
//
//   #include <cai/python/nb_array.h>
//   using Vec = cai::nb::array<const float, 1>;
//   using Out = cai::nb::array<float, 1, cai::c_contig, cai::writable>;
//   m.def("add", [](Vec a, Vec b, Out out, cai::nb::stream s) {
//     cai::nb::stream_order order(s, a, b, out);  // waits before, marks after (events)
//     launch_add(a.ref(), b.ref(), out.ref(), s.handle());
//   }, "a"_a, "b"_a, "out"_a, "stream"_a = nanobind::none());
//
// Arguments are imported by the `cai` package's own code (cai/python/capi.h), so the import
// rules, the backend and the simulator are the same as cai's in Python.

#include <nanobind/nanobind.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "cai/arrays/array_ref.h"
#include "cai/python/capi.h"
#include "cai/sync/ordering.h"

namespace cai {

/// Constraint tags for cai::nb::array.
struct c_contig {};    ///< C-contiguous (row-major) layout required
struct f_contig {};    ///< F-contiguous (column-major) layout required
struct writable {};    ///< the data must not be read-only (the element type is then non-const)
struct allow_mask {};  ///< accept masked arrays (the mask stays reachable through view().mask())

namespace nb {

namespace detail {
template <class Tag, class... Opts>
inline constexpr bool has_v = (std::is_same_v<Tag, Opts> || ...);

inline std::string shape_text(std::span<const std::int64_t> s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}
}  // namespace detail

/// A GPU array argument: element type T, N dimensions, and constraints among c_contig,
/// f_contig, writable, allow_mask. Holds the imported View (and through it the producer) for as
/// long as it lives; ref() is the typed view to pass to a kernel.
template <class T, int N, class... Opts>
class array {
  static constexpr bool need_writable = detail::has_v<writable, Opts...>;
  static constexpr bool need_c = detail::has_v<c_contig, Opts...>;
  static constexpr bool need_f = detail::has_v<f_contig, Opts...>;
  static constexpr bool mask_ok = detail::has_v<allow_mask, Opts...>;
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

  array() = default;
  /// Checks the constraints; throws cai::Error(type_error) saying which one failed.
  explicit array(View v) {
    if (!fits(v)) throw_error(Errc::type_error, rejection(v));
    adopt(std::move(v));
  }

  /// Whether `v` fits this signature. Cheap and allocation-free: it runs for every argument of
  /// every call; the message (rejection) is built only when it does not fit.
  static bool fits(const View& v) noexcept {
    if (!(v.dtype() == dtype_of<std::remove_const_t<T>>()) || v.ndim() != N) return false;
    if (need_writable && v.readonly()) return false;
    if (need_c && !v.layout().is_c_contiguous()) return false;
    if (need_f && !v.layout().is_f_contiguous()) return false;
    if (v.mask() && !mask_ok) return false;
    if (v.size() != 0 && v.ptr() % alignof(element_type) != 0) return false;
    for (int k = 0; k < N; ++k)
      if (v.shape()[k] > 1 && v.strides()[k] % static_cast<std::int64_t>(sizeof(T)) != 0)
        return false;
    return true;
  }

  /// Takes a View that fits() without checking again.
  void adopt(View&& v) {
    auto* data = reinterpret_cast<element_type*>(static_cast<std::uintptr_t>(v.ptr()));
    if constexpr (N == 0) {
      ref_ = ArrayRef<element_type, 0>(data);
    } else {
      cai::detail::ExtentArray<N> shape{}, strides{};
      for (int k = 0; k < N; ++k) {
        shape[k] = v.shape()[k];
        // Axes of extent 0 or 1 may carry any stride; no address depends on it.
        strides[k] = v.shape()[k] > 1 ? v.strides()[k] / static_cast<std::int64_t>(sizeof(T)) : 0;
      }
      ref_ = ArrayRef<element_type, N>(data, shape, strides);
    }
    view_ = std::move(v);
  }

  /// Why `v` does not fit this signature, or "" when it does.
  static std::string rejection(const View& v) {
    if (fits(v)) return {};
    const std::string sig = signature();
    const DType& want = dtype_of<std::remove_const_t<T>>();
    if (!(v.dtype() == want))
      return sig + ": dtype is '" + v.dtype().str() + "', expected '" + want.str() + "'";
    if (v.ndim() != N)
      return sig + ": ndim is " + std::to_string(v.ndim()) + " (shape " +
             detail::shape_text(v.shape()) + "), expected " + std::to_string(N);
    if (need_writable && v.readonly())
      return sig +
             ": the array is read-only (its producer exported data=(ptr, True)), but the "
             "argument is cai::writable";
    if (need_c && !v.layout().is_c_contiguous())
      return sig + ": the array is not C-contiguous (strides " + detail::shape_text(v.strides()) +
             " bytes), but the argument is cai::c_contig";
    if (need_f && !v.layout().is_f_contiguous())
      return sig + ": the array is not F-contiguous (strides " + detail::shape_text(v.strides()) +
             " bytes), but the argument is cai::f_contig";
    if (v.mask() && !mask_ok)
      return sig + ": the array has a mask; add cai::allow_mask to accept masked arrays";
    if (v.size() != 0 && v.ptr() % alignof(element_type) != 0)
      return sig + ": the data pointer is not aligned to " + std::to_string(alignof(element_type)) +
             " bytes";
    for (int k = 0; k < N; ++k) {
      if (v.shape()[k] > 1 && v.strides()[k] % static_cast<std::int64_t>(sizeof(T)) != 0)
        return sig + ": the stride of axis " + std::to_string(k) + " (" +
               std::to_string(v.strides()[k]) + " bytes) is not a multiple of the item size " +
               std::to_string(sizeof(T));
    }
    return sig + ": not accepted";
  }

  /// "cai.array[<f4, ndim=2, c_contig, writable]", for messages.
  static std::string signature() {
    std::string s =
        "cai.array[" + dtype_of<std::remove_const_t<T>>().str() + ", ndim=" + std::to_string(N);
    if (need_c) s += ", c_contig";
    if (need_f) s += ", f_contig";
    if (need_writable) s += ", writable";
    if (mask_ok) s += ", allow_mask";
    return s + "]";
  }

  /// The typed view for kernels (trivially copyable; pass it by value).
  ArrayRef<element_type, N> ref() const noexcept { return ref_; }
  element_type* data() const noexcept { return ref_.data(); }
  std::int64_t shape(int i) const noexcept { return ref_.shape(i); }
  std::int64_t stride(int i) const noexcept { return ref_.stride(i); }  ///< elements
  std::int64_t size() const noexcept { return view_.size(); }
  const View& view() const noexcept { return view_; }
  sync::SyncState& sync_state() const noexcept { return *view_.sync(); }

 private:
  View view_;
  ArrayRef<element_type, N> ref_{};
};

/// A `stream=` argument: a cai.Stream, an int handle, None or 0 (cai's default stream), or any
/// object with __cuda_stream__ (cuda.core, CuPy, PyTorch streams).
class stream {
 public:
  stream() : ref_{device::kLegacyDefaultStream, nullptr} {}
  explicit stream(sync::StreamRef ref) : ref_(std::move(ref)) {}
  device::StreamHandle handle() const noexcept { return ref_.handle; }
  const sync::StreamRef& ref() const noexcept { return ref_; }

 private:
  sync::StreamRef ref_;
};

/// Orders work on a stream against the arrays it touches, with the CAI v3 rules: on
/// construction the stream waits (event, no host block) for each array's stream; finish()
/// (or the destructor) makes each array's stream wait for the work enqueued in between.
class stream_order {
 public:
  template <class... Arrays>
  explicit stream_order(const stream& s, Arrays&... arrays) : order_(device::backend(), s.ref()) {
    (order_.add(arrays.sync_state()), ...);
  }
  stream_order(const stream_order&) = delete;
  stream_order& operator=(const stream_order&) = delete;
  /// Call after enqueueing the work; reports failures (the destructor cannot).
  void finish() {
    if (!finished_) {
      finished_ = true;
      order_.finish();
    }
  }
  ~stream_order() {
    try {
      finish();
    } catch (...) {
      // A destructor must not throw; call finish() yourself to see the error.
    }
  }

 private:
  sync::StreamOrder order_;
  bool finished_ = false;
};

/// Keeps a Python object alive from C++ (dropped under the GIL; leaked after finalization).
inline std::shared_ptr<const void> keep_alive(::nanobind::handle obj) {
  if (!obj.is_valid() || obj.is_none()) return nullptr;
  obj.inc_ref();
  return std::shared_ptr<const void>(obj.ptr(), [](const void* p) {
    if (!::nanobind::is_alive()) return;
    ::nanobind::gil_scoped_acquire gil;
    Py_DECREF(static_cast<PyObject*>(const_cast<void*>(p)));
  });
}

/// Producer helper: your own device buffer as a cai.DeviceNDArray, which exports both the CAI
/// and DLPack. `byte_strides` empty means C-contiguous; `stream` is where your pending work on
/// the buffer is (handle 0: none); `owner` is kept alive while any view of it exists.
inline ::nanobind::object make_array(std::uint64_t ptr, const DType& dtype,
                                     std::span<const std::int64_t> shape,
                                     std::span<const std::int64_t> byte_strides,
                                     sync::StreamRef stream, std::shared_ptr<const void> owner,
                                     bool readonly = false) {
  Layout layout = byte_strides.empty() ? Layout::c_contiguous(shape, dtype.itemsize())
                                       : Layout(Dims(shape), Dims(byte_strides), dtype.itemsize());
  if (layout.size() == 0) ptr = 0;
  auto state = stream.handle != 0 ? std::make_shared<sync::SyncState>(std::move(stream))
                                  : std::make_shared<sync::SyncState>();
  View v(ptr, dtype, std::move(layout), readonly, std::move(state), std::move(owner));
  PyObject* out = nullptr;
  if (python::capi().wrap_view(&v, &out) != 0) throw ::nanobind::python_error();
  return ::nanobind::steal(out);
}

/// The same, keeping a Python object alive as the owner.
inline ::nanobind::object make_array(std::uint64_t ptr, const DType& dtype,
                                     std::span<const std::int64_t> shape,
                                     std::span<const std::int64_t> byte_strides,
                                     sync::StreamRef stream, ::nanobind::handle owner,
                                     bool readonly = false) {
  return make_array(ptr, dtype, shape, byte_strides, std::move(stream), keep_alive(owner),
                    readonly);
}

}  // namespace nb
}  // namespace cai

namespace nanobind::detail {

template <class T, int N, class... Opts>
struct type_caster<cai::nb::array<T, N, Opts...>> {
  using Value = cai::nb::array<T, N, Opts...>;
  static constexpr auto Name =
      const_name("cai.array[ndim=") + const_name<(size_t)N>() + const_name("]");
  template <typename T_>
  using Cast = movable_cast_t<T_>;
  template <typename T_>
  static constexpr bool can_cast() {
    return true;
  }

  // First pass (no conversions): only arrays that fit, so that another overload can take the
  // rest. Second pass: an importable array that breaks a constraint is taken, and the cast
  // below raises a TypeError that says which constraint failed.
  bool from_python(handle src, uint8_t flags, cleanup_list*) noexcept {
    cai::View v;
    try {
      if (cai::python::capi().import_view(src.ptr(), 1, "cai::nb::array", &v) != 0) {
        PyErr_Clear();
        return false;
      }
      if (Value::fits(v)) {
        value.adopt(std::move(v));
        return true;
      }
      if (!(flags & (uint8_t)cast_flags::convert)) return false;
      failure = Value::rejection(v);
      return true;
    } catch (...) {
      PyErr_Clear();
      return false;
    }
  }

  static handle from_cpp(const Value& v, rv_policy, cleanup_list*) noexcept {
    PyObject* out = nullptr;
    try {
      if (cai::python::capi().wrap_view(&v.view(), &out) != 0) return handle();
    } catch (...) {
      return handle();
    }
    return out;
  }

  explicit operator Value*() { return &checked(); }
  explicit operator Value&() { return checked(); }
  explicit operator Value&&() { return std::move(checked()); }

  Value value;
  std::string failure;

 private:
  Value& checked() {
    // nanobind's own type_error becomes a Python TypeError in any module.
    if (!failure.empty()) throw ::nanobind::type_error(failure.c_str());
    return value;
  }
};

template <>
struct type_caster<cai::nb::stream> {
  NB_TYPE_CASTER(cai::nb::stream, const_name("cai.Stream | int | None"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    cai::sync::StreamRef ref;
    try {
      if (cai::python::capi().read_stream(src.ptr(), "stream=", &ref) != 0) {
        PyErr_Clear();
        return false;
      }
    } catch (...) {
      PyErr_Clear();
      return false;
    }
    value = cai::nb::stream(std::move(ref));
    return true;
  }

  static handle from_cpp(const cai::nb::stream& s, rv_policy, cleanup_list*) noexcept {
    return PyLong_FromUnsignedLongLong(s.handle());
  }
};

}  // namespace nanobind::detail
