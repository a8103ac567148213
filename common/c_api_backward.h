// The backward pass behind the C interface (common/c_api.h's companion): Python launches a stage's
// backward (common/backward.h) on PyTorch's tensors through libfa_capi.so, as it launches the
// forward through fa_capi_launch, so that tools/backward_bench.py can time a stage's backward beside
// FlashAttention-2's and cuDNN's in one process.
//
// FaCapiBackwardParams mirrors fa::BackwardParams field by field, in plain C types; strides are in
// elements (FaCapiTensor, from c_api.h). Nothing here owns memory: every pointer is the caller's
// device memory. dq, dk and dv are written, never read; the LSE is the forward's (the buffer that
// FaCapiParams::lse received, with the same strides).
#pragma once

#include <stdint.h>

#include "c_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  FaCapiTensor q, k, v, o, d_o;  // inputs: the forward's Q, K, V, its output O, and dL/dO
  FaCapiTensor dq, dk, dv;       // outputs: q's shape for dq, k's for dk and dv
  int32_t dtype;                 // 0 fp16, 1 bf16 (fa::DType), every tensor's
  int32_t causal;                // 0 or 1: the forward's masking
  int32_t deterministic;         // 0 or 1: dQ summed in a fixed order (fa::BackwardParams::deterministic)
  int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim;
  float softmax_scale;           // the forward's
  const float* lse;              // the forward's log-sum-exp, [batch, heads, seq_q] fp32 (required)
  int64_t lse_batch_stride, lse_head_stride;
} FaCapiBackwardParams;

// sizeof(FaCapiBackwardParams) as this library was compiled: a binding checks its own copy.
int fa_capi_backward_params_size(void);

// 1 if the stage (its folder name or number) has a backward pass in this library, else 0.
int fa_capi_stage_has_backward(const char* stage);

// Launches the stage's backward on `stream` (a cudaStream_t; NULL is the default stream), with the
// conventions of fa_capi_launch: returns 0 when the launch was issued (asynchronously: the backward
// allocates and frees its workspace in stream order and does not wait for the GPU); 1 when the
// backward rejected the call or a launch failed (validation comes first: a rejected call launches
// nothing); 2 for a stage this library does not have, or one without a backward pass. In the last
// two cases `message` (capacity bytes, may be NULL) says why.
int fa_capi_launch_backward(const char* stage, const FaCapiBackwardParams* params, void* stream, char* message,
                            int capacity);

#ifdef __cplusplus
}
#endif
