// The one interface every stage implements: what an attention call is (AttentionParams), what a
// stage is (StageInfo), and the launcher's error type (Status). Nothing here knows about any stage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fa {

struct BackwardInfo;  // common/backward.h

enum class DType : int { kFloat16 = 0, kBFloat16 = 1 };

const char* dtype_name(DType dtype);                    // "fp16" / "bf16"
bool parse_dtype(const std::string& text, DType* out);  // accepts fp16/float16/half, bf16/bfloat16
inline int dtype_bytes(DType) {
  return 2;
}

// A [batch, seq, heads, head_dim] tensor in device memory. Strides are in elements; head_dim is
// contiguous (stride 1). Any batch/seq/head strides are allowed as long as every row of head_dim
// elements starts on a 16-byte boundary (the kernels move rows in 16-byte chunks).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat16;
  int64_t batch_stride = 0;
  int64_t seq_stride = 0;
  int64_t head_stride = 0;
};

// The optional fp32 log-sum-exp output, [batch, heads, seq_q] with the sequence contiguous:
// lse[b, h, i] = log(sum over the keys j that query i sees of exp(softmax_scale * q_i . k_j)), the
// natural log of the scores the softmax takes (with the ALiBi bias, when given); -inf for a query
// that sees no key (the log of an empty sum). With it, attention over
// disjoint key ranges can be merged exactly (split-KV decoding), and a backward pass can recompute P
// without a second pass over the keys. Strides in elements (floats).
struct LseOutput {
  float* data = nullptr;  // nullptr: not requested (the default)
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
};

// ALiBi (attention with linear biases), as FlashAttention-2 defines it: the score of query i and key
// j becomes softmax_scale * q_i . k_j - slope * |i + seq_kv - seq_q - j| (the distance from the
// bottom-right-aligned diagonal), with one fp32 slope per head: slopes[b * batch_stride + h], so a
// batch stride of 0 shares [heads] slopes across the batch and a stride >= heads gives each batch
// its own row of [batch, heads]. The kernels compute the distances as fp32 integers, exact below
// 2^24: seq_q and seq_kv must be at most 2^23 with ALiBi.
struct AlibiSlopes {
  const float* data = nullptr;  // nullptr: no ALiBi (the default)
  int64_t batch_stride = 0;
};

// O = softmax(Q K^T * softmax_scale) V, per batch and query head.
// q/o: [batch, seq_q, heads, head_dim]; k/v: [batch, seq_kv, kv_heads, head_dim].
struct AttentionParams {
  TensorView q, k, v, o;
  int64_t batch = 0;
  int64_t heads = 0;
  // Key/value heads: query head h reads key/value head h / (heads / kv_heads). Always set it: equal
  // to heads for plain multi-head attention; fewer (dividing heads) for grouped-query attention, 1
  // for multi-query attention, only with stages that declare the feature "gqa". There is no default:
  // 0 is rejected, because a caller that forgot it while passing K and V with fewer heads would
  // otherwise have the kernel read past them.
  int64_t kv_heads = 0;
  int64_t seq_q = 0;
  int64_t seq_kv = 0;
  int64_t head_dim = 0;
  float softmax_scale = 0.0f;  // set it with default_softmax_scale() unless you want another one
  // Only for stages that declare the feature "lse"; each (batch, head) row of seq_q floats must have
  // memory of its own (the strides are checked for overlap).
  LseOutput lse;
  // Only for stages that declare the feature "alibi".
  AlibiSlopes alibi;
  // Causal masking aligned to the bottom-right (FlashAttention >= 2.1): query i sees the keys
  // j <= i + seq_kv - seq_q; a query that sees no key (seq_q > seq_kv) outputs zeros. Only for
  // stages that declare the feature "causal".
  bool causal = false;
  // Split-KV (Flash-Decoding): how many thread blocks share the keys of one (batch, head, query
  // block), each writing a partial result that a second kernel merges. 0: the stage chooses (its
  // heuristic); > 0 (at most kMaxNumSplits) only for stages that declare "split_kv", which then use
  // exactly this many, some of them empty when there are more splits than K/V blocks. The result
  // is the same softmax either way, up to fp32 rounding; tests force it to reach every split count.
  int num_splits = 0;  // 0: the stage chooses; > 0 only for stages that declare "split_kv"
  // Per-sequence key/value lengths, as an inference server keeps its KV cache: int32 [batch] in
  // device memory, or nullptr (the default): every sequence has seq_kv keys. Batch b's keys are
  // rows 0 .. seqlens_k[b] - 1 of its K and V, which are allocated for seq_kv, the longest; the rest
  // of the rows are never read. Causal aligns each sequence's queries to the bottom-right of its own
  // length (query i sees keys j <= i + seqlens_k[b] - seq_q), and a sequence of length 0 outputs
  // zeros and an LSE of -inf. The host cannot read the lengths (device memory, possibly still being
  // written on the launch stream): a kernel clamps each to [0, seq_kv], so an out-of-range value
  // reads no memory outside K and V. 4-byte aligned; only for stages that declare "seqlens_k".
  const int32_t* seqlens_k = nullptr;
  // A paged KV cache, as inference servers keep theirs (vLLM's PagedAttention, FlashAttention-2's
  // block_table): int32 [batch, max_pages] in device memory, or nullptr (the default: k and v are
  // [batch, seq_kv, kv_heads, head_dim] as above). With a table, k and v are POOLS of pages: their
  // batch_stride steps from one page to the next (a pool [num_pages, page_size, kv_heads, head_dim]
  // in the usual layout: row r of page p, head h, at data + p * batch_stride + r * seq_stride +
  // h * head_stride), and batch b's key j is row j % page_size of page
  // block_table[b * block_table_batch_stride + j / page_size]. seq_kv is the longest sequence's
  // length (at most max_pages * page_size); seqlens_k gives each sequence's own, as above (null:
  // every sequence has seq_kv keys, in the first ceil(seq_kv / page_size) entries of its row). Only
  // the entries of a sequence's keys are read. page_size is any multiple of 16 (16, 48, 64, 80, 256,
  // ...: a copy step's 8 or 16 rows never straddle a page); the
  // batch stride is 0 (one row shared by every sequence) or at least max_pages. The host cannot read
  // the table (device memory): a page index outside the pool is the caller's error, as in
  // FlashAttention, and the kernel reads wherever it points. 4-byte aligned; only for stages that
  // declare "paged_kv".
  const int32_t* block_table = nullptr;
  int64_t block_table_batch_stride = 0;  // in elements (int32)
  int64_t max_pages = 0;                 // entries per row of the block table
  int page_size = 0;                     // rows per page; 0 without a block table
};

// The most splits a caller may ask for: more than any GPU has SMs to fill, few enough that a split
// stage can put them in gridDim.y (at most 65535).
constexpr int kMaxNumSplits = 1024;

inline float default_softmax_scale(int64_t head_dim);  // 1 / sqrt(head_dim)

// The launcher's answer: empty message means success. A failed validation launches nothing.
struct Status {
  std::string message;
  bool ok() const { return message.empty(); }
  static Status success() { return {}; }
  static Status error(std::string text) { return Status{std::move(text)}; }
};

// Optional parts of the launcher contract. A stage declares the ones it supports in its
// stage.json ("features": [...]); validate_params rejects any other with a clear error.
enum Feature : unsigned {
  kFeatureAnyLength = 1u << 0,  // seq_q and seq_kv need not be multiples of the tiles
  kFeatureCausal = 1u << 1,     // causal masking, aligned to the bottom-right
  kFeatureGqa = 1u << 2,        // kv_heads dividing heads
  kFeatureLse = 1u << 3,        // the log-sum-exp output
  kFeatureAlibi = 1u << 4,      // ALiBi position bias
  kFeatureSplitKv = 1u << 5,    // the keys split across thread blocks; AttentionParams::num_splits
  kFeatureSeqlensK = 1u << 6,   // per-sequence key/value lengths; AttentionParams::seqlens_k
  kFeaturePagedKv = 1u << 7,    // a paged KV cache; AttentionParams::block_table
  kFeatureDeterministic = 1u << 8,  // backward only: dQ summed in a fixed order; BackwardParams::deterministic
};
namespace detail {
constexpr bool same_text(const char* a, const char* b) {
  return *a == *b && (*a == '\0' || same_text(a + 1, b + 1));
}
}  // namespace detail
// The bit of a feature named in stage.json; an unknown name does not compile.
constexpr unsigned feature_bit(const char* name) {
  return detail::same_text(name, "any_length")  ? kFeatureAnyLength
         : detail::same_text(name, "causal")    ? kFeatureCausal
         : detail::same_text(name, "gqa")       ? kFeatureGqa
         : detail::same_text(name, "lse")       ? kFeatureLse
         : detail::same_text(name, "alibi")     ? kFeatureAlibi
         : detail::same_text(name, "split_kv")  ? kFeatureSplitKv
         : detail::same_text(name, "seqlens_k") ? kFeatureSeqlensK
         : detail::same_text(name, "paged_kv")  ? kFeaturePagedKv
         : detail::same_text(name, "deterministic") ? kFeatureDeterministic
                                                : throw "unknown feature name in stage.json";
}

// What a stage is; the registry, runner, tests and benchmark read only this.
struct StageInfo {
  // Declared in stages/<name>/stage.json; CMake writes them into the stage's generated
  // stage_declaration.h as FA_STAGE_DECLARATION, the first thing in the stage's StageInfo.
  const char* name;            // folder name, e.g. "ampere_01_base"
  const char* parent;          // the stage its diff and page compare against; "" for a first stage
  const char* idea;            // the one optimization this stage adds, in a few words
  const char* target;          // "sm_80" (mma.sync, cp.async: sm_80 and newer) or "sm_90a"
  int min_compute_capability;  // 80 or 90
  bool arch_specific;          // sm_90a code runs on compute capability 9.0 only
  unsigned features;           // Feature bits
  // Facts of the kernel itself, in its kernel.cu:
  int block_q;   // Br: query rows per thread block (seq_q must be a multiple, unless any_length)
  int block_kv;  // Bc: key/value rows per iteration (seq_kv must be a multiple, unless any_length)
  int warps;     // warps per thread block
  std::vector<int> head_dims;
  std::vector<DType> dtypes;
  Status (*launch)(const AttentionParams& params, cudaStream_t stream);
  // The stage's backward pass (common/backward.h), or nullptr: only the stages of the backward track
  // have one, and the forward stages leave it out of their initializer.
  const BackwardInfo* backward = nullptr;
};

// Whether a GPU of compute capability `cc` (e.g. 90) runs the stage's machine code.
inline bool stage_runs_on(const StageInfo& stage, int cc) {
  return stage.arch_specific ? cc == stage.min_compute_capability : cc >= stage.min_compute_capability;
}

// Checks everything the launcher contract promises to reject, for a stage with the given tiles.
// Every stage's launch() calls this first and launches nothing if it fails.
Status validate_params(const AttentionParams& params, const StageInfo& stage);

// One tensor's pointer and strides as validate_params checks them (non-null, 16-byte aligned,
// positive strides that are multiples of 8 elements): "" if fine, else the reason, naming `name`.
std::string check_tensor_view(const char* name, const TensorView& t);

// Turns the last launch error into a Status ("<stage>: kernel launch failed: ...").
Status launch_status(const char* stage_name);

}  // namespace fa

#include <cmath>
inline float fa::default_softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}
