// The one interface every stage implements: what an attention call is (AttentionParams), what a
// stage is (StageInfo), and the launcher's error type (Status). Nothing here knows about any stage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fa {

enum class DType : int { kFloat16 = 0, kBFloat16 = 1 };

const char* dtype_name(DType dtype);                    // "fp16" / "bf16"
bool parse_dtype(const std::string& text, DType* out);  // accepts fp16/float16/half, bf16/bfloat16
inline int dtype_bytes(DType) {
  return 2;
}

// A [batch, seq, heads, head_dim] tensor in device memory. Strides are in elements; head_dim is
// contiguous (stride 1). Any batch/seq/head strides are allowed as long as every row of head_dim
// elements starts on a 16-byte boundary (the kernels move rows in 16-byte chunks).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat16;
  int64_t batch_stride = 0;
  int64_t seq_stride = 0;
  int64_t head_stride = 0;
};

// O = softmax(Q K^T * softmax_scale) V, per batch and head.
// q/o: [batch, seq_q, heads, head_dim]; k/v: [batch, seq_kv, heads, head_dim].
struct AttentionParams {
  TensorView q, k, v, o;
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t seq_q = 0;
  int64_t seq_kv = 0;
  int64_t head_dim = 0;
  float softmax_scale = 0.0f;  // set it with default_softmax_scale() unless you want another one
};

inline float default_softmax_scale(int64_t head_dim);  // 1 / sqrt(head_dim)

// The launcher's answer: empty message means success. A failed validation launches nothing.
struct Status {
  std::string message;
  bool ok() const { return message.empty(); }
  static Status success() { return {}; }
  static Status error(std::string text) { return Status{std::move(text)}; }
};

// What a stage supports; the registry, runner, tests and benchmark read only this.
struct StageInfo {
  const char* name;            // folder name, e.g. "01_base"
  const char* idea;            // the one optimization this stage adds, in a few words
  int block_q;                 // Br: query rows per thread block (seq_q must be a multiple)
  int block_kv;                // Bc: key/value rows per iteration (seq_kv must be a multiple)
  int warps;                   // warps per thread block
  int min_compute_capability;  // e.g. 80 for sm_80
  std::vector<int> head_dims;
  std::vector<DType> dtypes;
  Status (*launch)(const AttentionParams& params, cudaStream_t stream);
};

// Checks everything the launcher contract promises to reject, for a stage with the given tiles.
// Every stage's launch() calls this first and launches nothing if it fails.
Status validate_params(const AttentionParams& params, const StageInfo& stage);

// Turns the last launch error into a Status ("<stage>: kernel launch failed: ...").
Status launch_status(const char* stage_name);

}  // namespace fa

#include <cmath>
inline float fa::default_softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}
