// The backward's command-line runner: for every stage with a backward launcher (StageInfo::backward),
// runs the stage's forward with the LSE, then its backward, checks dQ, dK and dV of sampled
// (batch, head) pairs against the fp64 reference (checker.h: check_gradient), and only then times
// the backward alone with CUDA events. A result that fails its check gets no time, and the runner
// exits non-zero. TFLOP/s count the backward's FLOPs as 2.5 times the forward's (fa::backward_flops).
//
//   fa_backward_run [--stages all|ID,...] [--dtypes fp16,bf16] [--head-dims 64,128]
//                   [--seqs 1024,2048,4096,8192] [--batch 16] [--heads 32]
//                   [--warmup 3] [--reps 20] [--check-heads 2]
//
// One line per (stage, dtype, head_dim, seq), comma-separated: stage, dtype, head_dim, batch, heads,
// seq, status (PASS / FAIL: ... / SKIP: ...), min_ms, median_ms, tflops (at the minimum).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/checker.h"
#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/reference.h"
#include "common/registry.h"

using namespace fa;

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) parts.push_back(item);
  return parts;
}

struct Options {
  std::string stages = "all", dtypes = "fp16", head_dims = "128", seqs = "1024,2048,4096,8192";
  int64_t batch = 16, heads = 32;
  int warmup = 3, reps = 20, check_heads = 2;
};

// One (batch, head) of a [batch, seq, heads, head_dim] host tensor, as a [1, seq, 1, head_dim] one.
HostTensor slice(const HostTensor& t, int64_t b, int64_t h) {
  HostTensor out;
  out.layout = TensorLayout::make(1, t.layout.seq, 1, t.layout.head_dim, LayoutKind::kContiguous);
  out.dtype = t.dtype;
  out.raw.assign(static_cast<size_t>(out.layout.storage_elems), 0xFFFF);
  for (int64_t s = 0; s < t.layout.seq; ++s)
    for (int64_t d = 0; d < t.layout.head_dim; ++d)
      out.raw[static_cast<size_t>(out.layout.offset(0, s, 0, d))] = t.raw[static_cast<size_t>(t.layout.offset(b, s, h, d))];
  return out;
}

// "" if dQ, dK, dV of the sampled heads pass, else the first failure. The heads: the first, the
// last, and evenly spaced ones between (each checked in full: its fp64 reference costs
// seq_q * seq_kv * head_dim multiply-adds a few times over).
std::string check(Problem& problem, const DeviceTensor& d_o, const DeviceTensor& dq, const DeviceTensor& dk,
                  const DeviceTensor& dv, int check_heads) {
  const HostTensor q = problem.host_q(), k = problem.host_k(), v = problem.host_v();
  const HostTensor o = problem.o().download(), d_o_host = d_o.download();
  const HostTensor dq_host = dq.download(), dk_host = dk.download(), dv_host = dv.download();
  const int64_t pairs = problem.config().batch * problem.config().heads;
  const int n = static_cast<int>(std::min<int64_t>(std::max(check_heads, 1), pairs));
  for (int i = 0; i < n; ++i) {
    const int64_t pair = n == 1 ? 0 : i * (pairs - 1) / (n - 1);
    const int64_t b = pair / problem.config().heads, h = pair % problem.config().heads;
    const HostTensor qs = slice(q, b, h), ks = slice(k, b, h), vs = slice(v, b, h), os = slice(o, b, h);
    const HostTensor d_os = slice(d_o_host, b, h);
    const BackwardFp64 ref = reference_backward_fp64(Fp64Tensor::from(qs), Fp64Tensor::from(ks), Fp64Tensor::from(vs),
                                                     Fp64Tensor::from(d_os), problem.softmax_scale(), false);
    const BackwardLowp base = baseline_backward_lowp(qs, ks, vs, os, d_os, problem.softmax_scale(), false);
    const CheckResult results[3] = {check_gradient("dq", ref.dq, base.dq, slice(dq_host, b, h), {}, &ref.dq_terms),
                                    check_gradient("dk", ref.dk, base.dk, slice(dk_host, b, h), {}, &ref.dk_terms),
                                    check_gradient("dv", ref.dv, base.dv, slice(dv_host, b, h), {}, &ref.dv_terms)};
    for (const CheckResult& r : results)
      if (!r.passed)
        return "batch " + std::to_string(b) + ", head " + std::to_string(h) + ": " + r.first_failure;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fa_backward_run: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--stages") opt.stages = value();
    else if (arg == "--dtypes") opt.dtypes = value();
    else if (arg == "--head-dims") opt.head_dims = value();
    else if (arg == "--seqs") opt.seqs = value();
    else if (arg == "--batch") opt.batch = std::atoll(value().c_str());
    else if (arg == "--heads") opt.heads = std::atoll(value().c_str());
    else if (arg == "--warmup") opt.warmup = std::atoi(value().c_str());
    else if (arg == "--reps") opt.reps = std::atoi(value().c_str());
    else if (arg == "--check-heads") opt.check_heads = std::atoi(value().c_str());
    else {
      std::fprintf(stderr, "fa_backward_run: unknown option %s (see the comment at the top of "
                           "tools/fa_backward_run.cpp)\n", arg.c_str());
      return 2;
    }
  }
  if (opt.reps < 1 || opt.warmup < 0 || opt.batch < 1 || opt.heads < 1) {
    std::fprintf(stderr, "fa_backward_run: --reps, --batch and --heads must be at least 1, --warmup at least 0\n");
    return 2;
  }
  const CudaDeviceProbe gpu = probe_cuda_device();
  if (!gpu.usable()) {
    std::printf("SKIPPED: %s\n", gpu.message.c_str());
    return 3;
  }
  std::vector<const StageInfo*> stages;
  for (const StageInfo* stage : registered_stages()) {
    if (stage->backward == nullptr) continue;
    bool chosen = opt.stages == "all";
    for (const std::string& item : split(opt.stages)) chosen = chosen || find_stage(item) == stage;
    if (chosen) stages.push_back(stage);
  }
  if (stages.empty()) {
    std::fprintf(stderr, "fa_backward_run: no stage with a backward matches --stages %s\n", opt.stages.c_str());
    return 2;
  }
  bool failed = false;
  std::printf("stage,dtype,head_dim,batch,heads,seq,status,min_ms,median_ms,tflops\n");
  for (const StageInfo* stage : stages)
    for (const std::string& dtype_text : split(opt.dtypes))
      for (const std::string& head_dim_text : split(opt.head_dims))
        for (const std::string& seq_text : split(opt.seqs)) {
          DType dtype;
          if (!parse_dtype(dtype_text, &dtype)) {
            std::fprintf(stderr, "fa_backward_run: unknown dtype %s\n", dtype_text.c_str());
            return 2;
          }
          ProblemConfig c;
          c.batch = opt.batch;
          c.heads = opt.heads;
          c.kv_heads = opt.heads;
          c.seq_q = c.seq_kv = std::atoll(seq_text.c_str());
          c.head_dim = std::atoi(head_dim_text.c_str());
          c.dtype = dtype;
          c.lse = true;
          c.seed = static_cast<uint64_t>(c.seq_q * 31 + c.head_dim);
          std::printf("%s,%s,%lld,%lld,%lld,%lld,", stage->name, dtype_name(dtype), static_cast<long long>(c.head_dim),
                      static_cast<long long>(c.batch), static_cast<long long>(c.heads),
                      static_cast<long long>(c.seq_q));
          std::fflush(stdout);
          Problem problem(c);
          const Status forward = stage->launch(problem.params(), nullptr);
          if (!forward.ok()) {
            std::printf("SKIP: the forward rejects this shape: %s,,,\n", forward.message.c_str());
            continue;
          }
          DeviceTensor d_o(TensorLayout::make(c.batch, c.seq_q, c.heads, c.head_dim, LayoutKind::kContiguous), dtype);
          DeviceTensor dq(d_o.layout(), dtype), dk(d_o.layout(), dtype), dv(d_o.layout(), dtype);
          d_o.fill_normal(c.seed + 1, 1.0f);
          dq.fill_bytes(0xFF);
          dk.fill_bytes(0xFF);
          dv.fill_bytes(0xFF);
          const AttentionParams f = problem.params();
          BackwardParams p;
          p.q = f.q, p.k = f.k, p.v = f.v, p.o = f.o, p.d_o = d_o.view();
          p.dq = dq.view(), p.dk = dk.view(), p.dv = dv.view();
          p.lse.data = f.lse.data, p.lse.batch_stride = f.lse.batch_stride, p.lse.head_stride = f.lse.head_stride;
          p.batch = f.batch, p.heads = f.heads, p.kv_heads = f.kv_heads, p.seq_q = f.seq_q, p.seq_kv = f.seq_kv;
          p.head_dim = f.head_dim, p.softmax_scale = f.softmax_scale;
          const Status launched = stage->backward->launch(p, nullptr);
          if (!launched.ok()) {
            std::printf("SKIP: %s,,,\n", launched.message.c_str());
            continue;
          }
          FA_CUDA_CHECK(cudaDeviceSynchronize());
          const std::string why = check(problem, d_o, dq, dk, dv, opt.check_heads);
          if (!why.empty()) {
            std::printf("FAIL: %s,,,\n", why.c_str());
            failed = true;
            continue;
          }
          // The timed call is the launcher's whole work: the workspace, D, the main kernel and dQ's conversion.
          for (int i = 0; i < opt.warmup; ++i) {
            const Status s = stage->backward->launch(p, nullptr);
            if (!s.ok()) {
              std::fprintf(stderr, "%s\n", s.message.c_str());
              return 1;
            }
          }
          std::vector<float> ms(static_cast<size_t>(opt.reps));
          cudaEvent_t start, stop;
          FA_CUDA_CHECK(cudaEventCreate(&start));
          FA_CUDA_CHECK(cudaEventCreate(&stop));
          for (float& t : ms) {
            FA_CUDA_CHECK(cudaEventRecord(start));
            const Status s = stage->backward->launch(p, nullptr);
            FA_CUDA_CHECK(cudaEventRecord(stop));
            FA_CUDA_CHECK(cudaEventSynchronize(stop));
            if (!s.ok()) {
              std::fprintf(stderr, "%s\n", s.message.c_str());
              return 1;
            }
            FA_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
          }
          cudaEventDestroy(start);
          cudaEventDestroy(stop);
          std::vector<float> sorted = ms;
          std::sort(sorted.begin(), sorted.end());
          const double min_ms = sorted.front(), median_ms = sorted[sorted.size() / 2];
          const double tflops = backward_flops(c.batch, c.heads, c.seq_q, c.seq_kv, c.head_dim, false) / (min_ms * 1e9);
          std::printf("PASS,%.4f,%.4f,%.1f\n", min_ms, median_ms, tflops);
          std::fflush(stdout);
        }
  return failed ? 1 : 0;
}
