#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa {

int64_t visible_keys(int64_t s, int64_t seq_q, int64_t seq_kv, bool causal) {
  return causal ? std::clamp<int64_t>(s + seq_kv - seq_q + 1, 0, seq_kv) : seq_kv;
}

int64_t kv_head_of(int64_t h, int64_t heads, int64_t kv_heads) {
  if (kv_heads <= 0 || heads % kv_heads != 0)
    throw std::invalid_argument("kv_heads " + std::to_string(kv_heads) + " does not divide heads " +
                                std::to_string(heads));
  return h / (heads / kv_heads);
}

double alibi_bias(double slope, int64_t s, int64_t j, int64_t seq_q, int64_t seq_kv) {
  return -slope * static_cast<double>(std::llabs(s + seq_kv - seq_q - j));
}

RowLogSumExp reference_row_fp64(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t b,
                                int64_t h, int64_t s, double scale, double* out, bool causal,
                                double alibi_slope) {
  const int64_t keys = visible_keys(s, q.layout.seq, k.layout.seq, causal), dim = q.layout.head_dim;
  const int64_t kv_h = kv_head_of(h, q.layout.heads, k.layout.heads);
  for (int64_t d = 0; d < dim; ++d) out[d] = 0.0;
  constexpr double kNoKey = -std::numeric_limits<double>::infinity();
  if (keys == 0) return {kNoKey, kNoKey};  // no key: 0, not the 0 / 0 of an empty softmax; log(0)
  std::vector<double> q_row(dim), scores(keys);
  for (int64_t d = 0; d < dim; ++d) q_row[d] = q.at(b, s, h, d);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < dim; ++d) dot += q_row[d] * static_cast<double>(k.at(b, j, kv_h, d));
    scores[j] = dot * scale + alibi_bias(alibi_slope, s, j, q.layout.seq, k.layout.seq);
    max_score = std::max(max_score, scores[j]);  // a NaN score never wins; it poisons the sum below
  }
  double sum = 0.0;
  for (int64_t j = 0; j < keys; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (int64_t j = 0; j < keys; ++j) {
    const double p = scores[j] / sum;
    for (int64_t d = 0; d < dim; ++d) out[d] += p * static_cast<double>(v.at(b, j, kv_h, d));
  }
  return {max_score + std::log(sum), max_score};
}

float baseline_row_lowp(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t b, int64_t h,
                        int64_t s, float scale, float* out, bool causal, float alibi_slope) {
  const int64_t keys = visible_keys(s, q.layout.seq, k.layout.seq, causal), dim = q.layout.head_dim;
  const int64_t kv_h = kv_head_of(h, q.layout.heads, k.layout.heads);
  const DType dtype = q.dtype;
  if (keys == 0) {
    for (int64_t d = 0; d < dim; ++d) out[d] = 0.0f;
    return -std::numeric_limits<float>::infinity();
  }
  std::vector<float> q_row(dim), scores(keys);
  for (int64_t d = 0; d < dim; ++d) q_row[d] = q.at(b, s, h, d);
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot += q_row[d] * k.at(b, j, kv_h, d);
    const float distance = static_cast<float>(std::llabs(s + k.layout.seq - q.layout.seq - j));
    scores[j] = dot * scale - alibi_slope * distance;
    max_score = std::max(max_score, scores[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < keys; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  std::vector<float> acc(dim, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    const float p = round_to_dtype(scores[j] / sum, dtype);
    for (int64_t d = 0; d < dim; ++d) acc[d] += p * v.at(b, j, kv_h, d);
  }
  for (int64_t d = 0; d < dim; ++d) out[d] = round_to_dtype(acc[d], dtype);
  return max_score + std::log(sum);
}

}  // namespace fa
