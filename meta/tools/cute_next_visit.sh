#!/usr/bin/env bash
# One H200 call for the three options built at the end of stop 28 and not yet measured: the masked
# tiles' mask_unsigned ("mask_u") and lean_mask with it ("lean"), and solo_wg ("solo", a CTA whose
# second warpgroup holds only rows past the request runs the first alone). Each variant's probe
# against the reference, then cute_ws_bench's A/B against the build (eager clock), one process a
# variant (a fault names its variant and spares the others). Then, for each of "lean" (judged on
# 8K sliding page 128) and "solo" (judged on the global serving batch at page 16) that passed its
# probe and is 1% or more faster, the cute conformance matrix and the sanitizer with it in the
# device copy's SCHEDULE.
# About 5 minutes for the A/Bs and 2 more a confirmed option; VARIANTS="lean solo" or NO_CONFIRM=1
# split it over two calls on a warm machine.
#   . /tmp/site/env.sh && bash meta/tools/cute_next_visit.sh SHA
sha=${1:?usage: cute_next_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cases=${CASES:-prefill8k_sliding_page128,prefill8k_sliding_page16,serving_chunk2k_decodes63_sliding_page128,prefill8k_global_page128,prefill32k_global_page128,serving_chunk2k_decodes63_global_page16}
kernel=inkling_ops/kernels/cute_fwd_sm90.py
cp $kernel /tmp/cute_fwd_sm90.py.build
for v in ${VARIANTS:-mask_u lean solo}; do
  timeout 90 python3 meta/tools/cute_ws_bench.py --probe $v > "$out/probe_${v}_$sha.log" 2>&1; tail -1 "$out/probe_${v}_$sha.log"
  timeout ${BENCH_TIMEOUT:-120} python3 meta/tools/cute_ws_bench.py --out "$out/$v" --variants default,$v --cases $cases \
    > "$out/cute_ws_bench_${v}_$sha.log" 2>&1
  grep -E "^prefill|^serving|^chunk" "$out/cute_ws_bench_${v}_$sha.log" | cut -d'|' -f1-3
done
# variant, the case that judges it, and its SCHEDULE keywords
for spec in "lean prefill8k_sliding_page128 mask_unsigned=True, lean_mask=True," \
            "solo serving_chunk2k_decodes63_global_page16 solo_wg=True,"; do
  set -- $spec; v=$1; judge=$2; shift 2; kw="$*"
  [ -n "$NO_CONFIRM" ] && break
  grep -q "\"probe_$v\": true" "$out/probe_${v}_$sha.log" || continue
  python3 -c "
import json, sys
r = {x['case']: x for x in json.load(open('$out/$v/cute_ws_bench.json'))}['$judge']
sys.exit(0 if r.get('${v}_ms', 9) < 0.99 * r['cute_ms'] and r.get('${v}_ok') else 1)" 2>/dev/null || continue
  cp /tmp/cute_fwd_sm90.py.build $kernel
  sed -i "s/^    bias_bulk=True, kv_len_mask=False,\$/    bias_bulk=True, kv_len_mask=False, $kw/" $kernel
  grep -n "^    bias_bulk=True" $kernel
  timeout 150 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py \
    tests/test_cute_runtime.py -k cute -rfE > "$out/cute_conformance_${v}_$sha.log" 2>&1
  tail -1 "$out/cute_conformance_${v}_$sha.log"
  INKLING_OPS_CACHE_DIR=/tmp/store-$v timeout 150 bash meta/tools/cute_sanitize.sh $v-$sha 2>&1 | grep -E "SUMMARY|exit status|clean"
  gzip -f "$out"/cute_racecheck_*.log 2>/dev/null
done
cp /tmp/cute_fwd_sm90.py.build $kernel
