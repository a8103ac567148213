// The C interface of c_api_backward.h over the registry (registry.h) and the backward's launcher
// contract (backward.h).
#include "c_api_backward.h"

#include <string>

#include "backward.h"
#include "c_api_util.h"
#include "params.h"
#include "registry.h"

using fa::capi::write_message;

extern "C" int fa_capi_backward_params_size(void) {
  return static_cast<int>(sizeof(FaCapiBackwardParams));
}

extern "C" int fa_capi_stage_has_backward(const char* stage_name) {
  const fa::StageInfo* stage = stage_name == nullptr ? nullptr : fa::find_stage(stage_name);
  return stage != nullptr && stage->backward != nullptr && stage->backward->launch != nullptr ? 1 : 0;
}

extern "C" int fa_capi_launch_backward(const char* stage_name, const FaCapiBackwardParams* c, void* stream,
                                       char* message, int capacity) {
  const fa::StageInfo* stage = fa::capi::find_stage_or_report(stage_name, message, capacity);
  if (stage == nullptr) return 2;
  if (stage->backward == nullptr || stage->backward->launch == nullptr) {
    write_message(message, capacity, std::string(stage->name) + ": this stage has no backward pass");
    return 2;
  }
  if (c == nullptr || !fa::capi::valid_dtype(c->dtype)) {
    write_message(message, capacity, std::string(stage->name) + ": " +
                                         (c == nullptr ? "no parameters (NULL)" : "dtype must be 0 (fp16) or 1 (bf16)"));
    return 1;
  }
  const fa::DType dtype = fa::capi::to_dtype(c->dtype);
  fa::BackwardParams p;
  fa::capi::copy_shared_fields(*c, dtype, p);  // q, k, v, o, the sizes, scale, causal, the forward's LSE
  p.d_o = fa::capi::view(c->d_o, dtype);
  p.dq = fa::capi::view(c->dq, dtype);
  p.dk = fa::capi::view(c->dk, dtype);
  p.dv = fa::capi::view(c->dv, dtype);
  p.deterministic = c->deterministic != 0;
  // The launcher validates first (validate_backward_params) and launches nothing if that fails.
  return fa::capi::reply(stage->backward->launch(p, static_cast<cudaStream_t>(stream)), message, capacity);
}
