#!/usr/bin/env bash
# One device call for schedule options under trial, before their adoption: correctness, then the
# peers with the build as it is and with the options, in one run.
#
#   . /tmp/site/env.sh && OPTION=" half_edge_tiles=True," [PAIRED="8, 4"] bash meta/tools/cute_trial_peers.sh SHA
#
# 1. OPTION (SCHEDULE keywords) and PAIRED (PAIRED_GROUPS) are written into the device copy of
#    cute_fwd_sm90.py, and the CuTe conformance cases run with them (as cute_option_visit.sh does);
# 2. if they pass, meta/bench/benchmark.py times the CuTe backend against flash-attn-4 with the
#    bias (vLLM's score_mod) and without it, both clocks, on the cases CASES_FILTER names (default
#    prefill8k: the 8K global and sliding cases at pages 16 and 128): first with OPTION, then with
#    the build's SCHEDULE (the copy restored), so each set of ratios is same-run.
# Writes under $OUT: cute_trial_conformance_SHA.log, trial/ and build/ (bench_records.jsonl, bench.log).
sha=${1:?usage: OPTION=" key=value," cute_trial_peers.sh SHA}
option=${OPTION:?set OPTION}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
kernel=inkling_ops/kernels/cute_fwd_sm90.py
cp $kernel /tmp/cute_fwd_sm90.py.build
trap 'cp /tmp/cute_fwd_sm90.py.build $kernel' EXIT
. meta/tools/schedule_option.sh
schedule_option $kernel "$option" "${PAIRED:-}" || exit 2
log="$out/cute_trial_conformance_$sha.log"
timeout ${CONF_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider tests/test_conformance.py tests/test_cute_runtime.py -k cute -rfE > "$log" 2>&1
status=$?
echo "== conformance with$option${PAIRED:+ PAIRED_GROUPS=($PAIRED)}: exit $status"; tail -2 "$log"
[ $status -eq 0 ] || exit 1
bench() {  # $1: the records' folder and label
  timeout ${BENCH_TIMEOUT:-200} python3 meta/bench/benchmark.py --out "$out/$1" --records none --git-sha "$sha+$1" --quick \
    --no-progress --no-host-overhead --backends cute --peers ours,fa4_scoremod,fa4_nobias \
    --cases-filter "${CASES_FILTER:-prefill8k}" > "$out/$1/run.log" 2>&1
  echo "== $1: exit $?"; tail -${TAIL:-14} "$out/$1/run.log"
}
mkdir -p "$out/trial" "$out/build"
bench trial
cp /tmp/cute_fwd_sm90.py.build $kernel
bench build
