#!/usr/bin/env bash
# Call 19 (probes, not committed as stages): variants of stage 24 at head_dim 64 --
#   91 = 24 with four K/V ring slots (kStages 4; a power of two);
#   92, 93, 94 = 24 with 1/8, 1/4, 1/2 of the exponentials computed on the FMA pipes (exp2 by a
#   cubic: x = n + f, 2^f by Horner, n added to the exponent bits) instead of MUFU.EX2
#   (at head_dim 64 a score costs the tensor cores 128 FMA / 2048 per clock and MUFU 1 / 16 per clock: the same);
# fa_run times (fp64-checked) and ncu of 24 and 93 at fp16, head_dim 64, S = 4096.
set -o pipefail
L=$OUT/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
python3 - <<'PY'
import os, re, shutil, json
src = "stages/24_three_warpgroups"
poly = '''
// 2^x for x <= 0 on the FMA pipes (probe): x = n + f, n = round(x) by the 1.5 * 2^23 shifter, f in
// [-0.5, 0.5]; 2^f by a cubic (relative error 7.5e-5); n added to the exponent bits. 0 below -126.
__device__ __forceinline__ float exp2_fma(float x) {
  const float xc = fmaxf(x, -127.0f);
  const float shifter = 12582912.0f;
  const float t = xc + shifter;
  const float f = xc - (t - shifter);
  float p = fmaf(0.05517134442925453f, f, 0.24261033535003662f);
  p = fmaf(p, f, 0.6932609677314758f);
  p = fmaf(p, f, 0.9999281167984009f);
  const int bits = __float_as_int(p) + (__float_as_int(t) << 23);
  return xc > -127.0f ? __int_as_float(bits) : 0.0f;
}
'''
def variant(num, name, edit):
    dst = "stages/%d_%s" % (num, name)
    shutil.copytree(src, dst)
    k = open(dst + "/kernel.cu").read()
    k2 = edit(k)
    assert k2 != k, name
    open(dst + "/kernel.cu", "w").write(k2)
    d = json.load(open(dst + "/stage.json")); d["parent"] = "24_three_warpgroups"; d["spill_budget"] = {"sm_90a": 999, "why": "probe"}
    json.dump(d, open(dst + "/stage.json", "w"), indent=2)
variant(91, "stages4", lambda k: k.replace("constexpr int kStages = 2;", "constexpr int kStages = 4;"))
def emul(every):
    def edit(k):
        k = k.replace("// ======================== online softmax update", poly + "\n// ======================== online softmax update")
        for e in ("2 * r]", "2 * r + 1]"):
            old = "s_acc[n][%s = exp2_approx(fmaf(s_acc[n][%s, scale_log2, -max_scaled));" % (e, e)
            assert old in k
            new = ("s_acc[n][%s = (n %% %d == %d) ? exp2_fma(fmaf(s_acc[n][%s, scale_log2, -max_scaled))"
                   " : exp2_approx(fmaf(s_acc[n][%s, scale_log2, -max_scaled));" % (e, every, every - 1, e, e))
            k = k.replace(old, new)
        return k
    return edit
variant(92, "emul8", emul(8))
variant(93, "emul4", emul(4))
variant(94, "emul2", emul(2))
PY
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -iE "error|FAILED" $L/build.log
for dt in fp16 bf16; do
  timeout 120 build/fa_run --stage 23,24,91,92,93,94 --dtype $dt --head-dim 64 --batch 16 --heads 32 --seq 1024,2048,4096,8192 --reps 30 2>&1 | grep -v "^stage" | tee $L/time_$dt.log
done
timeout 60 build/fa_run --stage 24,93 --dtype fp16 --head-dim 64 --batch 16 --heads 32 --seq 1024,4096 --causal --reps 20 2>&1 | grep -v "^stage" | tee $L/time_causal.log
timeout 60 build/fa_run --stage 24,93 --dtype fp16 --head-dim 64 --batch 1 --heads 12 --seq 9 --reps 3 --layout mixed 2>&1 | grep -v "^stage"
for st in 24 93; do
timeout 90 ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats --section InstructionStats \
  --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
  build/fa_run --stage $st --dtype fp16 --head-dim 64 --seq 4096 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_$st.log 2>&1; echo "ncu $st rc=$? $(t)"
timeout 60 ncu --clock-control none -k regex:attention_kernel -c 1 \
  --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
  build/fa_run --stage $st --dtype fp16 --head-dim 64 --seq 4096 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_pipes_$st.log 2>&1; echo "ncu pipes $st rc=$? $(t)"
grep -E "gmma|pipe_|issue_active|Issue Slots|Executed Ipc|Stall|Warp Cycles" $L/ncu_pipes_$st.log $L/ncu_$st.log | head -30
done
echo "done $(t)"
