#!/bin/bash
# One H200 visit for the CuTe kernel's schedule experiments (run from the repository root after
# the CuTe runtime is installed, `. /tmp/site/env.sh`): the variants of RelAttnFwdSm90 checked on
# cute_gpu_check's direct cases, timed against triton and flash-attn-4 (no bias), then ncu of our
# kernel and flash-attn-4's on 8K global page 128, and per-instruction stall samples of ours.
#   PROBES="a b" CASES=c1,c2 [NO_BENCH=1] [CONFORMANCE=1] [PEERS=1] [NO_NCU=1] [NO_FA4_NCU=1] bash meta/tools/cute_schedule_visit.sh SHA
# CONFORMANCE=1 adds tests/test_conformance.py -k cute; PEERS=1 the peer benchmark (vLLM's
# score_mod in flash-attn-4, flash-attn-4 without the bias, our triton and cute backends; both
# clocks) on the prefill cases. When the probe of the default fails, the backend's schedule falls
# back to RelAttnFwdSm90's keyword defaults (the 46a147e kernel) for the rest of the visit.
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== probes"
for v in ${PROBES:-default}; do
  timeout 60 python3 meta/tools/cute_ws_bench.py --probe $v >> $OUT/probe.log 2>&1 || echo "{\"probe_$v\": \"rc $?\"}" >> $OUT/probe.log
  tail -1 $OUT/probe.log
done
if grep -q '"probe_default": "rc\|"probe_default": false' $OUT/probe.log; then
  # (a fallback to RelAttnFwdSm90's keyword defaults once rewrote SCHEDULE's first line; the
  # dict spans several lines since, and no other schedule is worth timing in its place)
  echo "default failed its probe: stopping (see $OUT/probe.log)"
  exit 1
fi
if [ -z "$NO_BENCH" ]; then
  echo "== bench"
  timeout ${BENCH_TIMEOUT:-300} python3 meta/tools/cute_ws_bench.py --out $OUT --cases ${CASES:-prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16} > $OUT/ws_bench.log 2>&1
  tail -8 $OUT/ws_bench.log
fi
if [ -n "$CONFORMANCE" ]; then
  echo "== conformance"
  timeout 150 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py tests/test_cute_runtime.py -k cute -rfE > $OUT/conformance.log 2>&1
  tail -3 $OUT/conformance.log
fi
if [ -n "$PEERS" ]; then
  echo "== peers"
  timeout ${PEERS_TIMEOUT:-240} python3 meta/bench/benchmark.py --out $OUT --git-sha ${1:-unknown} --quick --no-progress --backends triton,cute \
    --peers ours,fa4_scoremod,fa4_nobias --cases-filter prefill8k_global,prefill32k_global,chunk2k_on16k_x4,prefill8k_local > $OUT/peers.log 2>&1
  grep -E "^  " $OUT/peers.log | cut -c1-110 | tail -40
fi
[ -n "$NO_NCU" ] && exit 0
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats --section InstructionStats"
echo "== ncu ours"
timeout 90 ncu $SECTIONS -k regex:RelAttn -c 1 python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128${NCU_VARIANT:+:$NCU_VARIANT} > $OUT/ncu_cute.txt 2>&1
grep -E "Duration|SM Frequency|Compute \(SM\) Thr|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Achieved Occ|Executed Ipc A" $OUT/ncu_cute.txt | head -12
if [ -z "$NO_FA4_NCU" ]; then
echo "== ncu fa4"
timeout 90 ncu $SECTIONS -k regex:FlashAttentionForwardSm90 -c 1 python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128:fa4 > $OUT/ncu_fa4.txt 2>&1
grep -E "Duration|SM Frequency|Compute \(SM\) Thr|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Achieved Occ|Executed Ipc A" $OUT/ncu_fa4.txt | head -12
fi
echo "== ncu source"
timeout 120 ncu --section SourceCounters --section WarpStateStats -k regex:RelAttn -c 1 -o $OUT/cute_src python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128${NCU_VARIANT:+:$NCU_VARIANT} > $OUT/ncu_src.log 2>&1
tail -2 $OUT/ncu_src.log
ncu -i $OUT/cute_src.ncu-rep --page source --csv --print-source sass > $OUT/cute_sass.csv 2>> $OUT/ncu_src.log || ncu -i $OUT/cute_src.ncu-rep --page source --csv > $OUT/cute_sass.csv 2>> $OUT/ncu_src.log
ls -la $OUT/cute_sass.csv; head -c 600 $OUT/cute_sass.csv; tail -3 $OUT/ncu_src.log
gzip -f $OUT/cute_sass.csv; rm -f $OUT/cute_src.ncu-rep
