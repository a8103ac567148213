// The C interface of c_api_backward.h over the registry (registry.h) and the backward's launcher
// contract (backward.h).
#include "c_api_backward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backward.h"
#include "params.h"
#include "registry.h"

namespace {

void write_message(char* message, int capacity, const std::string& text) {
  if (message == nullptr || capacity <= 0) return;
  const size_t n = std::min(text.size(), static_cast<size_t>(capacity - 1));
  std::memcpy(message, text.data(), n);
  message[n] = '\0';
}

fa::TensorView view(const FaCapiTensor& t, fa::DType dtype) {
  fa::TensorView v;
  v.data = t.data;
  v.dtype = dtype;
  v.batch_stride = t.batch_stride;
  v.seq_stride = t.seq_stride;
  v.head_stride = t.head_stride;
  return v;
}

}  // namespace

extern "C" int fa_capi_backward_params_size(void) {
  return static_cast<int>(sizeof(FaCapiBackwardParams));
}

extern "C" int fa_capi_stage_has_backward(const char* stage_name) {
  const fa::StageInfo* stage = stage_name == nullptr ? nullptr : fa::find_stage(stage_name);
  return stage != nullptr && stage->backward != nullptr && stage->backward->launch != nullptr ? 1 : 0;
}

extern "C" int fa_capi_launch_backward(const char* stage_name, const FaCapiBackwardParams* c, void* stream,
                                       char* message, int capacity) {
  const fa::StageInfo* stage = stage_name == nullptr ? nullptr : fa::find_stage(stage_name);
  if (stage == nullptr) {
    write_message(message, capacity,
                  std::string("no stage named '") + (stage_name ? stage_name : "(null)") + "' in this library");
    return 2;
  }
  if (stage->backward == nullptr || stage->backward->launch == nullptr) {
    write_message(message, capacity, std::string(stage->name) + ": this stage has no backward pass");
    return 2;
  }
  if (c == nullptr || (c->dtype != 0 && c->dtype != 1)) {
    write_message(message, capacity, std::string(stage->name) + ": " +
                                         (c == nullptr ? "no parameters (NULL)" : "dtype must be 0 (fp16) or 1 (bf16)"));
    return 1;
  }
  const fa::DType dtype = c->dtype == 0 ? fa::DType::kFloat16 : fa::DType::kBFloat16;
  fa::BackwardParams p;
  p.q = view(c->q, dtype);
  p.k = view(c->k, dtype);
  p.v = view(c->v, dtype);
  p.o = view(c->o, dtype);
  p.d_o = view(c->d_o, dtype);
  p.dq = view(c->dq, dtype);
  p.dk = view(c->dk, dtype);
  p.dv = view(c->dv, dtype);
  p.lse.data = c->lse;
  p.lse.batch_stride = c->lse_batch_stride;
  p.lse.head_stride = c->lse_head_stride;
  p.batch = c->batch;
  p.heads = c->heads;
  p.kv_heads = c->kv_heads;
  p.seq_q = c->seq_q;
  p.seq_kv = c->seq_kv;
  p.head_dim = c->head_dim;
  p.softmax_scale = c->softmax_scale;
  p.causal = c->causal != 0;
  // The launcher validates first (validate_backward_params) and launches nothing if that fails.
  const fa::Status status = stage->backward->launch(p, static_cast<cudaStream_t>(stream));
  if (!status.ok()) {
    write_message(message, capacity, status.message);
    return 1;
  }
  return 0;
}
