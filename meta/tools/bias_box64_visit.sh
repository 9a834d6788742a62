#!/usr/bin/env bash
# One H200 call (after `. /tmp/site/env.sh`): bias_tma with two 64-distance boxes a token under
# memcheck (does the 256-byte unswizzled box cause the illegal instruction?); if its probe passes,
# the probe with tma_kv and one timing run against the built schedule.
#   bash meta/tools/bias_box64_visit.sh SHA
sha=${1:?usage: bias_box64_visit.sh SHA}
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
step() { echo "== $1 ($(date +%T))"; }
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
step box64_memcheck
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 $cs --tool memcheck --print-limit 200 python3 meta/tools/cute_ws_bench.py --probe bias_tma_box64 > $OUT/box64_memcheck.log 2>&1
echo "rc $?"; grep -v "Host Frame\|cuGetProcAddress\|^=========     \|^========= $" $OUT/box64_memcheck.log | grep -E "=====|probe|Error|error" | head -12 | cut -c1-250
if grep -q '"probe_bias_tma_box64": true' $OUT/box64_memcheck.log; then
  step box64_kv_probe; timeout 60 python3 meta/tools/cute_ws_bench.py --probe bias_tma_box64_kv > $OUT/probe.log 2>&1; tail -1 $OUT/probe.log
  step bench
  timeout 120 python3 meta/tools/cute_ws_bench.py --out $OUT --variants default,bias_tma_box64_kv \
    --cases prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16 > $OUT/ws_bench.log 2>&1
  tail -6 $OUT/ws_bench.log
fi
step done
