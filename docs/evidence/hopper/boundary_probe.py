#!/usr/bin/env python3
"""Turn a copy of Hopper stage 30 or 31 into a tile-boundary probe, for call51.sh.

Stage 31 (the next tile's Q in a second slot) was predicted to remove a Q load that waits at every
tile boundary, and measured 0.3-1.8% slower than stage 30 (call 50). The probe says where a
consumer warpgroup's cycles go, tile by tile: every consumer thread reads %clock at seven points of
its tile (before and after the Q wait, after the first K wait, after block 0's softmax, after the
loop, after the last P V, after the epilogue) and adds the differences up in registers; at the end
the warpgroup's first thread adds its sums to a __device__ array. No clock is read inside the
K/V loop. When the environment names a file in FA_PHASES, the launcher zeroes the array before the
launch and afterwards writes it (one line per consumer warpgroup), so the file holds the last launch.

The probe is not a stage: it exists only in call51.sh's trimmed tree.

  python3 boundary_probe.py STAGE_DIR PARENT_NAME   (edits STAGE_DIR/kernel.cu and stage.json in place)
"""
import json
import pathlib
import sys

PHASES = ["q_wait", "k0_wait", "block0", "loop", "last_pv", "epilogue", "between", "total", "tiles", "loop_steps"]

DECL = """
// ---- tile-boundary probe (call51.sh; not a stage) ----
constexpr int kProbePhases = %d;  // %s
__device__ unsigned long long g_phases[3 * kProbePhases];  // per consumer warpgroup
// 32-bit cycle counts (%%%%clock; unsigned differences survive one wrap-around, 2^32 cycles is > 2 s)
// keep the probe's registers few: a consumer of stage 30 has none to spare at head_dim 128.
__device__ __forceinline__ unsigned probe_clock() {
  unsigned c;
  asm volatile("mov.u32 %%0, %%%%clock;" : "=r"(c)::"memory");
  return c;
}
""" % (len(PHASES), ", ".join(PHASES))

DUMP = """
  if (const char* phases_path = std::getenv("FA_PHASES")) {
    unsigned long long host_phases[3 * kProbePhases];
    if (cudaStreamSynchronize(stream) == cudaSuccess &&
        cudaMemcpyFromSymbol(host_phases, g_phases, sizeof(host_phases)) == cudaSuccess) {
      if (FILE* f = std::fopen(phases_path, "w")) {
        std::fprintf(f, "warpgroup,%s\\n");
        for (int w = 0; w < Cfg::kConsumerWarpgroups; ++w) {
          std::fprintf(f, "%%d", w);
          for (int i = 0; i < kProbePhases; ++i) std::fprintf(f, ",%%llu", host_phases[w * kProbePhases + i]);
          std::fprintf(f, "\\n");
        }
        std::fclose(f);
      }
    }
  }
""" % ",".join(PHASES)

ZERO = """  if (std::getenv("FA_PHASES")) {
    static const unsigned long long zeros[3 * kProbePhases] = {};
    cudaMemcpyToSymbolAsync(g_phases, zeros, sizeof(zeros), 0, cudaMemcpyHostToDevice, stream);
  }
"""


def replace_once(text, old, new, what):
    if text.count(old) != 1:
        sys.exit("boundary_probe.py: %s: expected exactly one match, found %d" % (what, text.count(old)))
    return text.replace(old, new)


def line_with(text, *needles):
    lines = [l for l in text.splitlines() if all(n in l for n in needles)]
    if len(lines) != 1:
        sys.exit("boundary_probe.py: expected one line with %s, found %d" % (needles, len(lines)))
    return lines[0] + "\n"


def main():
    stage_dir, parent = pathlib.Path(sys.argv[1]), sys.argv[2]
    kernel = stage_dir / "kernel.cu"
    s = kernel.read_text()
    s = replace_once(s, "#include <cmath>\n", "#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n", "includes")
    s = replace_once(s, "// ================================ kernel", DECL + "\n// ================================ kernel",
                     "kernel banner")
    # consumer start: the accumulators
    anchor = "    uint32_t first = 0;"
    s = replace_once(s, line_with(s, anchor), line_with(s, anchor) +
                     "    unsigned ph[kProbePhases] = {};\n"
                     "    unsigned t_prev_end = 0, t_begin = probe_clock();\n", "consumer start")
    q_wait = line_with(s, "      mbarrier_wait(", "q_full")
    s = replace_once(s, q_wait, "      const unsigned t0 = probe_clock();\n"
                     "      if (ph[8] > 0) ph[6] += t0 - t_prev_end;\n" + q_wait +
                     "      const unsigned t1 = probe_clock();\n", "q wait")
    k0 = line_with(s, "      mbarrier_wait(smem_u32(&smem.k_full[slot_of(first)])")
    s = replace_once(s, k0, k0 + "      const unsigned t2 = probe_clock();\n", "k0 wait")
    b0 = line_with(s, "online_softmax_scores<Cfg>(s_acc, state, scale_log2, correction);  // O is zero")
    s = replace_once(s, b0, b0 + "      const unsigned t3 = probe_clock();\n", "block 0")
    loop = line_with(s, "      for (; kv_block < work.kv_blocks; ++kv_block) step(kv_block, true);")
    s = replace_once(s, loop, loop + "      const unsigned t4 = probe_clock();\n", "loop")
    last = line_with(s, "      release(&smem.v_empty[slot_of(last)]);")
    s = replace_once(s, last, last + "      const unsigned t5 = probe_clock();\n", "last P V")
    end = line_with(s, "      first += work.kv_blocks;")
    s = replace_once(s, end, "      const unsigned t6 = probe_clock();\n"
                     "      ph[0] += t1 - t0; ph[1] += t2 - t1; ph[2] += t3 - t2; ph[3] += t4 - t3;\n"
                     "      ph[4] += t5 - t4; ph[5] += t6 - t5; ph[8] += 1; ph[9] += work.kv_blocks - 1;\n"
                     "      t_prev_end = t6;\n" + end, "tile end")
    tail = line_with(s, "    if (consumer_warpgroup == 0) wait_turn();")
    s = replace_once(s, tail, "    ph[7] = probe_clock() - t_begin;\n"
                     "    if (thread_in_warpgroup == 0)\n"
                     "      for (int i = 0; i < kProbePhases; ++i) atomicAdd(&g_phases[consumer_warpgroup * kProbePhases + i], static_cast<unsigned long long>(ph[i]));\n"
                     + tail, "consumer end")
    launch = line_with(s, "kernel<<<")
    s = replace_once(s, launch, ZERO + launch + DUMP, "launch")
    kernel.write_text(s)
    decl_path = stage_dir / "stage.json"
    decl = json.loads(decl_path.read_text())
    decl["parent"] = parent
    decl["idea"] = "tile-boundary probe of " + parent + " (call51.sh): where a consumer warpgroup's cycles go"
    decl_path.write_text(json.dumps(decl, indent=2) + "\n")


if __name__ == "__main__":
    main()
