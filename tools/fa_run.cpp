// The command-line runner: runs any linked stage on any shape, checks it against the fp64
// reference, and only then times it. A result that fails its check gets no time, and the runner
// exits non-zero. Built twice from this file: fa_run with every stage, and one runner per stage
// named after it (./build/ampere_04_swizzle) with that stage alone. `--help` lists the options.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/registry.h"

using namespace fa;

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 3;

// The name this program was started as (argv[0] without its folder): "fa_run", or a stage's name
// for a single-stage runner.
std::string g_program = "fa_run";

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) parts.push_back(item);
  return parts;
}

// The layouts --layout accepts: one kind for all four tensors, or "mixed" (each its own).
bool parse_layout(const std::string& text, ProblemLayout* out) {
  if (text == "mixed") {
    *out = ProblemLayout::mixed();
    return true;
  }
  for (LayoutKind kind : {LayoutKind::kContiguous, LayoutKind::kPadded, LayoutKind::kHeadMajor,
                          LayoutKind::kHeadMajorPadded}) {
    if (text == layout_kind_name(kind)) {
      *out = kind;
      return true;
    }
  }
  return false;
}

struct Options {
  std::string stages = "all", dtypes = "fp16", head_dims = "128", seqs = "1024,2048,4096,8192";
  int64_t batch = 16, heads = 32, seq_kv = 0, kv_heads = 0, splits = 0;
  std::string layout = "contiguous";
  int warmup = 5, reps = 20;
  bool time = true, list = false, json = false, help = false, causal = false, lse = false, alibi = false;
  bool launch_times = false;
  std::string csv;
};

void print_help() {
  const Options defaults;
  const std::vector<const StageInfo*>& linked = registered_stages();
  std::string linked_names;
  for (const StageInfo* s : linked) linked_names += (linked_names.empty() ? "" : ", ") + std::string(s->name);
  std::printf(
      "usage: %s [options]\n"
      "\n"
      "Runs attention stages on the GPU, checks every result against an fp64 reference, and only\n"
      "then times it: a result that fails its check gets no time. One problem per (dtype, head dim,\n"
      "sequence length), shared by the stages; seeded normal inputs.\n"
      "This program has %zu stage%s linked: %s.\n"
      "\n"
      "Options (default in brackets):\n"
      "  --stage all|ID|TRACK_NN[,...]  stages to run, by id (ampere_04_swizzle) or track_NN [%s]\n"
      "  --dtype fp16|bf16|all      element type, or a comma list                   [%s]\n"
      "  --head-dim 64|128|all      head dimension, or a comma list                 [%s]\n"
      "  --batch N                  batch size                                      [%lld]\n"
      "  --heads N                  heads                                           [%lld]\n"
      "  --seq N[,N...]             query lengths, one problem each                 [%s]\n"
      "  --seq-kv N                 key/value length                                [each --seq]\n"
      "  --kv-heads N               key/value heads, dividing --heads: grouped-query attention\n"
      "                             (query head h reads key/value head h / (heads / N)), 1 for\n"
      "                             multi-query; a stage that does not declare gqa is skipped\n"
      "                             where N != heads                                 [--heads]\n"
      "  --causal                   causal masking, aligned to the bottom-right (query i sees\n"
      "                             keys j <= i + seq_kv - seq_q); a stage that does not\n"
      "                             declare the feature is skipped, and TFLOP/s count the\n"
      "                             area below the diagonal (half at seq_q == seq_kv)\n"
      "  --lse                      also write the fp32 log-sum-exp of every row and check it\n"
      "                             against the fp64 reference (checker.h states the rule);\n"
      "                             a stage that does not declare lse is skipped\n"
      "  --alibi                    ALiBi: -slope * |i + seq_kv - seq_q - j| added to the scaled\n"
      "                             score of query i and key j, one slope per head shared by\n"
      "                             the batch, 2^(-8 (h + 1) / heads); a stage that does not\n"
      "                             declare alibi is skipped\n"
      "  --splits N                 split-KV: N thread blocks share the keys of each query\n"
      "                             block, merged by a second kernel; 0 lets the stage choose;\n"
      "                             a stage that does not declare split_kv is skipped where\n"
      "                             N > 0                                          [0]\n"
      "  --layout KIND              memory layout of q, k, v and o                  [%s]\n"
      "                               contiguous         [batch][seq][heads][head_dim], packed\n"
      "                               padded             same order, NaN-filled gaps after every\n"
      "                                                  head, row and batch\n"
      "                               head-major         [batch][heads][seq][head_dim]\n"
      "                               head-major-padded  head-major with NaN-filled gaps\n"
      "                               mixed              each tensor its own, no stride shared:\n"
      "                                                  %s\n"
      "  --warmup N                 untimed launches before the timed ones           [%d]\n"
      "  --reps N                   timed launches (each with its own CUDA events);\n"
      "                             the median and the minimum are reported         [%d]\n"
      "  --launch-times             after each timed result, every timed launch's ms in the\n"
      "                             order they ran (a drift, e.g. of the clocks, shows there)\n"
      "  --no-time                  check only, time nothing\n"
      "  --csv FILE                 also write the results to FILE: a '# gpu=...' line, then\n"
      "                             impl,dtype,head_dim,batch,heads,causal,seq_q,seq_kv,median_ms,\n"
      "                             min_ms,tflops,max_abs_err,rel_l2_err,tolerance,status  [no CSV]\n"
      "  --list                     print the linked stages, one a line: name, parent, target,\n"
      "                             tiles (Br, Bc, warps), idea; then exit\n"
      "  --list --json              the same as a JSON array of every StageInfo field\n"
      "  -h, --help                 this text\n"
      "\n"
      "Environment: FA_GIT_REV, the git revision written into the CSV's first line.\n"
      "Exit status: 0 every result passed its check; 1 some result failed or could not run, every\n"
      "stage was skipped (a feature asked for is not declared), or CUDA is not usable (a driver too\n"
      "old, say); 2 bad usage; 3 nothing to run on: no CUDA device or no NVIDIA driver (nothing was\n"
      "run).\n",
      g_program.c_str(), linked.size(), linked.size() == 1 ? "" : "s", linked_names.c_str(),
      defaults.stages.c_str(), defaults.dtypes.c_str(), defaults.head_dims.c_str(),
      static_cast<long long>(defaults.batch), static_cast<long long>(defaults.heads), defaults.seqs.c_str(),
      defaults.layout.c_str(), ProblemLayout::mixed().name().c_str(), defaults.warmup, defaults.reps);
}

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n(run %s --help for the options)\n", g_program.c_str(), message.c_str(),
               g_program.c_str());
  std::exit(kExitUsage);
}

int64_t parse_int(const std::string& text, const char* what) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') usage(std::string("not an integer for ") + what + ": " + text);
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + arg);
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
    else if (arg == "--kv-heads")
      o.kv_heads = parse_int(value(), "--kv-heads");
    else if (arg == "--splits")
      o.splits = parse_int(value(), "--splits");
    else if (arg == "--warmup")
      o.warmup = static_cast<int>(parse_int(value(), "--warmup"));
    else if (arg == "--reps")
      o.reps = static_cast<int>(parse_int(value(), "--reps"));
    else if (arg == "--csv")
      o.csv = value();
    else if (arg == "--no-time")
      o.time = false;
    else if (arg == "--launch-times")
      o.launch_times = true;
    else if (arg == "--list")
      o.list = true;
    else if (arg == "--json")
      o.json = true;
    else if (arg == "--causal")
      o.causal = true;
    else if (arg == "--lse")
      o.lse = true;
    else if (arg == "--alibi")
      o.alibi = true;
    else if (arg == "--layout")
      o.layout = value();
    else if (arg == "--help" || arg == "-h")
      o.help = true;
    else
      usage("unknown option " + arg);
  }
  if (o.reps < 1 || o.warmup < 0) usage("--reps must be >= 1 and --warmup >= 0");
  if (o.json && !o.list) usage("--json goes with --list");
  if (o.kv_heads < 0 || (o.kv_heads > 0 && o.heads % o.kv_heads != 0))
    usage("--kv-heads " + std::to_string(o.kv_heads) + " must divide --heads " + std::to_string(o.heads));
  if (o.splits < 0 || o.splits > kMaxNumSplits)
    usage("--splits " + std::to_string(o.splits) + " must be 0 (the stage chooses) to " +
          std::to_string(kMaxNumSplits));
  ProblemLayout layout;
  if (!parse_layout(o.layout, &layout)) usage("unknown layout " + o.layout);
  return o;
}

// The optional features a call asks for that the stage does not declare, by their stage.json names
// ("causal, gqa"); empty when it declares them all.
std::string missing_features(const StageInfo& stage, const AttentionParams& p) {
  const std::pair<bool, const char*> asked[] = {{p.causal, "causal"},
                                                {p.kv_heads != p.heads, "gqa"},
                                                {p.lse.data != nullptr, "lse"},
                                                {p.alibi.data != nullptr, "alibi"},
                                                {p.num_splits != 0, "split_kv"}};
  std::string missing;
  for (const auto& [wanted, name] : asked)
    if (wanted && (stage.features & feature_bit(name)) == 0)
      missing += (missing.empty() ? "" : ", ") + std::string(name);
  return missing;
}

// ------------------------------------------------------------------------------------------------
// --list and --list --json
// ------------------------------------------------------------------------------------------------

// One line per stage, the name first (tools/bench.py reads the first word of every line).
void print_stage_list() {
  for (const StageInfo* s : registered_stages())
    std::printf("%-18s parent=%-18s target=%-6s Br=%-3d Bc=%-3d warps=%d  %s\n", s->name,
                s->parent[0] ? s->parent : "-", s->target, s->block_q, s->block_kv, s->warps, s->idea);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <typename T, typename Format>
std::string json_array(const std::vector<T>& items, Format format) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + format(items[i]);
  return out + "]";
}

// Every StageInfo field but the launcher, for the Python tools; features by their stage.json names.
void print_stage_json() {
  const char* const feature_names[] = {"any_length", "causal", "gqa", "lse", "alibi", "split_kv"};
  const std::vector<const StageInfo*>& stages = registered_stages();
  std::printf("[\n");
  for (size_t i = 0; i < stages.size(); ++i) {
    const StageInfo& s = *stages[i];
    std::vector<std::string> features;
    for (const char* name : feature_names)
      if (s.features & feature_bit(name)) features.push_back(name);
    std::printf(
        "  {\"name\": %s, \"parent\": %s, \"idea\": %s, \"target\": %s, \"min_compute_capability\": %d, "
        "\"arch_specific\": %s, \"features\": %s, \"block_q\": %d, \"block_kv\": %d, \"warps\": %d, "
        "\"head_dims\": %s, \"dtypes\": %s}%s\n",
        json_string(s.name).c_str(), json_string(s.parent).c_str(), json_string(s.idea).c_str(),
        json_string(s.target).c_str(), s.min_compute_capability, s.arch_specific ? "true" : "false",
        json_array(features, json_string).c_str(), s.block_q, s.block_kv, s.warps,
        json_array(s.head_dims, [](int d) { return std::to_string(d); }).c_str(),
        json_array(s.dtypes, [](DType t) { return json_string(dtype_name(t)); }).c_str(),
        i + 1 < stages.size() ? "," : "");
  }
  std::printf("]\n");
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
  if (argc > 0 && argv[0] && argv[0][0]) {
    g_program = argv[0];
    g_program = g_program.substr(g_program.find_last_of('/') + 1);
  }
  const Options opt = parse(argc, argv);
  if (opt.help) {
    print_help();
    return 0;
  }
  if (opt.list) {
    opt.json ? print_stage_json() : print_stage_list();
    return 0;
  }

  std::vector<const StageInfo*> stages;
  if (opt.stages == "all") {
    stages = registered_stages();
  } else {
    for (const std::string& name : split(opt.stages)) {
      const StageInfo* s = find_stage(name);
      if (!s) usage("no stage named " + name + " in " + g_program + " (try --list)");
      stages.push_back(s);
    }
  }
  ProblemLayout layout;
  parse_layout(opt.layout, &layout);  // parse() has accepted it
  std::vector<DType> dtypes;
  for (const std::string& d : split(opt.dtypes == "all" ? "fp16,bf16" : opt.dtypes)) {
    DType t;
    if (!parse_dtype(d, &t)) usage("unknown dtype " + d);
    dtypes.push_back(t);
  }
  std::vector<int64_t> head_dims, seqs;
  for (const std::string& d : split(opt.head_dims == "all" ? "64,128" : opt.head_dims))
    head_dims.push_back(parse_int(d, "--head-dim"));
  for (const std::string& s : split(opt.seqs)) seqs.push_back(parse_int(s, "--seq"));

  // Exit 3 only where there is nothing to run on (scripts may report that as skipped); a GPU that is
  // there but unusable (a driver too old for this runtime, say) is a failure.
  const CudaDeviceProbe gpu = probe_cuda_device();
  if (gpu.nothing_to_run_on()) {
    std::fprintf(stderr, "%s: %s; nothing was run.\n", g_program.c_str(), gpu.message.c_str());
    return kExitNoGpu;
  }
  if (!gpu.usable()) {
    std::fprintf(stderr, "%s: CUDA is not usable: %s; nothing was run.\n", g_program.c_str(), gpu.message.c_str());
    return 1;
  }

  std::ofstream csv;
  if (!opt.csv.empty()) {
    csv.open(opt.csv);
    if (!csv) usage("cannot write " + opt.csv);
    csv << csv_header_comment();
    csv << "impl,dtype,head_dim,batch,heads,causal,seq_q,seq_kv,median_ms,min_ms,tflops,max_abs_err,rel_l2_err,"
           "tolerance,status\n";
  }

  std::printf("%-18s %-5s %4s %5s %5s %6s %6s %10s %10s %9s %11s %11s  %s\n", "stage", "dtype", "D", "B", "H",
              "Sq", "Skv", "median_ms", "min_ms", "TFLOP/s", "max_abs_err", "rel_l2_err", "check");
  int failures = 0, skipped = 0;
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
        config.layout = layout;
        config.causal = opt.causal;
        config.kv_heads = opt.kv_heads;
        config.lse = opt.lse;
        config.alibi = opt.alibi ? AlibiKind::kPerHead : AlibiKind::kNone;
        config.num_splits = static_cast<int>(opt.splits);
        Problem problem(config);
        for (const StageInfo* stage : stages) {
          std::fflush(stdout);
          // A stage without a feature the options ask for would only reject the call: it is skipped,
          // not failed.
          const std::string missing = missing_features(*stage, problem.params());
          const bool skip = !missing.empty();
          RunResult run = skip ? RunResult{} : run_and_check(*stage, problem);
          std::string status = "PASS";
          Timing timing;
          if (skip) {
            status = "SKIPPED: the stage does not declare " + missing;
            ++skipped;
          } else if (!run.status.ok()) {
            status = "ERROR: " + run.status.message;
          } else if (!run.check.passed) {
            status = "FAIL: " + run.check.summary();
          } else if (run.lse_requested && !run.lse_check.passed) {
            status = "FAIL: lse: " + run.lse_check.summary();
          } else if (opt.time) {
            try {
              timing = time_stage(*stage, problem, opt.warmup, opt.reps);
              // The last timed launch must have produced the checked output, bit for bit.
              const bool lse_changed =
                  run.lse_requested &&
                  std::memcmp(problem.download_lse().values.data(), run.lse.values.data(),
                              run.lse.values.size() * sizeof(float)) != 0;
              if (problem.o().download().raw != run.output.raw || lse_changed)
                status = "FAIL: output changed between launches (race?)";
            } catch (const std::exception& e) {
              status = std::string("ERROR: during timing: ") + e.what();
            }
          }
          const bool ok = status == "PASS";
          failures += ok || skip ? 0 : 1;
          const double tflops =
              ok && opt.time ? attention_flops(config) / (timing.median_ms * 1e-3) / 1e12 : 0.0;
          if (ok && opt.time) {
            std::printf("%-18s %-5s %4lld %5lld %5lld %6lld %6lld %10.4f %10.4f %9.1f %11.3e %11.3e  PASS\n",
                        stage->name, dtype_name(dtype), (long long)head_dim, (long long)config.batch,
                        (long long)config.heads, (long long)config.seq_q, (long long)config.seq_kv,
                        timing.median_ms, timing.min_ms, tflops, run.check.max_abs_err, run.check.rel_l2_err);
            if (opt.launch_times) {
              std::printf("  launch ms:");
              for (double ms : timing.launch_ms) std::printf(" %.4g", ms);
              std::printf("\n");
            }
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
                << config.heads << "," << (config.causal ? 1 : 0) << "," << config.seq_q << "," << config.seq_kv
                << ",";
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
  if (skipped)
    std::printf("\n%d result(s) skipped: a stage that does not declare a feature the options ask for.\n",
                skipped);
  const bool nothing_ran = skipped > 0 && skipped == static_cast<int>(dtypes.size() * head_dims.size() *
                                                                      seqs.size() * stages.size());
  if (nothing_ran)
    std::printf("Nothing ran: no selected stage declares the features asked for (see --list --json).\n");
  return failures || nothing_ran ? 1 : 0;
}
