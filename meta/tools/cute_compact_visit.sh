#!/usr/bin/env bash
# H200 visit for the plan's compact grid (cute_backend.compact_grid; TUNING "compact_grid").
#   . /tmp/site/env.sh && PART=check|bench|regs bash meta/tools/cute_compact_visit.sh SHA
# PART=check: the direct probe, the conformance suite on the CuTe backend (its sliding calls of
# several requests take the compact grid) and compute-sanitizer (cute_sanitize.sh: its sliding
# case of two requests does too), beside each other. PART=bench: cute_ws_bench on sliding cases
# of several requests (CASES, comma-separated), the dense grid
# against the plan's choice ("default") in both orders, with nvidia-smi logging clocks.
# (At f761c13 PART=controls timed the kernel's debug_grid controls, deleted after, and ran ncu's
# stall reasons on them: meta/logs/*f761c13*, TUNING "compact_grid".)
# (At 7a47493 this script timed compact against the build on global cases and ran ncu on the
# chunks: meta/logs/*7a47493*.)
sha=${1:?usage: cute_compact_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "${PART:-check}" = check ]; then
  # correctness only, so the sanitizer runs beside the conformance suite (nothing here is timed)
  timeout 330 bash meta/tools/cute_sanitize.sh "compact-$sha" > /dev/null 2>&1 &
  san=$!
  timeout 60 python3 meta/tools/cute_ws_bench.py --probe default 2>&1 | tail -1
  timeout 270 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py \
    tests/test_cute_runtime.py -k cute -rfE > "$out/cute_conformance_compact_$sha.log" 2>&1
  echo "== conformance"; tail -3 "$out/cute_conformance_compact_$sha.log"
  wait $san
  echo "== sanitize"; grep -E "ok |exit status|SUMMARY|cute_sanitize:" "$out/cute_sanitize_compact-$sha.log"
  gzip -f "$out/cute_racecheck_compact-$sha.log"
elif [ "${PART}" = regs ]; then
  # each grid at the other's producer registers (cute_fwd_sm90.schedule: dense 32, compact 40;
  # at c0df9b3 this part timed both grids at 32 and 40 before the split was adopted: TUNING "compact_grid")
  for v in dense_producer40 compact_producer32; do timeout 60 python3 meta/tools/cute_ws_bench.py --probe $v 2>&1 | tail -1; done
  cases=${CASES:-chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,prefill8k_global_page128,serving_chunk2k_decodes63_sliding_page16}
  for order in dense,compact,dense_producer40,compact_producer32 compact_producer32,dense_producer40,compact,dense; do
    echo "== $order"
    timeout 200 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/regs_${order//,/_}_$sha.log" 2>&1
    tail -6 "$out/regs_${order//,/_}_$sha.log"
  done
else
  cases=${CASES:-serving_chunk2k_decodes63_sliding_page16,chunk2k_on16k_x4_sliding_page128}
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -l 1 > "$out/smi_grid_$sha.csv" &
  smi=$!
  for order in default,dense dense,default; do
    echo "== $order"
    timeout 150 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/grid_${order/,/_}_$sha.log" 2>&1
    tail -5 "$out/grid_${order/,/_}_$sha.log"
  done
  kill $smi
fi
