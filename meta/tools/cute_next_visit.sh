#!/usr/bin/env bash
# One H200 call for the options built at the end of stop 28 and not yet measured: lean_mask ("lean":
# masked tiles add the staged bias unselected, over zeros the producer writes past E) and solo_wg
# ("solo": a CTA whose second warpgroup holds only rows past the request runs the first alone).
# 1. each variant's probe against the fp32 reference, then cute_ws_bench's A/B against the build
#    (eager clock), one process a variant (a fault names its variant and spares the others);
# 2. the winners: a variant that passed its probe and is 1% or more faster on the case that judges
#    it ("lean": 8K sliding page 128; "solo": the global serving batch at page 16);
# 3. the winners together in the device copy's SCHEDULE: the cute conformance matrix and the
#    sanitizer. They are adopted when conformance passes, memcheck is clean and racecheck reports
#    no more hazards than the build's 3 (the known elected-lane false positive of
#    release_per_warp). The adopted SCHEDULE keywords go to /tmp/cute_adopt on the machine (and
#    to $OUT), where cute_peer_visit.sh picks them up on the same warm machine.
# About 4 minutes for the A/Bs and 2 more for the confirmation.
#   . /tmp/site/env.sh && bash meta/tools/cute_next_visit.sh SHA
sha=${1:?usage: cute_next_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cases=${CASES:-prefill8k_sliding_page128,prefill8k_sliding_page16,serving_chunk2k_decodes63_sliding_page128,prefill8k_global_page128,prefill32k_global_page128,serving_chunk2k_decodes63_global_page16}
kernel=inkling_ops/kernels/cute_fwd_sm90.py
declare -A judge=([lean]=prefill8k_sliding_page128 [solo]=serving_chunk2k_decodes63_global_page16)
declare -A keywords=([lean]="lean_mask=True," [solo]="solo_wg=True,")
: > /tmp/cute_adopt
adopt=""
for v in ${VARIANTS:-lean solo}; do
  timeout 90 python3 meta/tools/cute_ws_bench.py --probe $v > "$out/probe_${v}_$sha.log" 2>&1; tail -1 "$out/probe_${v}_$sha.log"
  timeout ${BENCH_TIMEOUT:-120} python3 meta/tools/cute_ws_bench.py --out "$out/$v" --variants $v --cases $cases \
    > "$out/cute_ws_bench_${v}_$sha.log" 2>&1
  grep -E "^prefill|^serving|^chunk" "$out/cute_ws_bench_${v}_$sha.log" | cut -d'|' -f1-3
  grep -q "\"probe_$v\": true" "$out/probe_${v}_$sha.log" || { echo "$v: probe failed, not adopted"; continue; }
  if python3 -c "
import json, sys
r = {x['case']: x for x in json.load(open('$out/$v/cute_ws_bench.json'))}['${judge[$v]}']
sys.exit(0 if r.get('${v}_ms', 9) < 0.99 * r['cute_ms'] and r.get('${v}_ok') else 1)"; then
    echo "$v: 1% or more faster on ${judge[$v]}"; adopt="$adopt ${keywords[$v]}"
  else
    echo "$v: not 1% faster on ${judge[$v]}, not adopted"
  fi
done
[ -z "$adopt" ] && { echo "nothing to confirm"; exit 0; }
[ -n "$NO_CONFIRM" ] && { echo "winners (unconfirmed):$adopt"; exit 0; }
cp $kernel /tmp/cute_fwd_sm90.py.build
sed -i "s/^    bias_bulk=True, kv_len_mask=False,\$/    bias_bulk=True, kv_len_mask=False,$adopt/" $kernel
grep -n "^    bias_bulk=True" $kernel
timeout 150 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py \
  tests/test_cute_runtime.py -k cute -rfE > "$out/cute_conformance_winners_$sha.log" 2>&1
conf=$(tail -1 "$out/cute_conformance_winners_$sha.log"); echo "conformance: $conf"
INKLING_OPS_CACHE_DIR=/tmp/store-winners timeout 200 bash meta/tools/cute_sanitize.sh winners-$sha > /dev/null 2>&1
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|exit status" "$out/cute_sanitize_winners-$sha.log"
gzip -f "$out"/cute_racecheck_*.log 2>/dev/null
cp /tmp/cute_fwd_sm90.py.build $kernel
hazards=$(grep -oE "RACECHECK SUMMARY: [0-9]+" "$out/cute_sanitize_winners-$sha.log" | grep -oE "[0-9]+$")
if ! echo "$conf" | grep -qE "failed|error" && grep -q "memcheck exit status 0" "$out/cute_sanitize_winners-$sha.log" \
   && [ -n "$hazards" ] && [ "$hazards" -le 3 ]; then
  echo "$adopt" > /tmp/cute_adopt; cp /tmp/cute_adopt "$out/cute_adopt_$sha.txt"; echo "adopted:$adopt"
else
  echo "winners not confirmed (conformance, memcheck or racecheck): nothing adopted"
fi
