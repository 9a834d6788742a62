#!/usr/bin/env bash
# H200 visit for compact_grid (TUNING "compact_grid"): is its slowdown on the global cases real or an
# ordering/clock effect? PART=bench times default and compact on four cases in both orders while
# nvidia-smi logs clocks and power; PART=ncu profiles the chunked-prefill case under both and runs
# host_overhead twice (issue 16's eager figure next to SDPA's).
#   . /tmp/site/env.sh && PART=bench|ncu bash meta/tools/cute_compact_visit.sh SHA
sha=${1:?usage: cute_compact_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
cases=chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,serving_chunk2k_decodes63_sliding_page16,prefill8k_global_page128
if [ "${PART:-bench}" = bench ]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -l 1 > "$out/smi_$sha.csv" &
  smi=$!
  for order in default,compact compact,default; do
    echo "== $order"
    timeout 240 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/compact_${order/,/_}_$sha.log" 2>&1
    tail -6 "$out/compact_${order/,/_}_$sha.log"
  done
  kill $smi
else
  s="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats"
  for v in default compact; do
    timeout 100 ncu $s -k regex:RelAttn -c 1 python3 meta/tools/cute_ws_bench.py --profile chunk2k_on16k_x4_page16:$v > "$out/ncu_chunks_${v}_$sha.txt" 2>&1
    echo "== ncu $v"; grep -E "Duration|SM Frequency|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occ|Grid Size|Waves Per SM" "$out/ncu_chunks_${v}_$sha.txt" | head -10
  done
  for i in 1 2; do
    timeout 100 python3 meta/tools/host_overhead.py --device cuda --record "$out/host_overhead_$sha.jsonl" > "$out/host_overhead_${i}_$sha.log" 2>&1
    echo "== host $i"; tail -25 "$out/host_overhead_${i}_$sha.log"
  done
fi
