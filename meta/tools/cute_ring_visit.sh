#!/usr/bin/env bash
# One H200 call for two RelAttnFwdSm90 options, bias_ring and kv_len_mask=False: their probes
# against the reference, cute_ws_bench's A/B against the build (eager clock) on the prefill, sliding
# and serving cases, then, with bias_ring in the device copy's SCHEDULE, the cute conformance matrix
# and the sanitizer.
#   . /tmp/site/env.sh && bash meta/tools/cute_ring_visit.sh SHA
sha=${1:?usage: cute_ring_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for v in bias_ring no_kv_mask ring_nokv; do
  timeout 90 python3 meta/tools/cute_ws_bench.py --probe $v > "$out/probe_${v}_$sha.log" 2>&1; tail -1 "$out/probe_${v}_$sha.log"
done
timeout ${BENCH_TIMEOUT:-240} python3 meta/tools/cute_ws_bench.py --out "$out" --variants default,bias_ring,no_kv_mask,ring_nokv \
  --cases ${CASES:-prefill8k_global_page128,prefill8k_sliding_page128,prefill32k_global_page128,serving_chunk2k_decodes63_sliding_page128,chunk2k_on16k_x4_sliding_page128,prefill8k_global_page16,prefill8k_sliding_page16,serving_chunk2k_decodes63_global_page16} \
  > "$out/cute_ws_bench_ring_$sha.log" 2>&1
tail -10 "$out/cute_ws_bench_ring_$sha.log"
if grep -q '"probe_bias_ring": true' "$out/probe_bias_ring_$sha.log"; then
  sed -i 's/^    bias_bulk=True,$/    bias_bulk=True, bias_ring=True,/' inkling_ops/kernels/cute_fwd_sm90.py
  grep -n "bias_ring=True," inkling_ops/kernels/cute_fwd_sm90.py
  timeout 150 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py \
    tests/test_cute_runtime.py -k cute -rfE > "$out/cute_conformance_ring_$sha.log" 2>&1
  tail -2 "$out/cute_conformance_ring_$sha.log"
  INKLING_OPS_CACHE_DIR=/tmp/store-ring timeout 150 bash meta/tools/cute_sanitize.sh ring-$sha 2>&1 | grep -E "SUMMARY|exit status|clean"
  gzip -f "$out"/cute_racecheck_*.log 2>/dev/null
fi
