// A C interface to the linked stages, for programs that are not C++: tools/interleaved.py loads the
// shared library built from it (libfa_capi.so, CMake target fa_capi) with Python's ctypes and
// launches the stages on PyTorch's tensors, so that a stage and PyTorch's attention can be timed in
// one process, launch after launch (benchmarking.md: the power cap inside a series).
//
// The structs mirror AttentionParams (params.h) field by field, in plain C types; strides are in
// elements, as there. Nothing here owns memory: every pointer is the caller's device memory.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  void* data;  // device memory
  int64_t batch_stride, seq_stride, head_stride;
} FaCapiTensor;

typedef struct {
  FaCapiTensor q, k, v, o;
  int32_t dtype;   // 0 fp16, 1 bf16 (fa::DType)
  int32_t causal;  // 0 or 1
  int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim;
  float softmax_scale;
  float* lse;  // NULL: no LSE output
  int64_t lse_batch_stride, lse_head_stride;
  const float* alibi;  // NULL: no ALiBi
  int64_t alibi_batch_stride;
  int32_t num_splits;        // 0: the stage chooses; > 0 only for stages that declare "split_kv"
  const int32_t* seqlens_k;  // NULL: every sequence has seq_kv keys; else int32 [batch], device memory
  // NULL: k and v are [batch, seq_kv, ...]; else int32 [batch, max_pages] in device memory, and k and v
  // are pools of pages whose batch stride steps from one page to the next (params.h). Only for stages
  // that declare "paged_kv".
  const int32_t* block_table;
  int64_t block_table_batch_stride, max_pages;
  int32_t page_size;  // rows per page; 0 without a block table
} FaCapiParams;

// sizeof(FaCapiParams) as this library was compiled: a binding checks its own copy of the struct.
int fa_capi_params_size(void);

// The stages this library was built with, by index 0 .. count - 1 (NULL past the end).
int fa_capi_stage_count(void);
const char* fa_capi_stage_name(int index);

// Launches the stage (its folder name or number, e.g. "29") on `stream` (a cudaStream_t; NULL is
// the default stream). Returns 0 when the launch was issued; 1 when the stage rejected the call or
// the launch failed (validation comes first: a rejected call launches nothing); 2 for a stage this
// library does not have. In the last two cases `message` (capacity bytes, may be NULL) says why.
int fa_capi_launch(const char* stage, const FaCapiParams* params, void* stream, char* message, int capacity);

#ifdef __cplusplus
}
#endif
