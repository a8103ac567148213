#!/usr/bin/env python3
"""Turn a copy of an Ampere-track stage (32 or 33) into a schedule-trace probe, for call49.sh.

Stage 33's page asks whether the GPU really starts thread blocks in blockIdx.x order on whichever
slot frees first (the premise of tools/schedule_model.py --dispatch). The probe answers it: thread 0
of every block reads %globaltimer at the block's start and end and %smid, into a __device__ array;
when the environment names a file in FA_TRACE, the launcher waits for the launch, copies the array
back and writes one CSV line per block (block, start_ns, end_ns, sm, group). A run overwrites the
file at every launch, so the file holds the last (timed) launch.

The probe is not a stage: it only exists in call49.sh's trimmed tree. It adds two global stores
and two timer reads per block, nothing in the main loop.

  python3 trace_probe.py STAGE_DIR PARENT_NAME   (edits STAGE_DIR/kernel.cu and stage.json in place)
"""
import json
import pathlib
import sys

TRACE_DECL = """
// ---- schedule-trace probe (call49.sh; not a stage) ----
constexpr int kTraceBlocks = 1 << 16;
__device__ unsigned long long g_trace[3 * kTraceBlocks];
"""

START = """  using Cfg = Config<T, kHeadDim>;
  unsigned long long trace_start = 0;
  if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(trace_start));
"""

END_ANCHOR = """    write_lse(state, lse_gmem, p.softmax_scale, q_rows, warp_row0, lane);
  }
"""
END = END_ANCHOR + """  if (threadIdx.x == 0 && blockIdx.x < kTraceBlocks) {
    unsigned long long trace_end;
    unsigned sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(trace_end));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_trace[3 * blockIdx.x] = trace_start;
    g_trace[3 * blockIdx.x + 1] = trace_end;
    g_trace[3 * blockIdx.x + 2] = sm;
  }
"""

DUMP = """
  if (const char* trace_path = std::getenv("FA_TRACE")) {
    static unsigned long long host_trace[3 * kTraceBlocks];
    if (cudaStreamSynchronize(stream) == cudaSuccess &&
        cudaMemcpyFromSymbol(host_trace, g_trace, sizeof(host_trace)) == cudaSuccess) {
      if (FILE* f = std::fopen(trace_path, "w")) {
        std::fprintf(f, "block,start_ns,end_ns,sm,group\\n");
        for (int64_t b = 0; b < blocks && b < kTraceBlocks; ++b)
          std::fprintf(f, "%lld,%llu,%llu,%llu,%lld\\n", static_cast<long long>(b), host_trace[3 * b],
                       host_trace[3 * b + 1], host_trace[3 * b + 2], static_cast<long long>(GROUP));
        std::fclose(f);
      }
    }
  }
"""


def replace_once(text, old, new, what):
    if text.count(old) != 1:
        sys.exit("trace_probe.py: %s: expected exactly one match, found %d" % (what, text.count(old)))
    return text.replace(old, new)


def main():
    stage_dir, parent = pathlib.Path(sys.argv[1]), sys.argv[2]
    kernel = stage_dir / "kernel.cu"
    s = kernel.read_text()
    s = replace_once(s, "#include <cmath>\n", "#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n", "includes")
    s = replace_once(s, "// ================================ kernel", TRACE_DECL + "\n// ================================ kernel",
                     "kernel banner")
    s = replace_once(s, "  using Cfg = Config<T, kHeadDim>;\n", START, "kernel start")
    s = replace_once(s, END_ANCHOR, END, "kernel end")
    launch = [line for line in s.splitlines() if "kernel<<<" in line]
    if len(launch) != 1:
        sys.exit("trace_probe.py: expected one kernel launch, found %d" % len(launch))
    group = "group" if "static_cast<int>(group)" in launch[0] else "1"
    s = replace_once(s, launch[0] + "\n", launch[0] + "\n" + DUMP.replace("GROUP", group), "launch")
    kernel.write_text(s)
    decl_path = stage_dir / "stage.json"
    decl = json.loads(decl_path.read_text())
    decl["parent"] = parent
    decl["idea"] = "schedule-trace probe of " + parent + " (call49.sh): each block's start, end and SM"
    decl_path.write_text(json.dumps(decl, indent=2) + "\n")


if __name__ == "__main__":
    main()
