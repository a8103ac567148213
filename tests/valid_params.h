// A call that a stage's validation accepts, for the CPU tests of the launchers' contract: contiguous
// [batch, seq, heads, head_dim] tensors at fake, aligned, distinct device addresses, the stage's
// first head_dim and dtype, the default softmax scale, kv_heads == heads, no causal, LSE or ALiBi.
// The addresses are never dereferenced: these tests call validate_params, or a launcher only with
// parameters its validation rejects. Each test then changes the one thing it is about.
#pragma once

#include <cstdint>

#include "common/params.h"

namespace fa_test {

inline fa::AttentionParams valid_params(const fa::StageInfo& stage, int64_t batch, int64_t heads, int64_t seq_q,
                                        int64_t seq_kv) {
  fa::AttentionParams p;
  p.batch = batch;
  p.heads = heads;
  p.kv_heads = heads;
  p.seq_q = seq_q;
  p.seq_kv = seq_kv;
  p.head_dim = stage.head_dims.front();
  p.softmax_scale = fa::default_softmax_scale(p.head_dim);
  fa::TensorView* tensors[4] = {&p.q, &p.k, &p.v, &p.o};
  const int64_t seqs[4] = {seq_q, seq_kv, seq_kv, seq_q};
  for (int i = 0; i < 4; ++i) {
    tensors[i]->data = reinterpret_cast<void*>(uintptr_t{0x10000000} + uintptr_t(i + 1) * 0x1000000u);
    tensors[i]->dtype = stage.dtypes.front();
    tensors[i]->head_stride = p.head_dim;
    tensors[i]->seq_stride = heads * p.head_dim;
    tensors[i]->batch_stride = seqs[i] * heads * p.head_dim;
  }
  return p;
}

}  // namespace fa_test
