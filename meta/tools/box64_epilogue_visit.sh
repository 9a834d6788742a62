#!/usr/bin/env bash
# One H200 call (after `. /tmp/site/env.sh`) for two unmeasured CuTe options:
# 1. bias_tma with two 64-distance boxes a token, under memcheck (does the 256-byte unswizzled box
#    cause bias_tma's illegal instruction?); if its probe passes, its probe with tma_kv;
# 2. smem_epilogue (O out through shared memory in 16-byte stores): its probe;
# then one timing run of both against the built schedule (a variant whose probe failed is left out).
#   bash meta/tools/box64_epilogue_visit.sh SHA
sha=${1:?usage: box64_epilogue_visit.sh SHA}
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
step() { echo "== $1 ($(date +%T))"; }
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
variants=default
step box64_memcheck
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 $cs --tool memcheck --print-limit 200 python3 meta/tools/cute_ws_bench.py --probe bias_tma_box64 > $OUT/box64_memcheck.log 2>&1
echo "rc $?"; grep -v "Host Frame\|cuGetProcAddress\|^=========     \|^========= $" $OUT/box64_memcheck.log | grep -E "=====|probe|Error|error" | head -12 | cut -c1-250
if grep -q '"probe_bias_tma_box64": true' $OUT/box64_memcheck.log; then
  step box64_kv_probe; timeout 60 python3 meta/tools/cute_ws_bench.py --probe bias_tma_box64_kv > $OUT/probe.log 2>&1; tail -1 $OUT/probe.log
  grep -q '"probe_bias_tma_box64_kv": true' $OUT/probe.log && variants=$variants,bias_tma_box64_kv
fi
step smem_epi_probe; timeout 60 python3 meta/tools/cute_ws_bench.py --probe smem_epi >> $OUT/probe.log 2>&1; tail -1 $OUT/probe.log
grep -q '"probe_smem_epi": true' $OUT/probe.log && variants=$variants,smem_epi
step "bench ($variants)"
timeout 150 python3 meta/tools/cute_ws_bench.py --out $OUT --variants $variants \
  --cases prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16 > $OUT/ws_bench.log 2>&1
tail -6 $OUT/ws_bench.log
step done
