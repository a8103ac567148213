// The command-line runner: runs any linked stage on any shape, checks it against the fp64
// reference, and only then times it. A result that fails its check gets no time, and the runner
// exits non-zero.
//
//   fa_run [--stage all|NAME|NN[,..]] [--dtype fp16|bf16|all] [--head-dim 64|128|all]
//          [--batch 16] [--heads 32] [--seq 1024,2048,4096,8192] [--seq-kv N]
//          [--layout contiguous|padded|head-major] [--warmup 5] [--reps 20]
//          [--csv FILE] [--no-time] [--list]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/harness.h"
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
  int64_t batch = 16, heads = 32, seq_kv = 0;
  LayoutKind layout = LayoutKind::kContiguous;
  int warmup = 5, reps = 20;
  bool time = true, list = false;
  std::string csv;
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr, "fa_run: %s\n(see the comment at the top of tools/fa_run.cpp for the options)\n",
               message);
  std::exit(2);
}

int64_t parse_int(const std::string& text, const char* what) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0')
    usage((std::string("not an integer for ") + what + ": " + text).c_str());
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--stage")
      o.stages = value();
    else if (arg == "--dtype")
      o.dtypes = value();
    else if (arg == "--head-dim")
      o.head_dims = value();
    else if (arg == "--seq")
      o.seqs = value();
    else if (arg == "--seq-kv")
      o.seq_kv = parse_int(value(), "--seq-kv");
    else if (arg == "--batch")
      o.batch = parse_int(value(), "--batch");
    else if (arg == "--heads")
      o.heads = parse_int(value(), "--heads");
    else if (arg == "--warmup")
      o.warmup = static_cast<int>(parse_int(value(), "--warmup"));
    else if (arg == "--reps")
      o.reps = static_cast<int>(parse_int(value(), "--reps"));
    else if (arg == "--csv")
      o.csv = value();
    else if (arg == "--no-time")
      o.time = false;
    else if (arg == "--list")
      o.list = true;
    else if (arg == "--layout") {
      const std::string l = value();
      if (l == "contiguous")
        o.layout = LayoutKind::kContiguous;
      else if (l == "padded")
        o.layout = LayoutKind::kPadded;
      else if (l == "head-major")
        o.layout = LayoutKind::kHeadMajor;
      else
        usage(("unknown layout " + l).c_str());
    } else
      usage(("unknown option " + arg).c_str());
  }
  if (o.reps < 1 || o.warmup < 0) usage("--reps must be >= 1 and --warmup >= 0");
  return o;
}

std::string csv_header_comment() {
  std::ostringstream out;
  cudaDeviceProp prop{};
  int device = 0, driver = 0, runtime = 0, clock_khz = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  FA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
  char date[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const char* rev = std::getenv("FA_GIT_REV");
  out << "# gpu=" << prop.name << "; sm=" << prop.major << prop.minor << "; sms=" << prop.multiProcessorCount
      << "; cuda_driver=" << driver / 1000 << "." << (driver % 1000) / 10
      << "; cuda_runtime=" << runtime / 1000 << "." << (runtime % 1000) / 10
      << "; sm_clock_max_mhz=" << clock_khz / 1000 << "; date=" << date << "; git=" << (rev ? rev : "unknown")
      << "\n";
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);

  std::vector<const StageInfo*> stages;
  if (opt.stages == "all") {
    stages = registered_stages();
  } else {
    for (const std::string& name : split(opt.stages)) {
      const StageInfo* s = find_stage(name);
      if (!s) usage(("no stage named " + name + " in this program (try --list)").c_str());
      stages.push_back(s);
    }
  }
  if (opt.list) {
    for (const StageInfo* s : registered_stages())
      std::printf("%-20s Br=%-3d Bc=%-3d warps=%d  %s\n", s->name, s->block_q, s->block_kv, s->warps,
                  s->idea);
    return 0;
  }
  std::vector<DType> dtypes;
  for (const std::string& d : split(opt.dtypes == "all" ? "fp16,bf16" : opt.dtypes)) {
    DType t;
    if (!parse_dtype(d, &t)) usage(("unknown dtype " + d).c_str());
    dtypes.push_back(t);
  }
  std::vector<int64_t> head_dims, seqs;
  for (const std::string& d : split(opt.head_dims == "all" ? "64,128" : opt.head_dims))
    head_dims.push_back(parse_int(d, "--head-dim"));
  for (const std::string& s : split(opt.seqs)) seqs.push_back(parse_int(s, "--seq"));

  std::string why;
  if (!cuda_device_available(&why)) {
    std::fprintf(stderr, "fa_run: no usable CUDA GPU (%s); nothing was run.\n", why.c_str());
    return 3;
  }

  std::ofstream csv;
  if (!opt.csv.empty()) {
    csv.open(opt.csv);
    if (!csv) usage(("cannot write " + opt.csv).c_str());
    csv << csv_header_comment();
    csv << "impl,dtype,head_dim,batch,heads,seq_q,seq_kv,median_ms,min_ms,tflops,max_abs_err,rel_l2_err,"
           "tolerance,status\n";
  }

  std::printf("%-18s %-5s %4s %5s %5s %6s %6s %10s %10s %9s %11s %11s  %s\n", "stage", "dtype", "D", "B", "H",
              "Sq", "Skv", "median_ms", "min_ms", "TFLOP/s", "max_abs_err", "rel_l2_err", "check");
  int failures = 0;
  for (DType dtype : dtypes) {
    for (int64_t head_dim : head_dims) {
      for (int64_t seq : seqs) {
        ProblemConfig config;
        config.batch = opt.batch;
        config.heads = opt.heads;
        config.seq_q = seq;
        config.seq_kv = opt.seq_kv > 0 ? opt.seq_kv : seq;
        config.head_dim = head_dim;
        config.dtype = dtype;
        config.layout = opt.layout;
        Problem problem(config);
        for (const StageInfo* stage : stages) {
          std::fflush(stdout);
          RunResult run = run_and_check(*stage, problem);
          std::string status = "PASS";
          Timing timing;
          if (!run.status.ok()) {
            status = "ERROR: " + run.status.message;
          } else if (!run.check.passed) {
            status = "FAIL: " + run.check.summary();
          } else if (opt.time) {
            try {
              timing = time_stage(*stage, problem, opt.warmup, opt.reps);
              // The last timed launch must have produced the checked output, bit for bit.
              if (problem.o().download().raw != run.output.raw)
                status = "FAIL: output changed between launches (race?)";
            } catch (const std::exception& e) {
              status = std::string("ERROR: during timing: ") + e.what();
            }
          }
          const bool ok = status == "PASS";
          failures += ok ? 0 : 1;
          const double tflops =
              ok && opt.time ? attention_flops(config) / (timing.median_ms * 1e-3) / 1e12 : 0.0;
          if (ok && opt.time) {
            std::printf("%-18s %-5s %4lld %5lld %5lld %6lld %6lld %10.4f %10.4f %9.1f %11.3e %11.3e  PASS\n",
                        stage->name, dtype_name(dtype), (long long)head_dim, (long long)config.batch,
                        (long long)config.heads, (long long)config.seq_q, (long long)config.seq_kv,
                        timing.median_ms, timing.min_ms, tflops, run.check.max_abs_err, run.check.rel_l2_err);
          } else {
            std::printf("%-18s %-5s %4lld %5lld %5lld %6lld %6lld %10s %10s %9s %11.3e %11.3e  %s\n",
                        stage->name, dtype_name(dtype), (long long)head_dim, (long long)config.batch,
                        (long long)config.heads, (long long)config.seq_q, (long long)config.seq_kv, "-", "-",
                        "-", run.check.max_abs_err, run.check.rel_l2_err, status.c_str());
          }
          std::fflush(stdout);
          if (csv) {
            std::string clean = status;
            for (char& c : clean)
              if (c == ',' || c == '\n') c = ';';
            csv << stage->name << "," << dtype_name(dtype) << "," << head_dim << "," << config.batch << ","
                << config.heads << "," << config.seq_q << "," << config.seq_kv << ",";
            if (ok && opt.time)
              csv << timing.median_ms << "," << timing.min_ms << "," << tflops << ",";
            else
              csv << ",,,";
            csv << run.check.max_abs_err << "," << run.check.rel_l2_err << "," << run.check.tolerance << ","
                << clean << "\n";
            csv.flush();
          }
        }
      }
    }
  }
  if (failures)
    std::printf("\n%d result(s) failed their check or could not run; they have no time.\n", failures);
  return failures ? 1 : 0;
}
