// The two 16-bit input types of the MMA microbenchmarks: their names, conversions (host and
// device) and the packing of two values into one 32-bit register (low half first, as the MMA
// fragments expect).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace fa::microbench {

template <typename T>
struct Dtype;

template <>
struct Dtype<__half> {
  static constexpr const char* name = "fp16";
  static constexpr const char* ptx = "f16";  // the type in PTX instruction names
  FA_HOST_DEVICE static __half from_float(float x) { return __float2half_rn(x); }
  FA_HOST_DEVICE static float to_float(__half x) { return __half2float(x); }
  __device__ static uint32_t pack(float lo, float hi) {
    const __half2 pair = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
  }
};

template <>
struct Dtype<__nv_bfloat16> {
  static constexpr const char* name = "bf16";
  static constexpr const char* ptx = "bf16";
  FA_HOST_DEVICE static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  FA_HOST_DEVICE static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&pair);
  }
};

// x as the MMA sees it: rounded to T.
template <typename T>
inline float round_to(float x) {
  return Dtype<T>::to_float(Dtype<T>::from_float(x));
}

}  // namespace fa::microbench
