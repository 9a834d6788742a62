#!/usr/bin/env bash
# H200 visit: where a band tile's time goes on a sliding layer, where the consumers' bias work is
# 25% of the call (TUNING "2026-12-04 visits"). ncu's warp states and per-instruction stall
# sampling (SourceCounters, one call each) of CASE for the build and the all-plain variant
# (no mask, no bias, nothing staged), or for the cute_ws_bench variants PROFILES names (the
# first and the last compared), the SASS-level counters exported as CSV.
#   . /tmp/site/env.sh && [PROFILES="acc_band_nostage allplain"] bash meta/tools/cute_stalls_visit.sh SHA
# Compare the two CSVs' stall samples per instruction: the build's extra samples, and on which
# instructions (band body loads, converts, the softmax, the ping-pong barrier) they land
# (meta/tools/sass_stalls.py, run at the end: samples by code region, side by side).
sha=${1:?usage: cute_stalls_visit.sh SHA}
case=${CASE:-prefill8k_sliding_page128}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# PROFILES: the variants profiled, "build" for the backend's kernel (default "build allplain")
for name in ${PROFILES:-build allplain}; do
  v=":$name"; [ "$name" = build ] && v=""
  timeout 150 ncu --section SourceCounters --section WarpStateStats -k regex:RelAttn -c 1 -o "$out/src_$name" \
    python3 meta/tools/cute_ws_bench.py --profile $case$v > "$out/cute_ncu_stalls_${case}_${name}_$sha.txt" 2>&1
  echo "== $name: $(tail -1 "$out/cute_ncu_stalls_${case}_${name}_$sha.txt")"
  ncu -i "$out/src_$name.ncu-rep" --print-details all > "$out/cute_ncu_stalls_${case}_${name}_$sha.details.txt" 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Stall|No Eligible" "$out/cute_ncu_stalls_${case}_${name}_$sha.details.txt" | head -30
  ncu -i "$out/src_$name.ncu-rep" --page source --csv --print-source sass > "$out/cute_sass_${case}_${name}_$sha.csv" 2>/dev/null \
    || ncu -i "$out/src_$name.ncu-rep" --page source --csv > "$out/cute_sass_${case}_${name}_$sha.csv"
  gzip -f "$out/cute_sass_${case}_${name}_$sha.csv"; rm -f "$out/src_$name.ncu-rep"
done
set -- ${PROFILES:-build allplain}
python3 meta/tools/sass_stalls.py "$out/cute_sass_${case}_$1_$sha.csv.gz" "$out/cute_sass_${case}_${!#}_$sha.csv.gz" --top 20 --ranges \
  | tee "$out/sass_stalls_${case}_$1_vs_${!#}_$sha.txt"
