#!/usr/bin/env bash
# One H200 call (after `. /tmp/site/env.sh`) for a bias_per_wg variant of cute_ws_bench.py: its
# probe on the direct cases, one timing run against the built schedule on eight cases, then
# conformance -k cute with the option put into SCHEDULE (sed, on the machine only).
#   bash meta/tools/bias_per_wg_visit.sh SHA [VARIANT [SCHEDULE_ENTRY]]
#   (defaults: bias_per_wg, 'bias_per_wg=True'; e.g. bias_per_wg_pages "bias_per_wg='tile_pages'")
sha=${1:?usage: bias_per_wg_visit.sh SHA [VARIANT [SCHEDULE_ENTRY]]}
variant=${2:-bias_per_wg}
entry=${3:-bias_per_wg=True}
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
step() { echo "== $1 ($(date +%T))"; }
step probe; timeout 90 python3 meta/tools/cute_ws_bench.py --probe $variant > $OUT/probe.log 2>&1; tail -1 $OUT/probe.log
grep -q "\"probe_$variant\": true" $OUT/probe.log || { echo "probe failed"; tail -8 $OUT/probe.log; exit 1; }
step bench
timeout 240 python3 meta/tools/cute_ws_bench.py --out $OUT --variants default,$variant \
  --cases prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,prefill32k_global_page128,serving_chunk2k_decodes63_sliding_page128,chunk2k_on16k_x4_sliding_page128 \
  > $OUT/ws_bench.log 2>&1
grep -v "UserWarning\|exe_args" $OUT/ws_bench.log | tail -8
step "conformance with $entry in SCHEDULE"
sed -i "s/^SCHEDULE = dict(/SCHEDULE = dict($entry, /" inkling_ops/kernels/cute_fwd_sm90.py
grep -n "^SCHEDULE" inkling_ops/kernels/cute_fwd_sm90.py
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_conformance.py tests/test_cute_runtime.py -k cute -rfE > $OUT/conformance.log 2>&1
tail -3 $OUT/conformance.log
step done
