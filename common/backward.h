// The backward pass's interface (what no stage changes): what a gradient call is (BackwardParams),
// what a stage's backward is (BackwardInfo, reached from StageInfo::backward), and its validation.
//
// Given the forward's inputs Q, K, V, its output O and its log-sum-exp (AttentionParams::lse), and
// dO = dL/dO of some loss L, the backward writes dQ = dL/dQ, dK = dL/dK and dV = dL/dV. With
// S = softmax_scale * Q K^T and P = softmax(S) row by row (O = P V):
//
//   dV = P^T dO,   dP = dO V^T,   D_i = sum_d dO[i, d] O[i, d] (= sum_j P[i, j] dP[i, j]),
//   dS = P * (dP - D),   dQ = softmax_scale * dS K,   dK = softmax_scale * dS^T Q
//
// (the derivation is on the page of backward_01_base). P is recomputed from Q, K and the LSE:
// P[i, j] = exp(softmax_scale * q_i . k_j - lse[i]), with no pass over the keys to find the max.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "params.h"

namespace fa {

// The forward's log-sum-exp as the backward reads it: [batch, heads, seq_q] fp32, the sequence
// contiguous, exactly what AttentionParams::lse received (the same pointer and strides).
struct LseInput {
  const float* data = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
};

// dQ, dK, dV of O = softmax(Q K^T * softmax_scale) V, per batch and query head.
// q, o, d_o, dq: [batch, seq_q, heads, head_dim]; k, v, dk, dv: [batch, seq_kv, kv_heads, head_dim];
// every tensor a TensorView of its own (any batch/seq/head strides, multiples of 8 elements, head_dim
// contiguous), all of one dtype. dq, dk and dv are written, never read; they must not overlap each
// other or an input (not checked: the launcher cannot see the extent of foreign memory cheaply).
struct BackwardParams {
  TensorView q, k, v, o, d_o;  // inputs: the forward's inputs, its output O, and dL/dO
  TensorView dq, dk, dv;       // outputs
  LseInput lse;                // input: the forward's log-sum-exp (required)
  int64_t batch = 0;
  int64_t heads = 0;
  // As in AttentionParams: always set; equal to heads without grouped-query attention. With fewer
  // (stages that declare the backward feature "gqa"), dK and dV of a key/value head are the sums
  // over the query heads of its group.
  int64_t kv_heads = 0;
  int64_t seq_q = 0;
  int64_t seq_kv = 0;
  int64_t head_dim = 0;
  float softmax_scale = 0.0f;  // the forward's
  bool causal = false;         // the forward's masking; only with the backward feature "causal"
  // dQ's sum over the K/V blocks in a fixed order, so that repeated calls give bitwise the same
  // gradients (FlashAttention's deterministic=True); only with the backward feature "deterministic".
  // Without it the thread blocks add to dQ with atomics in whatever order they reach them.
  bool deterministic = false;
};

// What a stage's backward is. Its fields mirror StageInfo's facts of the kernel; features are
// declared in the stage's stage.json under "backward": {"features": [...]} (the same names as the
// forward's: any_length, causal, gqa; and the backward's own, deterministic), independently of the
// forward's.
struct BackwardInfo {
  unsigned features;  // Feature bits (params.h), of the backward alone
  int block_q;        // query rows per iteration (seq_q must be a multiple, unless any_length)
  int block_kv;       // key/value rows per thread block (seq_kv must be a multiple, unless any_length)
  int warps;          // warps per thread block of the main kernel
  std::vector<int> head_dims;
  std::vector<DType> dtypes;
  // Validates (validate_backward_params, then nothing is launched on failure), allocates its
  // workspace in stream order on `stream`, launches, frees the workspace in stream order, and
  // returns without waiting for the GPU.
  Status (*launch)(const BackwardParams& params, cudaStream_t stream);
};

// Checks everything the backward's launcher contract promises to reject, for `stage` (its name for
// the messages) and its backward: sizes, kv_heads, head_dim, block multiples, causal, dtypes, every
// tensor's pointer and strides, the LSE's pointer and strides, the softmax scale, the grid. Every
// backward launcher calls it first and launches nothing if it fails.
Status validate_backward_params(const BackwardParams& params, const StageInfo& stage);

// FLOPs of one backward call as the FlashAttention papers count them: 2.5 times the forward's
// 4 * batch * heads * seq_q * seq_kv * head_dim (five matrix products of the forward's size against
// the forward's two), halved for causal at seq_q == seq_kv.
double backward_flops(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim, bool causal);

}  // namespace fa
