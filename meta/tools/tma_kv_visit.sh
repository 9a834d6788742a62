#!/usr/bin/env bash
# One H200 call (under 10 minutes, after `. /tmp/site/env.sh`) for the tma_kv flip into SCHEDULE:
# the probe and conformance of the new build, its timings (same run: triton, flash-attn-4 without
# the bias, tma_kv off), the serving demo split by cause (float32 with graphs: the exact
# criterion; bf16 without graphs), compute-sanitizer, and bias_tma's failure under memcheck.
#   bash meta/tools/tma_kv_visit.sh SHA
sha=${1:?usage: tma_kv_visit.sh SHA}
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
step() { echo "== $1 ($(date +%T))"; }
step probe; timeout 60 python3 meta/tools/cute_ws_bench.py --probe default > $OUT/probe.log 2>&1; tail -1 $OUT/probe.log
step conformance
timeout 120 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py tests/test_cute_runtime.py -k cute -rfE > $OUT/conformance.log 2>&1
tail -3 $OUT/conformance.log
step bench
timeout 150 python3 meta/tools/cute_ws_bench.py --out $OUT --variants default,no_tma_kv,nofence,old \
  --cases prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,serving_chunk2k_decodes63_sliding_page16,prefill32k_global_page128 > $OUT/ws_bench.log 2>&1
tail -9 $OUT/ws_bench.log
step demo_fp32_graphs; timeout 75 python3 -m inkling_ops demo --device cuda --dtype float32 > $OUT/demo_fp32.log 2>&1; grep -E "check|served|FAIL|OK" $OUT/demo_fp32.log | cut -c1-300
step demo_bf16_nographs; timeout 75 python3 -m inkling_ops demo --device cuda --no-cuda-graphs > $OUT/demo_bf16_nographs.log 2>&1; grep -E "check|served|FAIL|OK" $OUT/demo_bf16_nographs.log | cut -c1-300
step sanitize; timeout 150 bash meta/tools/cute_sanitize.sh $sha > $OUT/sanitize_wrap.log 2>&1; tail -6 $OUT/sanitize_wrap.log | cut -c1-250
step bias_tma_memcheck
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 $cs --tool memcheck --show-backtrace device python3 meta/tools/cute_ws_bench.py --probe bias_tma > $OUT/bias_tma_memcheck.log 2>&1
grep -E "=====" $OUT/bias_tma_memcheck.log | head -30 | cut -c1-250
step done
