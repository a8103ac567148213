// Small helpers shared by the CPU tests: host tensors filled with seeded random data, no GPU.
#pragma once

#include <cstdint>
#include <random>

#include "common/tensor.h"

namespace fa_test {

// A host tensor of the given shape and layout. Every element, gaps included, starts as 0xFFFF
// (NaN in fp16 and bf16): the same poison the harness puts in device buffers.
inline fa::HostTensor make_host_tensor(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                                       fa::DType dtype, fa::LayoutSpec layout = fa::LayoutKind::kContiguous) {
  fa::HostTensor t;
  t.layout = fa::TensorLayout::make(batch, seq, heads, head_dim, layout);
  t.dtype = dtype;
  t.raw.assign(static_cast<size_t>(t.layout.storage_elems), 0xFFFF);
  return t;
}

// N(0, stddev^2) in every logical element, rounded to the tensor's dtype.
inline void fill_normal(fa::HostTensor& t, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  const fa::TensorLayout& l = t.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) t.set(b, s, h, d, normal(rng));
}

}  // namespace fa_test
