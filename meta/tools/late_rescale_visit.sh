#!/usr/bin/env bash
# One H200 call (under 10 minutes, after `. /tmp/site/env.sh`) for the late_rescale option of the
# CuTe kernel over the band_split schedule: its direct probe, its timings against the built
# schedule (same run: triton, flash-attn-4 without the bias, band_split off), conformance with
# late_rescale in SCHEDULE, and, when it won 8K global page 128 by at least 0.5%, the peer benchmark
# on both clocks with it in SCHEDULE; the eager host time per call last.
#   bash meta/tools/late_rescale_visit.sh SHA
sha=${1:?usage: late_rescale_visit.sh SHA}
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
step() { echo "== $1 ($(date +%T))"; }
step probe; timeout 60 python3 meta/tools/cute_ws_bench.py --probe late > $OUT/probe.log 2>&1; tail -1 $OUT/probe.log
step bench
timeout 200 python3 meta/tools/cute_ws_bench.py --out $OUT --variants default,late,no_split,allplain \
  --cases prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,prefill32k_global_page128 > $OUT/ws_bench.log 2>&1
tail -8 $OUT/ws_bench.log
won=$(python3 -c "
import json; r = json.load(open('$OUT/cute_ws_bench.json'))[0]
print(int(r.get('late_ok', False) and r['late_ms'] < 0.995 * r['cute_ms']))")
echo "late_rescale won 8K global page 128: $won"
sed -i 's/^SCHEDULE = dict(band_split=True,/SCHEDULE = dict(band_split=True, late_rescale=True,/' inkling_ops/kernels/cute_fwd_sm90.py
grep -n "^SCHEDULE" inkling_ops/kernels/cute_fwd_sm90.py
step conformance_late
timeout 150 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors tests/test_conformance.py tests/test_cute_runtime.py -k cute -rfE > $OUT/conformance.log 2>&1
tail -3 $OUT/conformance.log
if [ "$won" = 1 ]; then
  step peers_late
  timeout 240 python3 meta/bench/benchmark.py --out $OUT --git-sha $sha-late --quick --no-progress --backends triton,cute \
    --peers ours,fa4_scoremod,fa4_nobias --cases-filter prefill8k_global,prefill32k_global,chunk2k_on16k_x4,prefill8k_local > $OUT/peers.log 2>&1
  grep -E "^  " $OUT/peers.log | cut -c1-110 | tail -40
fi
step host_overhead
timeout 60 python3 meta/tools/host_overhead.py --device cuda --backend cute --record $OUT/host.jsonl > $OUT/host_overhead_cute.log 2>&1; tail -16 $OUT/host_overhead_cute.log
timeout 60 python3 meta/tools/host_overhead.py --device cuda --record $OUT/host.jsonl > $OUT/host_overhead_default.log 2>&1; tail -16 $OUT/host_overhead_default.log
step done
