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

// ------------------------------------------------------------------------------------------------
// The backward pass

Fp64Tensor Fp64Tensor::from(const HostTensor& t) {
  const TensorLayout& l = t.layout;
  Fp64Tensor out(l.batch, l.seq, l.heads, l.head_dim);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) out.at(b, s, h, d) = t.at(b, s, h, d);
  return out;
}

BackwardFp64 reference_backward_fp64(const Fp64Tensor& q, const Fp64Tensor& k, const Fp64Tensor& v,
                                     const Fp64Tensor& d_o, double scale, bool causal) {
  const int64_t batch = q.batch, heads = q.heads, seq_q = q.seq, seq_kv = k.seq, dim = q.head_dim;
  if (k.batch != batch || v.batch != batch || d_o.batch != batch || v.seq != seq_kv || d_o.seq != seq_q ||
      k.heads != v.heads || d_o.heads != heads || k.head_dim != dim || v.head_dim != dim || d_o.head_dim != dim)
    throw std::invalid_argument("reference_backward_fp64: q, k, v and d_o have inconsistent shapes");
  BackwardFp64 r;
  r.o = Fp64Tensor(batch, seq_q, heads, dim);
  r.dq = Fp64Tensor(batch, seq_q, heads, dim);
  r.dk = Fp64Tensor(batch, seq_kv, k.heads, dim);
  r.dv = Fp64Tensor(batch, seq_kv, k.heads, dim);
  r.dq_terms = Fp64Tensor(batch, seq_q, heads, dim);
  r.dk_terms = Fp64Tensor(batch, seq_kv, k.heads, dim);
  r.dv_terms = Fp64Tensor(batch, seq_kv, k.heads, dim);
  const size_t rows = static_cast<size_t>(batch * heads * seq_q);
  r.lse.assign(rows, -std::numeric_limits<double>::infinity());
  r.d_from_o.assign(rows, 0.0);
  r.d_from_p.assign(rows, 0.0);
  std::vector<double> p, dp, abs_dp;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_h = kv_head_of(h, heads, k.heads);
      for (int64_t i = 0; i < seq_q; ++i) {
        const size_t row = static_cast<size_t>((b * heads + h) * seq_q + i);
        const int64_t keys = visible_keys(i, seq_q, seq_kv, causal);
        if (keys == 0) continue;  // O = 0, no gradient flows through this row
        // P: the softmax of the row's scaled scores.
        p.assign(static_cast<size_t>(keys), 0.0);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) dot += q.at(b, i, h, d) * k.at(b, j, kv_h, d);
          p[j] = dot * scale;
          max_score = std::max(max_score, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < keys; ++j) sum += (p[j] = std::exp(p[j] - max_score));
        for (int64_t j = 0; j < keys; ++j) p[j] /= sum;
        r.lse[row] = max_score + std::log(sum);
        // O = P V and dP = dO V^T; beside dP, the size of its terms, |dO_i|.|v_j|.
        dp.assign(static_cast<size_t>(keys), 0.0);
        abs_dp.assign(static_cast<size_t>(keys), 0.0);
        for (int64_t j = 0; j < keys; ++j)
          for (int64_t d = 0; d < dim; ++d) {
            const double v_jd = v.at(b, j, kv_h, d), term = d_o.at(b, i, h, d) * v_jd;
            r.o.at(b, i, h, d) += p[j] * v_jd;
            dp[j] += term;
            abs_dp[j] += std::fabs(term);
          }
        // D, both ways; beside D, the size of its terms, |dO_i|.|o_i|.
        double d_from_o = 0.0, d_from_p = 0.0, abs_d = 0.0;
        for (int64_t d = 0; d < dim; ++d) {
          const double term = d_o.at(b, i, h, d) * r.o.at(b, i, h, d);
          d_from_o += term;
          abs_d += std::fabs(term);
        }
        for (int64_t j = 0; j < keys; ++j) d_from_p += p[j] * dp[j];
        r.d_from_o[row] = d_from_o;
        r.d_from_p[row] = d_from_p;
        // dS = P * (dP - D); dQ = scale dS K; dK = scale dS^T Q; dV = P^T dO; and the sizes of their terms.
        for (int64_t j = 0; j < keys; ++j) {
          const double ds = p[j] * (dp[j] - d_from_o);
          const double ds_terms = p[j] * (abs_dp[j] + abs_d);
          for (int64_t d = 0; d < dim; ++d) {
            r.dq.at(b, i, h, d) += scale * ds * k.at(b, j, kv_h, d);
            r.dk.at(b, j, kv_h, d) += scale * ds * q.at(b, i, h, d);
            r.dv.at(b, j, kv_h, d) += p[j] * d_o.at(b, i, h, d);
            r.dq_terms.at(b, i, h, d) += scale * ds_terms * std::fabs(k.at(b, j, kv_h, d));
            r.dk_terms.at(b, j, kv_h, d) += scale * ds_terms * std::fabs(q.at(b, i, h, d));
            r.dv_terms.at(b, j, kv_h, d) += p[j] * std::fabs(d_o.at(b, i, h, d));
          }
        }
      }
    }
  return r;
}

namespace {
HostTensor dense_like(int64_t batch, int64_t seq, int64_t heads, int64_t dim, DType dtype) {
  HostTensor t;
  t.layout = TensorLayout::make(batch, seq, heads, dim, LayoutKind::kContiguous);
  t.dtype = dtype;
  t.raw.assign(static_cast<size_t>(t.layout.storage_elems), 0);
  return t;
}
}  // namespace

BackwardLowp baseline_backward_lowp(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                    const HostTensor& o, const HostTensor& d_o, float scale, bool causal) {
  const int64_t batch = q.layout.batch, heads = q.layout.heads, seq_q = q.layout.seq, seq_kv = k.layout.seq;
  const int64_t kv_heads = k.layout.heads, dim = q.layout.head_dim;
  const DType dtype = q.dtype;
  // fp32 sums, rounded to the dtype once at the end.
  std::vector<float> dq(static_cast<size_t>(batch * seq_q * heads * dim), 0.0f);
  std::vector<float> dk(static_cast<size_t>(batch * seq_kv * kv_heads * dim), 0.0f), dv(dk.size(), 0.0f);
  const auto q_index = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return static_cast<size_t>(((b * seq_q + s) * heads + h) * dim + d);
  };
  const auto kv_index = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return static_cast<size_t>(((b * seq_kv + s) * kv_heads + h) * dim + d);
  };
  std::vector<float> p, dp;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_h = kv_head_of(h, heads, kv_heads);
      for (int64_t i = 0; i < seq_q; ++i) {
        const int64_t keys = visible_keys(i, seq_q, seq_kv, causal);
        if (keys == 0) continue;
        p.assign(static_cast<size_t>(keys), 0.0f);
        float max_score = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < keys; ++j) {
          float dot = 0.0f;
          for (int64_t d = 0; d < dim; ++d) dot += q.at(b, i, h, d) * k.at(b, j, kv_h, d);
          p[j] = dot * scale;
          max_score = std::max(max_score, p[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < keys; ++j) sum += std::exp(p[j] - max_score);
        const float lse = max_score + std::log(sum);
        for (int64_t j = 0; j < keys; ++j) p[j] = std::exp(p[j] - lse);
        dp.assign(static_cast<size_t>(keys), 0.0f);
        for (int64_t j = 0; j < keys; ++j)
          for (int64_t d = 0; d < dim; ++d) dp[j] += d_o.at(b, i, h, d) * v.at(b, j, kv_h, d);
        float d_row = 0.0f;
        for (int64_t d = 0; d < dim; ++d) d_row += d_o.at(b, i, h, d) * o.at(b, i, h, d);
        for (int64_t j = 0; j < keys; ++j) {
          const float p16 = round_to_dtype(p[j], dtype);
          const float ds16 = round_to_dtype(p[j] * (dp[j] - d_row), dtype);
          for (int64_t d = 0; d < dim; ++d) {
            dq[q_index(b, i, h, d)] += ds16 * k.at(b, j, kv_h, d);
            dk[kv_index(b, j, kv_h, d)] += ds16 * q.at(b, i, h, d);
            dv[kv_index(b, j, kv_h, d)] += p16 * d_o.at(b, i, h, d);
          }
        }
      }
    }
  BackwardLowp r{dense_like(batch, seq_q, heads, dim, dtype), dense_like(batch, seq_kv, kv_heads, dim, dtype),
                 dense_like(batch, seq_kv, kv_heads, dim, dtype)};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t d = 0; d < dim; ++d) {
      for (int64_t s = 0; s < seq_q; ++s)
        for (int64_t h = 0; h < heads; ++h) r.dq.set(b, s, h, d, dq[q_index(b, s, h, d)] * scale);
      for (int64_t s = 0; s < seq_kv; ++s)
        for (int64_t h = 0; h < kv_heads; ++h) {
          r.dk.set(b, s, h, d, dk[kv_index(b, s, h, d)] * scale);
          r.dv.set(b, s, h, d, dv[kv_index(b, s, h, d)]);
        }
    }
  return r;
}

}  // namespace fa
