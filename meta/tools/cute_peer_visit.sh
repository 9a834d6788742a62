#!/usr/bin/env bash
# The peer run of the CuTe build (issue 17's targets): meta/bench/benchmark.py on the prefill cases
# and the serving-shaped batches (meta/bench/serving_cases.json), pages 16 and 128, every peer, both
# clocks (eager do_bench and CUDA-graph replay). When /tmp/cute_adopt on the machine holds SCHEDULE
# keywords (an option under trial, e.g. " lean_mask=True,"), the device copy's SCHEDULE gets them
# first and the run is labelled SHA+adopted.
#   . /tmp/site/env.sh && [PREFILL=0] bash meta/tools/cute_peer_visit.sh SHA
sha=${1:?usage: cute_peer_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
kernel=inkling_ops/kernels/cute_fwd_sm90.py
label=$sha
adopt=$(cat /tmp/cute_adopt 2>/dev/null)
cp $kernel /tmp/cute_fwd_sm90.py.peer
if [ -n "$adopt" ]; then
  # appended to SCHEDULE's last keyword line (the one that starts with bias_bulk)
  sed -i "s/^\(    bias_bulk=True,.*,\)\$/\1$adopt/" $kernel
  grep -qF "$adopt" $kernel || { echo "cute_peer_visit: could not add '$adopt' to SCHEDULE in $kernel"; exit 2; }
  grep -n "^    bias_bulk=True" $kernel; label=$sha+adopted
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "${PREFILL:-1}" != 0 ]; then  # PREFILL=0: the serving batches only (a change the dense grid does not run)
timeout ${PREFILL_TIMEOUT:-330} python3 meta/bench/benchmark.py --out "$out/prefill" --git-sha $label --quick --no-progress \
  --backends triton,cute --cases-filter ${PREFILL_CASES:-prefill8k_global,prefill32k_global,chunk2k_on16k_x4,prefill8k_local} \
  > "$out/bench_${label}_prefill_allpeers.log" 2>&1
echo "prefill exit $?"; grep -A40 "^case " "$out/bench_${label}_prefill_allpeers.log" | head -30
fi
timeout ${SERVING_TIMEOUT:-200} python3 meta/bench/benchmark.py --out "$out/serving" --git-sha $label --quick --no-progress \
  --backends triton,cute --cases meta/bench/serving_cases.json --no-host-overhead \
  > "$out/bench_${label}_serving_allpeers.log" 2>&1
echo "serving exit $?"; grep -A10 "^case " "$out/bench_${label}_serving_allpeers.log" | head -10
cp /tmp/cute_fwd_sm90.py.peer $kernel
