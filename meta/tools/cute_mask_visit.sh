#!/usr/bin/env bash
# One H200 call for the masked tiles' two options, mask_unsigned ("mask_u") and lean_mask with it
# ("lean"): each variant's probe against the reference, then cute_ws_bench's A/B against the build
# (eager clock), one process a variant (a fault names its variant and spares the others); when
# "lean" passed its probe and is 1% or more faster on 8K sliding page 128, the cute conformance
# matrix and the sanitizer with both options in the device copy's SCHEDULE.
#   . /tmp/site/env.sh && bash meta/tools/cute_mask_visit.sh SHA
sha=${1:?usage: cute_mask_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cases=${CASES:-prefill8k_sliding_page128,prefill8k_sliding_page16,serving_chunk2k_decodes63_sliding_page128,prefill8k_global_page128,prefill32k_global_page128,serving_chunk2k_decodes63_global_page16}
for v in mask_u lean; do
  timeout 90 python3 meta/tools/cute_ws_bench.py --probe $v > "$out/probe_${v}_$sha.log" 2>&1; tail -1 "$out/probe_${v}_$sha.log"
  timeout ${BENCH_TIMEOUT:-120} python3 meta/tools/cute_ws_bench.py --out "$out/$v" --variants default,$v --cases $cases \
    > "$out/cute_ws_bench_${v}_$sha.log" 2>&1
  grep -E "^prefill|^serving|^chunk" "$out/cute_ws_bench_${v}_$sha.log" | cut -d'|' -f1-3
done
if grep -q '"probe_lean": true' "$out/probe_lean_$sha.log" && python3 -c "
import json, sys
r = {x['case']: x for x in json.load(open('$out/lean/cute_ws_bench.json'))}['prefill8k_sliding_page128']
sys.exit(0 if r.get('lean_ms', 9) < 0.99 * r['cute_ms'] and r.get('lean_ok') else 1)" 2>/dev/null; then
  sed -i 's/^    bias_bulk=True, kv_len_mask=False,$/    bias_bulk=True, kv_len_mask=False, mask_unsigned=True, lean_mask=True,/' inkling_ops/kernels/cute_fwd_sm90.py
  grep -n "lean_mask=True," inkling_ops/kernels/cute_fwd_sm90.py
  timeout 150 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py \
    tests/test_cute_runtime.py -k cute -rfE > "$out/cute_conformance_lean_$sha.log" 2>&1
  tail -1 "$out/cute_conformance_lean_$sha.log"
  INKLING_OPS_CACHE_DIR=/tmp/store-lean timeout 150 bash meta/tools/cute_sanitize.sh lean-$sha 2>&1 | grep -E "SUMMARY|exit status|clean"
  gzip -f "$out"/cute_racecheck_*.log 2>/dev/null
fi
