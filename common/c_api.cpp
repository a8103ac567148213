// The C interface of c_api.h over the registry (registry.h) and the launcher contract (params.h).
#include "c_api.h"

#include <string>

#include "c_api_util.h"
#include "params.h"
#include "registry.h"

using fa::capi::write_message;

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
  const fa::StageInfo* stage = fa::capi::find_stage_or_report(stage_name, message, capacity);
  if (stage == nullptr) return 2;
  if (c == nullptr || !fa::capi::valid_dtype(c->dtype)) {
    write_message(message, capacity, c == nullptr ? "no parameters (NULL)" : "dtype must be 0 (fp16) or 1 (bf16)");
    return 1;
  }
  fa::AttentionParams p;
  fa::capi::copy_shared_fields(*c, fa::capi::to_dtype(c->dtype), p);  // q, k, v, o, the sizes, scale, causal, LSE
  p.alibi.data = c->alibi;
  p.alibi.batch_stride = c->alibi_batch_stride;
  p.num_splits = c->num_splits;
  p.seqlens_k = c->seqlens_k;
  p.block_table = c->block_table;
  p.block_table_batch_stride = c->block_table_batch_stride;
  p.max_pages = c->max_pages;
  p.page_size = c->page_size;
  return fa::capi::reply(stage->launch(p, static_cast<cudaStream_t>(stream)), message, capacity);
}
