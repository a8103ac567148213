// Tensors of the harness: a [batch, seq, heads, head_dim] layout with explicit strides, a device
// buffer that owns its memory, and a host copy of the raw 16-bit values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fragment_layout.h"  // FA_HOST_DEVICE
#include "params.h"

namespace fa {

// How a test lays a tensor out in memory. Strides are in elements, multiples of 8 (16 bytes).
enum class LayoutKind {
  kContiguous,       // [batch][seq][heads][head_dim], densely packed
  kPadded,           // same order, with gaps after every head, row and batch (the gaps are poisoned)
  kHeadMajor,        // [batch][heads][seq][head_dim] in memory, still indexed as [b, s, h, d]
  kHeadMajorPadded,  // head-major, with gaps after every row, head and batch
};
const char* layout_kind_name(LayoutKind kind);  // "contiguous", "padded", "head-major", ...

// One tensor's layout: its kind and, for the padded kinds, the gap unit in elements (a multiple of
// 8, so every row stays 16-byte aligned). The gaps after the innermost, middle and outermost of
// the three strided dimensions are 1, 2 and 3 units: with the default unit of 8, a padded tensor
// has 8 elements after every head, 16 after every row and 24 after every batch. Giving tensors
// different units gives them different strides even where their shapes are equal.
struct LayoutSpec {
  LayoutKind kind = LayoutKind::kContiguous;
  int64_t gap_elems = 8;

  LayoutSpec() = default;
  // Implicit, so that a LayoutKind alone still names a layout (with the default gap).
  LayoutSpec(LayoutKind layout_kind, int64_t gap = 8) : kind(layout_kind), gap_elems(gap) {}
  bool padded() const { return kind == LayoutKind::kPadded || kind == LayoutKind::kHeadMajorPadded; }
  std::string name() const;  // "head-major", "padded(8)", ...
};

struct TensorLayout {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
  int64_t storage_elems = 0;  // elements the buffer must hold, gaps included

  // Throws std::invalid_argument for a padded kind whose gap is not a positive multiple of 8.
  static TensorLayout make(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, LayoutSpec spec);
  FA_HOST_DEVICE int64_t offset(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return b * batch_stride + s * seq_stride + h * head_stride + d;
  }
  FA_HOST_DEVICE int64_t logical_elems() const { return batch * seq * heads * head_dim; }
};

// Raw 16-bit values on the host, read as float through a lookup table.
struct HostTensor {
  TensorLayout layout;
  DType dtype = DType::kFloat16;
  std::vector<uint16_t> raw;

  float at(int64_t b, int64_t s, int64_t h, int64_t d) const;
  void set(int64_t b, int64_t s, int64_t h, int64_t d, float value);  // rounds to nearest
};

float half_bits_to_float(uint16_t bits, DType dtype);
uint16_t float_to_half_bits(float value, DType dtype);  // round to nearest even
float round_to_dtype(float value, DType dtype);

class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(const TensorLayout& layout, DType dtype);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  TensorView view() const;
  const TensorLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  void* data() const { return data_; }
  size_t bytes() const { return static_cast<size_t>(layout_.storage_elems) * 2; }

  void fill_bytes(unsigned char byte);  // 0xFF bytes are NaN in fp16 and bf16: the poison
  // N(0, stddev^2) in every logical element, counter-based RNG keyed on (seed, element).
  // Gaps between rows keep what was there (poison them first to catch reads of the gaps).
  void fill_normal(uint64_t seed, float stddev);
  HostTensor download() const;
  void upload(const HostTensor& host);

 private:
  TensorLayout layout_;
  DType dtype_ = DType::kFloat16;
  void* data_ = nullptr;
};

// fp32 values in device memory, for the small float tensors of the optional features (the LSE
// output, ALiBi slopes). Owns its memory; empty (data() == nullptr) when built with 0 elements.
class DeviceFloats {
 public:
  DeviceFloats() = default;
  explicit DeviceFloats(int64_t count);
  ~DeviceFloats();
  DeviceFloats(DeviceFloats&& other) noexcept;
  DeviceFloats& operator=(DeviceFloats&& other) noexcept;
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  float* data() const { return data_; }
  int64_t count() const { return count_; }
  void fill_bytes(unsigned char byte);  // 0xFF bytes are a NaN (bits 0xFFFFFFFF): the poison
  std::vector<float> download() const;
  void upload(const std::vector<float>& values);  // exactly count() values

 private:
  float* data_ = nullptr;
  int64_t count_ = 0;
};

}  // namespace fa
