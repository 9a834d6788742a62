#!/usr/bin/env bash
# H200 visit for the plan's compact grid (cute_backend.compact_grid; TUNING "compact_grid").
#   . /tmp/site/env.sh && PART=check|bench|controls bash meta/tools/cute_compact_visit.sh SHA
# PART=check: the direct probe, the conformance suite on the CuTe backend (its sliding calls of
# several requests take the compact grid) and compute-sanitizer (cute_sanitize.sh: its sliding
# case of two requests does too), beside each other. PART=bench: cute_ws_bench on sliding cases
# of several requests (CASES, comma-separated), the dense grid
# against the plan's choice ("default") in both orders, with nvidia-smi logging clocks.
# PART=controls: the global-layer slowdown's controls and ncu stall reasons (see below).
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
elif [ "$PART" = controls ]; then
  # why the compact grid is slower on global layers: its scan's code on the dense grid
  # (dense_scan) and its mapping on the dense grid's shape (compact_3d), against both grids, in
  # both orders, then ncu's stall reasons of the chunks case for each; last, the page-16 sliding
  # class at head_dim 64 (cute against triton)
  cases=chunk2k_on16k_x4_page16,prefill8k_global_page128
  for order in default,compact,dense_scan,compact_3d compact_3d,dense_scan,compact,default; do
    echo "== $order"
    timeout 150 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/controls_${order//,/_}_$sha.log" 2>&1
    tail -3 "$out/controls_${order//,/_}_$sha.log"
  done
  m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,smsp__inst_executed.sum'
  for v in default compact dense_scan compact_3d; do
    timeout 90 ncu --metrics "$m" -k regex:RelAttn -c 1 python3 meta/tools/cute_ws_bench.py --profile chunk2k_on16k_x4_page16:$v > "$out/ncu_stalls_${v}_$sha.txt" 2>&1
  done
  python3 - "$out" "$sha" <<'PY'
import re, sys
out, sha = sys.argv[1:]
rows = {}
for v in ("default", "compact", "dense_scan", "compact_3d"):
    for line in open(f"{out}/ncu_stalls_{v}_{sha}.txt"):
        m = re.match(r"\s+(\S+)\s+(\S+)?\s+([\d.,]+)$", line)
        if m:
            rows.setdefault(m.group(1), {})[v] = m.group(3)
for name, vals in rows.items():
    short = name.replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", "")
    print(f"{short:32s}", " ".join(f"{vals.get(v, '-'):>12s}" for v in ("default", "compact", "dense_scan", "compact_3d")))
PY
  echo "== head_dim 64, page-16 sliding"
  CUTE_WS_HEAD_DIM=64 timeout 150 python3 meta/tools/cute_ws_bench.py --out "$out/hd64" --cases serving_chunk2k_decodes63_sliding_page16,prefill8k_sliding_page16 > "$out/hd64_sliding_p16_$sha.log" 2>&1
  tail -3 "$out/hd64_sliding_p16_$sha.log"
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
