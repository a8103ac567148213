// What the two halves of libfa_capi.so share (c_api.cpp, the forward; c_api_backward.cpp, the
// backward): the message buffer, the C structs' tensors and common fields turned into the launcher
// contract's, the stage lookup and the status reply. Internal to the library: not part of the C
// interface (c_api.h, c_api_backward.h), whose callers never include it.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#include "c_api.h"
#include "params.h"
#include "registry.h"

namespace fa::capi {

// Copies text into message (capacity bytes, NUL-terminated, truncated to fit); nothing if message is
// NULL or capacity <= 0.
inline void write_message(char* message, int capacity, const std::string& text) {
  if (message == nullptr || capacity <= 0) return;
  const size_t n = std::min(text.size(), static_cast<size_t>(capacity - 1));
  std::memcpy(message, text.data(), n);
  message[n] = '\0';
}

inline TensorView view(const FaCapiTensor& t, DType dtype) {
  TensorView v;
  v.data = t.data;
  v.dtype = dtype;
  v.batch_stride = t.batch_stride;
  v.seq_stride = t.seq_stride;
  v.head_stride = t.head_stride;
  return v;
}

// The stage named stage_name (its folder name or number), or nullptr after writing why to message.
inline const StageInfo* find_stage_or_report(const char* stage_name, char* message, int capacity) {
  const StageInfo* stage = stage_name == nullptr ? nullptr : find_stage(stage_name);
  if (stage == nullptr) {
    write_message(message, capacity,
                  std::string("no stage named '") + (stage_name ? stage_name : "(null)") + "' in this library");
  }
  return stage;
}

// The C structs' dtype field: 0 fp16, 1 bf16; anything else is refused before this is called.
inline bool valid_dtype(int32_t dtype) { return dtype == 0 || dtype == 1; }
inline DType to_dtype(int32_t dtype) { return dtype == 0 ? DType::kFloat16 : DType::kBFloat16; }

// The fields FaCapiParams and FaCapiBackwardParams share with AttentionParams and BackwardParams:
// q, k, v, o, the sizes, the scale, causal and the LSE (the forward's output, the backward's input).
template <class CParams, class Params>
void copy_shared_fields(const CParams& c, DType dtype, Params& p) {
  p.q = view(c.q, dtype);
  p.k = view(c.k, dtype);
  p.v = view(c.v, dtype);
  p.o = view(c.o, dtype);
  p.batch = c.batch;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.seq_q = c.seq_q;
  p.seq_kv = c.seq_kv;
  p.head_dim = c.head_dim;
  p.softmax_scale = c.softmax_scale;
  p.lse.data = c.lse;
  p.lse.batch_stride = c.lse_batch_stride;
  p.lse.head_stride = c.lse_head_stride;
  p.causal = c.causal != 0;
}

// A launcher's status as the C interface's return code: 0, or 1 with the launcher's message.
inline int reply(const Status& status, char* message, int capacity) {
  if (status.ok()) return 0;
  write_message(message, capacity, status.message);
  return 1;
}

}  // namespace fa::capi
