#!/bin/bash
# One H200 visit for the warp-specialised CuTe kernel (run from the repository root, after the
# CuTe runtime is installed): a hang probe, correctness, conformance, timings against triton and
# fa4 (no bias), and a short ncu profile of the 8K global case. Everything goes to $OUT.
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
echo "== probe"
if ! timeout 60 python3 meta/tools/cute_ws_bench.py --probe default > $OUT/probe.log 2>&1 || ! grep -q '"probe_default": true' $OUT/probe.log; then
  tail -5 $OUT/probe.log
  echo "default failed: probing the variants"
  for v in nopingpong; do timeout 45 python3 meta/tools/cute_ws_bench.py --probe $v >> $OUT/probe.log 2>&1 || echo "$v: rc $?" >> $OUT/probe.log; done
  tail -8 $OUT/probe.log
  exit 3
fi
tail -1 $OUT/probe.log
echo "== probe variants"
for v in ${PROBE_VARIANTS:-warprelease nofence warprelease_nofence biaslanes}; do timeout 45 python3 meta/tools/cute_ws_bench.py --probe $v >> $OUT/probe.log 2>&1 || echo "{\"probe_$v\": \"rc $?\"}" >> $OUT/probe.log; tail -1 $OUT/probe.log; done
echo "== check"; timeout 70 python3 meta/tools/cute_gpu_check.py --out $OUT --skip-timing > $OUT/check.log 2>&1; tail -9 $OUT/check.log
echo "== conformance"; timeout 80 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py -k cute > $OUT/conformance.log 2>&1; tail -3 $OUT/conformance.log
echo "== bench"; timeout 180 python3 meta/tools/cute_ws_bench.py --out $OUT ${BENCH_ARGS} > $OUT/bench.log 2>&1; tail -9 $OUT/bench.log
if [ -n "$NCU" ]; then
  echo "== ncu"; timeout ${NCU_TIMEOUT:-60} ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats -k regex:RelAttn -c 1 python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128 > $OUT/ncu.txt 2>&1; grep -E "Duration|Throughput|Issue Slots|Warp Cycles|No Eligible|Registers|Achieved|Grid Size" $OUT/ncu.txt | head -30
fi
