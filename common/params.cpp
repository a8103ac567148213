#include "params.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

namespace fa {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
  }
  return "invalid";
}

bool parse_dtype(const std::string& text, DType* out) {
  if (text == "fp16" || text == "float16" || text == "half") {
    *out = DType::kFloat16;
    return true;
  }
  if (text == "bf16" || text == "bfloat16") {
    *out = DType::kBFloat16;
    return true;
  }
  return false;
}

namespace {

bool valid_dtype(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

// Checks one tensor: non-null, 16-byte aligned, and strides that keep every 16-byte row chunk
// aligned. 8 elements of 2 bytes are 16 bytes.
std::string check_tensor(const char* name, const TensorView& t) {
  std::ostringstream err;
  if (t.data == nullptr) {
    err << name << " is a null pointer";
  } else if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    err << name << " pointer is not 16-byte aligned";
  } else if (t.batch_stride <= 0 || t.seq_stride <= 0 || t.head_stride <= 0) {
    err << name << " strides must be positive (batch " << t.batch_stride << ", seq " << t.seq_stride
        << ", head " << t.head_stride << ")";
  } else if (t.batch_stride % 8 != 0 || t.seq_stride % 8 != 0 || t.head_stride % 8 != 0) {
    err << name << " strides (batch " << t.batch_stride << ", seq " << t.seq_stride << ", head "
        << t.head_stride << ") must be multiples of 8 elements so every row is 16-byte aligned";
  }
  return err.str();
}

constexpr int64_t kMaxAlibiSeq = int64_t{1} << 23;

// The LSE output: 4-byte aligned, positive strides, and every (batch, head) row of seq_q floats in
// memory of its own: taking the dimensions with more than one row by increasing stride, each stride
// must step over everything the smaller ones span (a dimension of size 1 never steps).
std::string check_lse(const AttentionParams& p) {
  const LseOutput& lse = p.lse;
  std::ostringstream err;
  if (reinterpret_cast<uintptr_t>(lse.data) % alignof(float) != 0) {
    err << "lse pointer is not 4-byte aligned";
  } else if (lse.batch_stride <= 0 || lse.head_stride <= 0) {
    err << "lse strides must be positive (batch " << lse.batch_stride << ", head " << lse.head_stride << ")";
  } else {
    std::vector<std::pair<int64_t, int64_t>> steps;  // (stride, count) of the dimensions that step
    if (p.batch > 1) steps.push_back({lse.batch_stride, p.batch});
    if (p.heads > 1) steps.push_back({lse.head_stride, p.heads});
    std::sort(steps.begin(), steps.end());
    int64_t span = p.seq_q;  // elements covered so far, from the start of one row
    for (const auto& [stride, count] : steps) {
      if (stride < span) {
        err << "lse strides (batch " << lse.batch_stride << ", head " << lse.head_stride
            << ") overlap: every (batch, head) row of seq_q " << p.seq_q << " floats needs memory of its own";
        break;
      }
      constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
      span = stride > kMax / count ? kMax : stride * count;
    }
  }
  return err.str();
}

// The paged KV cache (params.h): what the host can check of it. The table's entries are in device
// memory: a page index outside the pool is the caller's error, as in FlashAttention.
std::string check_block_table(const AttentionParams& p, const StageInfo& stage) {
  std::ostringstream err;
  if (reinterpret_cast<uintptr_t>(p.block_table) % alignof(int32_t) != 0) {
    err << "block_table pointer is not 4-byte aligned";
  } else if ((stage.features & kFeaturePagedKv) == 0) {
    err << "a paged KV cache (block_table) is not supported by this stage (it does not declare the feature "
           "\"paged_kv\"; leave block_table null)";
  } else if (p.page_size < 16 || p.page_size % 16 != 0) {
    err << "page_size " << p.page_size << " must be a positive multiple of 16 rows";
  } else if (p.max_pages <= 0) {
    err << "max_pages " << p.max_pages << " must be at least 1 (entries per row of the block table)";
  } else if (p.max_pages > INT_MAX / p.page_size) {
    err << "max_pages " << p.max_pages << " x page_size " << p.page_size
        << " keys per sequence exceed 2^31-1 (the kernel counts keys in 32 bits)";
  } else if (p.max_pages * p.page_size < p.seq_kv) {
    err << "max_pages " << p.max_pages << " x page_size " << p.page_size << " = " << p.max_pages * p.page_size
        << " keys per sequence, fewer than seq_kv " << p.seq_kv;
  } else if (p.block_table_batch_stride < 0 ||
             (p.batch > 1 && p.block_table_batch_stride != 0 && p.block_table_batch_stride < p.max_pages)) {
    err << "block_table batch stride " << p.block_table_batch_stride
        << " must be 0 (one row for every sequence) or at least max_pages " << p.max_pages;
  }
  return err.str();
}

}  // namespace

Status validate_params(const AttentionParams& p, const StageInfo& stage) {
  std::ostringstream err;
  err << stage.name << ": ";
  if (p.batch <= 0 || p.heads <= 0 || p.seq_q <= 0 || p.seq_kv <= 0 || p.head_dim <= 0) {
    err << "sizes must be positive (batch " << p.batch << ", heads " << p.heads << ", seq_q " << p.seq_q
        << ", seq_kv " << p.seq_kv << ", head_dim " << p.head_dim << ")";
    return Status::error(err.str());
  }
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0) {
    err << "kv_heads " << p.kv_heads << " must be at least 1 and divide heads " << p.heads
        << " (set kv_heads = heads without grouped-query attention)";
    return Status::error(err.str());
  }
  if (p.kv_heads != p.heads && (stage.features & kFeatureGqa) == 0) {
    err << "grouped-query attention (kv_heads " << p.kv_heads << " != heads " << p.heads
        << ") is not supported by this stage (it does not declare the feature \"gqa\")";
    return Status::error(err.str());
  }
  if (std::find(stage.head_dims.begin(), stage.head_dims.end(), p.head_dim) == stage.head_dims.end()) {
    err << "head_dim " << p.head_dim << " is not supported (supported:";
    for (int d : stage.head_dims) err << " " << d;
    err << ")";
    return Status::error(err.str());
  }
  // A stage that declares any_length handles partial blocks itself; the others compute whole tiles.
  const bool any_length = (stage.features & kFeatureAnyLength) != 0;
  if (!any_length && p.seq_q % stage.block_q != 0) {
    err << "seq_q " << p.seq_q << " is not a multiple of the block size " << stage.block_q;
    return Status::error(err.str());
  }
  if (!any_length && p.seq_kv % stage.block_kv != 0) {
    err << "seq_kv " << p.seq_kv << " is not a multiple of the block size " << stage.block_kv;
    return Status::error(err.str());
  }
  if (p.causal && (stage.features & kFeatureCausal) == 0) {
    err << "causal masking is not supported by this stage (it does not declare the feature \"causal\")";
    return Status::error(err.str());
  }
  const TensorView* tensors[4] = {&p.q, &p.k, &p.v, &p.o};
  const char* names[4] = {"q", "k", "v", "o"};
  for (int i = 0; i < 4; ++i) {
    if (!valid_dtype(tensors[i]->dtype)) {
      err << names[i] << " has an unsupported dtype (only fp16 and bf16)";
      return Status::error(err.str());
    }
  }
  for (int i = 1; i < 4; ++i) {
    if (tensors[i]->dtype != p.q.dtype) {
      err << "q, k, v and o must share one dtype (q is " << dtype_name(p.q.dtype) << ", " << names[i]
          << " is " << dtype_name(tensors[i]->dtype) << ")";
      return Status::error(err.str());
    }
  }
  if (std::find(stage.dtypes.begin(), stage.dtypes.end(), p.q.dtype) == stage.dtypes.end()) {
    err << "dtype " << dtype_name(p.q.dtype) << " is not supported by this stage";
    return Status::error(err.str());
  }
  for (int i = 0; i < 4; ++i) {
    std::string what = check_tensor(names[i], *tensors[i]);
    if (!what.empty()) return Status::error(err.str() + what);
  }
  if (p.lse.data != nullptr) {
    std::string what = check_lse(p);
    if (!what.empty()) return Status::error(err.str() + what);
    if ((stage.features & kFeatureLse) == 0) {
      err << "the log-sum-exp output (lse) is not supported by this stage (it does not declare the feature "
             "\"lse\")";
      return Status::error(err.str());
    }
  }
  if (p.alibi.data != nullptr) {
    if (reinterpret_cast<uintptr_t>(p.alibi.data) % alignof(float) != 0) {
      err << "alibi slopes pointer is not 4-byte aligned";
      return Status::error(err.str());
    }
    if (p.alibi.batch_stride < 0 ||
        (p.alibi.batch_stride > 0 && p.alibi.batch_stride < p.heads && p.batch > 1)) {
      err << "alibi slopes batch stride " << p.alibi.batch_stride
          << " must be 0 (one [heads] row for every batch) or "
          << "at least heads " << p.heads;
      return Status::error(err.str());
    }
    if (p.seq_q > kMaxAlibiSeq || p.seq_kv > kMaxAlibiSeq) {
      err << "alibi needs seq_q and seq_kv at most 2^23 (got " << p.seq_q << " and " << p.seq_kv
          << "): the distances are computed as fp32 integers";
      return Status::error(err.str());
    }
    if ((stage.features & kFeatureAlibi) == 0) {
      err << "alibi is not supported by this stage (it does not declare the feature \"alibi\")";
      return Status::error(err.str());
    }
  }
  if (p.num_splits < 0 || p.num_splits > kMaxNumSplits) {
    err << "num_splits " << p.num_splits << " must be 0 (the stage chooses) or 1 to " << kMaxNumSplits;
    return Status::error(err.str());
  }
  if (p.num_splits != 0 && (stage.features & kFeatureSplitKv) == 0) {
    err << "num_splits " << p.num_splits << " (a forced split-KV count) is not supported by this stage (it does "
        << "not declare the feature \"split_kv\"; leave num_splits 0)";
    return Status::error(err.str());
  }
  if (p.seqlens_k != nullptr) {
    if (reinterpret_cast<uintptr_t>(p.seqlens_k) % alignof(int32_t) != 0) {
      err << "seqlens_k pointer is not 4-byte aligned";
      return Status::error(err.str());
    }
    if ((stage.features & kFeatureSeqlensK) == 0) {
      err << "per-sequence key lengths (seqlens_k) are not supported by this stage (it does not declare the "
             "feature \"seqlens_k\"; leave seqlens_k null)";
      return Status::error(err.str());
    }
  }
  if (p.block_table != nullptr) {
    std::string what = check_block_table(p, stage);
    if (!what.empty()) return Status::error(err.str() + what);
  } else if (p.page_size != 0 || p.max_pages != 0) {
    err << "page_size " << p.page_size << " and max_pages " << p.max_pages
        << " describe a paged KV cache, but block_table is null (leave them 0 without one)";
    return Status::error(err.str());
  }
  // Positive, not just non-zero: the stages from ampere_07_fast_softmax on take the row max of the
  // unscaled scores, which is the max of the scaled scores only when the scale is positive.
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.0f) {
    err << "softmax_scale must be finite and positive (got " << p.softmax_scale << ")";
    return Status::error(err.str());
  }
  // One thread block per (batch, head, query block), all in gridDim.x (limit 2^31 - 1), so batch
  // and head counts are not capped by the 65535 limit of gridDim.y/z.
  const int64_t q_blocks = (p.seq_q + stage.block_q - 1) / stage.block_q;  // the last one may be partial
  if (p.batch > INT_MAX || p.heads > INT_MAX || q_blocks > INT_MAX / p.heads / p.batch) {
    err << "grid of " << p.batch << " x " << p.heads << " x " << q_blocks
        << " thread blocks exceeds CUDA's limit of 2^31-1 blocks";
    return Status::error(err.str());
  }
  return Status::success();
}

std::string check_tensor_view(const char* name, const TensorView& t) {
  return check_tensor(name, t);
}

Status launch_status(const char* stage_name) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::success();
  return Status::error(std::string(stage_name) + ": kernel launch failed: " + cudaGetErrorString(e));
}

}  // namespace fa
