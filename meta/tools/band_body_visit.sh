#!/usr/bin/env bash
# One H200 call (under 10 minutes, after `. /tmp/site/env.sh`) for three schedule options of the
# CuTe kernel (tree_reduce, band_split, bias_prefetch) and the open checks of stop 23:
# the direct probes of each option, their timings against the built schedule, triton and
# flash-attn-4 without the bias, the serving demo's two CUDA cases with transformers 5.24,
# bias_tma with clamped box starts under memcheck, and racecheck with every consumer thread
# releasing (release_per_warp off).
#   bash meta/tools/band_body_visit.sh SHA
sha=${1:?usage: band_body_visit.sh SHA}
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
step() { echo "== $1 ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
step probes
for v in tree split prefetch tsp; do
  timeout 60 python3 meta/tools/cute_ws_bench.py --probe $v >> $OUT/probe.log 2>&1 || echo "{\"probe_$v\": \"rc $?\"}" >> $OUT/probe.log
  tail -1 $OUT/probe.log
done
step bench
timeout 200 python3 meta/tools/cute_ws_bench.py --out $OUT --variants default,tree,split,prefetch,tsp,allplain \
  --cases prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,serving_chunk2k_decodes63_sliding_page16,prefill32k_global_page128 > $OUT/ws_bench.log 2>&1
tail -9 $OUT/ws_bench.log
step demo
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hf $(ls .whl/transformers-*.whl /tmp/whl/transformers-*.whl 2>/dev/null | head -1) 2>&1 | tail -2
PYTHONPATH=/tmp/hf:$PYTHONPATH timeout 150 python3 -m pytest tests/test_demo_serving.py -m gpu -q -rA -p no:cacheprovider > $OUT/demo_tests.log 2>&1
grep -E "passed|failed|skipped|PASSED|FAILED|SKIPPED|gap|bound" $OUT/demo_tests.log | tail -8 | cut -c1-300
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
step bias_tma_clamp_memcheck
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $cs --tool memcheck --print-limit 10 python3 meta/tools/cute_ws_bench.py --probe bias_tma_clamp > $OUT/bias_tma_clamp_memcheck.log 2>&1
echo "rc $?"; grep -E "=====|probe_" $OUT/bias_tma_clamp_memcheck.log | head -12 | cut -c1-250
step racecheck_no_warprelease
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 $cs --tool racecheck --print-limit 20 python3 meta/tools/cute_ws_bench.py --probe no_warprelease > $OUT/racecheck_no_warprelease.log 2>&1
echo "rc $?"; grep -E "RACECHECK SUMMARY|hazard|probe_" $OUT/racecheck_no_warprelease.log | tail -6 | cut -c1-250
gzip -f $OUT/racecheck_no_warprelease.log
step done
