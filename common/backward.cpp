#include "backward.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <sstream>
#include <string>

namespace fa {

Status validate_backward_params(const BackwardParams& p, const StageInfo& stage) {
  std::ostringstream err;
  err << stage.name << " (backward): ";
  const auto fail = [&](const std::string& what) { return Status::error(err.str() + what); };
  if (stage.backward == nullptr || stage.backward->launch == nullptr)
    return fail("this stage has no backward pass");
  const BackwardInfo& bwd = *stage.backward;
  std::ostringstream what;
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0 || p.seq_kv <= 0 || p.head_dim <= 0) {
    what << "sizes must be positive (batch " << p.batch << ", heads " << p.heads << ", seq_q " << p.seq_q
         << ", seq_kv " << p.seq_kv << ", head_dim " << p.head_dim << ")";
    return fail(what.str());
  }
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0) {
    what << "kv_heads " << p.kv_heads << " must be at least 1 and divide heads " << p.heads
         << " (set kv_heads = heads without grouped-query attention)";
    return fail(what.str());
  }
  if (p.kv_heads != p.heads && (bwd.features & kFeatureGqa) == 0) {
    what << "grouped-query attention (kv_heads " << p.kv_heads << " != heads " << p.heads
         << ") is not supported by this stage's backward (it does not declare the backward feature \"gqa\")";
    return fail(what.str());
  }
  if (std::find(bwd.head_dims.begin(), bwd.head_dims.end(), p.head_dim) == bwd.head_dims.end()) {
    what << "head_dim " << p.head_dim << " is not supported (supported:";
    for (int d : bwd.head_dims) what << " " << d;
    what << ")";
    return fail(what.str());
  }
  const bool any_length = (bwd.features & kFeatureAnyLength) != 0;
  if (!any_length && p.seq_q % bwd.block_q != 0) {
    what << "seq_q " << p.seq_q << " is not a multiple of the backward's block size " << bwd.block_q
         << " (the backward does not declare the feature \"any_length\")";
    return fail(what.str());
  }
  if (!any_length && p.seq_kv % bwd.block_kv != 0) {
    what << "seq_kv " << p.seq_kv << " is not a multiple of the backward's block size " << bwd.block_kv
         << " (the backward does not declare the feature \"any_length\")";
    return fail(what.str());
  }
  if (p.causal && (bwd.features & kFeatureCausal) == 0)
    return fail("causal masking is not supported by this stage's backward (it does not declare the backward "
                "feature \"causal\")");
  if (p.deterministic && (bwd.features & kFeatureDeterministic) == 0)
    return fail("the deterministic mode is not supported by this stage's backward (it does not declare the "
                "backward feature \"deterministic\")");
  const TensorView* tensors[8] = {&p.q, &p.k, &p.v, &p.o, &p.d_o, &p.dq, &p.dk, &p.dv};
  const char* names[8] = {"q", "k", "v", "o", "d_o", "dq", "dk", "dv"};
  for (int i = 0; i < 8; ++i) {
    if (tensors[i]->dtype != DType::kFloat16 && tensors[i]->dtype != DType::kBFloat16) {
      what << names[i] << " has an unsupported dtype (only fp16 and bf16)";
      return fail(what.str());
    }
    if (tensors[i]->dtype != p.q.dtype) {
      what << "every tensor must have q's dtype (q is " << dtype_name(p.q.dtype) << ", " << names[i] << " is "
           << dtype_name(tensors[i]->dtype) << ")";
      return fail(what.str());
    }
  }
  if (std::find(bwd.dtypes.begin(), bwd.dtypes.end(), p.q.dtype) == bwd.dtypes.end())
    return fail(std::string("dtype ") + dtype_name(p.q.dtype) + " is not supported by this stage's backward");
  for (int i = 0; i < 8; ++i) {
    const std::string bad = check_tensor_view(names[i], *tensors[i]);
    if (!bad.empty()) return fail(bad);
  }
  // The LSE is read, never written, so rows may share memory; it must be there and aligned.
  if (p.lse.data == nullptr)
    return fail("lse is a null pointer: the backward recomputes P from the forward's log-sum-exp "
                "(run the forward with AttentionParams::lse set)");
  if (reinterpret_cast<uintptr_t>(p.lse.data) % alignof(float) != 0) return fail("lse pointer is not 4-byte aligned");
  if (p.lse.batch_stride <= 0 || p.lse.head_stride <= 0) {
    what << "lse strides must be positive (batch " << p.lse.batch_stride << ", head " << p.lse.head_stride << ")";
    return fail(what.str());
  }
  // Positive: the recomputation exp(scale * s - lse) is valid for any scale, but the forward stages
  // only accept positive ones, and the LSE comes from them.
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.0f) {
    what << "softmax_scale must be finite and positive (got " << p.softmax_scale << ")";
    return fail(what.str());
  }
  // One thread block per (batch, head, K/V block), all in gridDim.x; the other kernels are smaller.
  const int64_t kv_blocks = (p.seq_kv + bwd.block_kv - 1) / bwd.block_kv;
  if (p.batch > INT_MAX || p.heads > INT_MAX || kv_blocks > INT_MAX / p.heads / p.batch) {
    what << "grid of " << p.batch << " x " << p.heads << " x " << kv_blocks
         << " thread blocks exceeds CUDA's limit of 2^31-1 blocks";
    return fail(what.str());
  }
  return Status::success();
}

double backward_flops(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim, bool causal) {
  const double forward = 4.0 * static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(seq_q) *
                         static_cast<double>(seq_kv) * static_cast<double>(head_dim);
  return 2.5 * forward * (causal && seq_q == seq_kv ? 0.5 : 1.0);
}

}  // namespace fa
