#include "tensor.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace fa {

const char* layout_kind_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kContiguous:
      return "contiguous";
    case LayoutKind::kPadded:
      return "padded";
    case LayoutKind::kHeadMajor:
      return "head-major";
    case LayoutKind::kHeadMajorPadded:
      return "head-major-padded";
  }
  return "invalid";
}

std::string LayoutSpec::name() const {
  std::string text = layout_kind_name(kind);
  if (padded()) text += "(" + std::to_string(gap_elems) + ")";
  return text;
}

TensorLayout TensorLayout::make(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, LayoutSpec spec) {
  if (spec.padded() && (spec.gap_elems <= 0 || spec.gap_elems % 8 != 0)) {
    throw std::invalid_argument("TensorLayout::make: the gap of a padded layout must be a positive multiple of 8 "
                                "elements, not " + std::to_string(spec.gap_elems));
  }
  const int64_t gap = spec.padded() ? spec.gap_elems : 0;
  TensorLayout l;
  l.batch = batch;
  l.seq = seq;
  l.heads = heads;
  l.head_dim = head_dim;
  switch (spec.kind) {
    case LayoutKind::kContiguous:
    case LayoutKind::kPadded:
      l.head_stride = head_dim + gap;
      l.seq_stride = heads * l.head_stride + 2 * gap;
      l.batch_stride = seq * l.seq_stride + 3 * gap;
      break;
    case LayoutKind::kHeadMajor:
    case LayoutKind::kHeadMajorPadded:
      l.seq_stride = head_dim + gap;
      l.head_stride = seq * l.seq_stride + 2 * gap;
      l.batch_stride = heads * l.head_stride + 3 * gap;
      break;
  }
  // The last element of the last row, plus one.
  l.storage_elems = l.offset(batch - 1, seq - 1, heads - 1, head_dim - 1) + 1;
  return l;
}

namespace {

struct ConversionTables {
  std::vector<float> fp16, bf16;
  ConversionTables() : fp16(65536), bf16(65536) {
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      __half_raw raw;
      raw.x = static_cast<unsigned short>(bits);
      fp16[bits] = __half2float(__half(raw));
      const uint32_t widened = bits << 16;  // bf16 is the top half of a float
      std::memcpy(&bf16[bits], &widened, 4);
    }
  }
};

const ConversionTables& tables() {
  static const ConversionTables t;
  return t;
}

}  // namespace

float half_bits_to_float(uint16_t bits, DType dtype) {
  return dtype == DType::kFloat16 ? tables().fp16[bits] : tables().bf16[bits];
}

uint16_t float_to_half_bits(float value, DType dtype) {
  uint16_t bits;
  if (dtype == DType::kFloat16) {
    bits = static_cast<__half_raw>(__float2half_rn(value)).x;
  } else {
    bits = static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(value)).x;
  }
  return bits;
}

float round_to_dtype(float value, DType dtype) {
  return half_bits_to_float(float_to_half_bits(value, dtype), dtype);
}

float HostTensor::at(int64_t b, int64_t s, int64_t h, int64_t d) const {
  return half_bits_to_float(raw[static_cast<size_t>(layout.offset(b, s, h, d))], dtype);
}

void HostTensor::set(int64_t b, int64_t s, int64_t h, int64_t d, float value) {
  raw[static_cast<size_t>(layout.offset(b, s, h, d))] = float_to_half_bits(value, dtype);
}

}  // namespace fa
