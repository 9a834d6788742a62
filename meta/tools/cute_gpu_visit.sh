#!/bin/bash
# One H200 visit for the warp-specialised CuTe kernel (run from the repository root, after the
# CuTe runtime is installed): correctness, conformance, timings against triton and fa4 (no bias),
# and a short ncu profile of the 8K global case. Everything goes to $OUT.
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
echo "== check"; timeout 100 python3 meta/tools/cute_gpu_check.py --out $OUT --skip-timing > $OUT/check.log 2>&1; tail -9 $OUT/check.log
echo "== bench"; timeout 200 python3 meta/tools/cute_ws_bench.py --out $OUT ${BENCH_ARGS} > $OUT/bench.log 2>&1; tail -8 $OUT/bench.log
echo "== conformance"; timeout 120 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py -k cute > $OUT/conformance.log 2>&1; tail -4 $OUT/conformance.log
if [ -n "$NCU" ]; then
  echo "== ncu"; timeout ${NCU_TIMEOUT:-90} ncu --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats -k regex:RelAttn -c 1 python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128 > $OUT/ncu.txt 2>&1; grep -E "Duration|Throughput|Issue Slots|Warp Cycles|Stall|No Eligible|Registers|Achieved" $OUT/ncu.txt | head -40
fi
