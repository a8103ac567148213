// The C interface of c_api.h over the registry (registry.h) and the launcher contract (params.h).
#include "c_api.h"

#include <algorithm>
#include <cstring>
#include <string>

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

extern "C" int fa_capi_params_size(void) {
  return static_cast<int>(sizeof(FaCapiParams));
}

extern "C" int fa_capi_stage_count(void) {
  return static_cast<int>(fa::registered_stages().size());
}

extern "C" const char* fa_capi_stage_name(int index) {
  const auto& stages = fa::registered_stages();
  return index >= 0 && index < static_cast<int>(stages.size()) ? stages[index]->name : nullptr;
}

extern "C" int fa_capi_launch(const char* stage_name, const FaCapiParams* c, void* stream, char* message,
                              int capacity) {
  const fa::StageInfo* stage = stage_name == nullptr ? nullptr : fa::find_stage(stage_name);
  if (stage == nullptr) {
    write_message(message, capacity,
                  std::string("no stage named '") + (stage_name ? stage_name : "(null)") + "' in this library");
    return 2;
  }
  if (c == nullptr || (c->dtype != 0 && c->dtype != 1)) {
    write_message(message, capacity, c == nullptr ? "no parameters (NULL)" : "dtype must be 0 (fp16) or 1 (bf16)");
    return 1;
  }
  const fa::DType dtype = c->dtype == 0 ? fa::DType::kFloat16 : fa::DType::kBFloat16;
  fa::AttentionParams p;
  p.q = view(c->q, dtype);
  p.k = view(c->k, dtype);
  p.v = view(c->v, dtype);
  p.o = view(c->o, dtype);
  p.batch = c->batch;
  p.heads = c->heads;
  p.kv_heads = c->kv_heads;
  p.seq_q = c->seq_q;
  p.seq_kv = c->seq_kv;
  p.head_dim = c->head_dim;
  p.softmax_scale = c->softmax_scale;
  p.lse.data = c->lse;
  p.lse.batch_stride = c->lse_batch_stride;
  p.lse.head_stride = c->lse_head_stride;
  p.alibi.data = c->alibi;
  p.alibi.batch_stride = c->alibi_batch_stride;
  p.causal = c->causal != 0;
  p.num_splits = c->num_splits;
  p.seqlens_k = c->seqlens_k;
  p.block_table = c->block_table;
  p.block_table_batch_stride = c->block_table_batch_stride;
  p.max_pages = c->max_pages;
  p.page_size = c->page_size;
  const fa::Status status = stage->launch(p, static_cast<cudaStream_t>(stream));
  if (!status.ok()) {
    write_message(message, capacity, status.message);
    return 1;
  }
  return 0;
}
