#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>

namespace cai {

/// The most dimensions an array may have (NumPy's limit since 2.0).
inline constexpr int max_ndim = 64;

/// A vector of int64 for shapes and strides. Up to `inline_capacity` values live inside the
/// object, so that importing an array of ordinary rank never allocates; more go to the heap.
class Dims {
 public:
  using value_type = std::int64_t;
  using size_type = std::size_t;
  using iterator = std::int64_t*;
  using const_iterator = const std::int64_t*;
  static constexpr size_type inline_capacity = 8;

  Dims() noexcept {}
  explicit Dims(size_type count, std::int64_t value = 0) { resize(count, value); }
  Dims(std::initializer_list<std::int64_t> values) { assign({values.begin(), values.size()}); }
  explicit Dims(std::span<const std::int64_t> values) { assign(values); }

  Dims(const Dims& other) {
    if (other.size_ <= inline_capacity) {
      copy_inline(other);
      size_ = other.size_;
    } else {
      assign(other);
    }
  }
  Dims(Dims&& other) noexcept { take(other); }
  Dims& operator=(const Dims& other) {
    if (this != &other) assign(other);
    return *this;
  }
  Dims& operator=(Dims&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~Dims() { release(); }

  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  /// True while the values are stored inside the object (no heap allocation).
  bool is_inline() const noexcept { return data_ == inline_; }

  std::int64_t* data() noexcept { return data_; }
  const std::int64_t* data() const noexcept { return data_; }
  std::int64_t& operator[](size_type i) noexcept {
    assert(i < size_ && "Dims: operator[] out of bounds");
    return data_[i];
  }
  std::int64_t operator[](size_type i) const noexcept {
    assert(i < size_ && "Dims: operator[] out of bounds");
    return data_[i];
  }
  std::int64_t& front() noexcept { return (*this)[0]; }
  std::int64_t front() const noexcept { return (*this)[0]; }
  std::int64_t& back() noexcept { return (*this)[size_ - 1]; }
  std::int64_t back() const noexcept { return (*this)[size_ - 1]; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }

  // Converts to std::span<const std::int64_t> (and std::span<std::int64_t>) as a
  // contiguous range.
  std::span<const std::int64_t> span() const noexcept { return {data_, size_}; }

  void reserve(size_type n) {
    if (n > capacity_) grow_to(n);
  }
  void resize(size_type n, std::int64_t value = 0) {
    reserve(n);
    std::fill(data_ + std::min(n, size_), data_ + n, value);
    size_ = n;
  }
  void push_back(std::int64_t value) {
    if (size_ == capacity_) grow_to(capacity_ * 2);
    data_[size_++] = value;
  }
  void pop_back() noexcept {
    assert(size_ > 0 && "Dims: pop_back on empty");
    --size_;
  }
  void clear() noexcept { size_ = 0; }
  void assign(std::span<const std::int64_t> values) {
    // A source inside our own storage never exceeds capacity_, so growing cannot free it.
    if (values.size() > capacity_) grow_to(values.size(), /*keep=*/false);
    std::copy(values.begin(), values.end(), data_);
    size_ = values.size();
  }

  friend bool operator==(const Dims& a, const Dims& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void grow_to(size_type n, bool keep = true) {
    auto* heap = new std::int64_t[n];
    if (keep) std::copy(data_, data_ + size_, heap);
    release();
    data_ = heap;
    capacity_ = n;
  }
  void release() noexcept {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    capacity_ = inline_capacity;
  }
  // The whole inline buffer, a fixed size the compiler copies in a few moves (a copy of size_
  // values is a library call). `other`'s storage holds at least inline_capacity values.
  void copy_inline(const Dims& other) noexcept {
    std::memcpy(inline_, other.data_, sizeof inline_);
  }
  // Leaves `other` empty and inline.
  void take(Dims& other) noexcept {
    if (other.is_inline()) {
      copy_inline(other);
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = inline_capacity;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  std::int64_t* data_ = inline_;
  size_type size_ = 0;
  size_type capacity_ = inline_capacity;
  std::int64_t inline_[inline_capacity];
};

/// Appends values the way Python prints a tuple: "()", "(3,)", "(2, 3)". For error messages.
inline void append_dims(std::string& out, std::span<const std::int64_t> values) {
  out += '(';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(values[i]);
  }
  if (values.size() == 1) out += ',';
  out += ')';
}

inline std::string format_dims(std::span<const std::int64_t> values) {
  std::string out;
  append_dims(out, values);
  return out;
}

/// A Dims in a throw_error message, as a tuple.
inline void append_part(std::string& out, const Dims& values) {
  append_dims(out, values);
}

}  // namespace cai
