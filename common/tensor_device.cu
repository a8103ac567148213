#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.h"
#include "tensor.h"

namespace fa {

namespace {

// splitmix64: a counter-based generator, so element i gets the same value however it is launched.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_normal_kernel(T* data, TensorLayout layout, uint64_t seed, float stddev) {
  const int64_t total = layout.logical_elems();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i;
    const int64_t d = rest % layout.head_dim;
    rest /= layout.head_dim;
    const int64_t h = rest % layout.heads;
    rest /= layout.heads;
    const int64_t s = rest % layout.seq;
    rest /= layout.seq;
    const int64_t b = rest;
    const uint64_t bits = mix64(seed * 0x2545F4914F6CDD1Dull ^ mix64(static_cast<uint64_t>(i)));
    // Box-Muller on two 24-bit uniforms in (0, 1].
    const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((bits >> 16) & 0xFFFFFF) * (1.0f / 16777216.0f);
    const float normal = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    data[layout.offset(b, s, h, d)] = static_cast<T>(normal * stddev);
  }
}

}  // namespace

DeviceTensor::DeviceTensor(const TensorLayout& layout, DType dtype) : layout_(layout), dtype_(dtype) {
  FA_CUDA_CHECK(cudaMalloc(&data_, bytes()));
}

DeviceTensor::~DeviceTensor() {
  if (data_) cudaFree(data_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : layout_(other.layout_), dtype_(other.dtype_), data_(std::exchange(other.data_, nullptr)) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    layout_ = other.layout_;
    dtype_ = other.dtype_;
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

TensorView DeviceTensor::view() const {
  TensorView v;
  v.data = data_;
  v.dtype = dtype_;
  v.batch_stride = layout_.batch_stride;
  v.seq_stride = layout_.seq_stride;
  v.head_stride = layout_.head_stride;
  return v;
}

void DeviceTensor::fill_bytes(unsigned char byte) {
  FA_CUDA_CHECK(cudaMemset(data_, byte, bytes()));
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceTensor::fill_normal(uint64_t seed, float stddev) {
  const int threads = 256;
  const int64_t blocks64 = (layout_.logical_elems() + threads - 1) / threads;
  const int blocks = static_cast<int>(blocks64 < 65536 * 8 ? blocks64 : 65536 * 8);
  if (dtype_ == DType::kFloat16) {
    fill_normal_kernel<__half><<<blocks, threads>>>(static_cast<__half*>(data_), layout_, seed, stddev);
  } else {
    fill_normal_kernel<__nv_bfloat16>
        <<<blocks, threads>>>(static_cast<__nv_bfloat16*>(data_), layout_, seed, stddev);
  }
  FA_CUDA_CHECK(cudaGetLastError());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

HostTensor DeviceTensor::download() const {
  HostTensor host;
  host.layout = layout_;
  host.dtype = dtype_;
  host.raw.resize(static_cast<size_t>(layout_.storage_elems));
  FA_CUDA_CHECK(cudaMemcpy(host.raw.data(), data_, bytes(), cudaMemcpyDeviceToHost));
  return host;
}

void DeviceTensor::upload(const HostTensor& host) {
  if (host.raw.size() != static_cast<size_t>(layout_.storage_elems) || host.dtype != dtype_) {
    throw std::runtime_error("DeviceTensor::upload: host tensor does not match the device tensor");
  }
  FA_CUDA_CHECK(cudaMemcpy(data_, host.raw.data(), bytes(), cudaMemcpyHostToDevice));
}

DeviceFloats::DeviceFloats(int64_t count) : count_(count) {
  if (count > 0) FA_CUDA_CHECK(cudaMalloc(&data_, static_cast<size_t>(count) * sizeof(float)));
}

DeviceFloats::~DeviceFloats() {
  if (data_) cudaFree(data_);
}

DeviceFloats::DeviceFloats(DeviceFloats&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}

DeviceFloats& DeviceFloats::operator=(DeviceFloats&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

void DeviceFloats::fill_bytes(unsigned char byte) {
  if (count_ == 0) return;
  FA_CUDA_CHECK(cudaMemset(data_, byte, static_cast<size_t>(count_) * sizeof(float)));
  FA_CUDA_CHECK(cudaDeviceSynchronize());
}

std::vector<float> DeviceFloats::download() const {
  std::vector<float> host(static_cast<size_t>(count_));
  if (count_ > 0)
    FA_CUDA_CHECK(cudaMemcpy(host.data(), data_, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

void DeviceFloats::upload(const std::vector<float>& values) {
  if (values.size() != static_cast<size_t>(count_))
    throw std::runtime_error("DeviceFloats::upload: " + std::to_string(values.size()) + " values for " +
                             std::to_string(count_) + " elements");
  if (count_ > 0)
    FA_CUDA_CHECK(cudaMemcpy(data_, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice));
}

}  // namespace fa
