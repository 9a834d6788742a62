#!/usr/bin/env bash
# H200 visit: split what acc_band_nostage leaves over allplain (TUNING, "ninth day", "Next").
#   . /tmp/site/env.sh && bash meta/tools/cute_split_visit.sh SHA
# cute_ws_bench in both orders over the build, acc_band_nostage, abn_noload (no bias loads),
# abn_nomask (no masks' select), abn_handoff (neither) and allplain; eager do_bench medians.
# Reading: abn_noload near allplain and abn_nomask near acc_band_nostage -> the bias loads'
# shared-memory wavefronts; the reverse -> the masks; both near acc_band_nostage -> the hand-off
# (which the probes make earlier and shorter than the build's: TUNING's caveat).
sha=${1:?usage: cute_split_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
cases=${CASES:-prefill8k_sliding_page128,prefill8k_global_page128,serving_chunk2k_decodes63_sliding_page16}
n=$(echo $cases | tr , '\n' | wc -l)
for order in default,acc_band_nostage,abn_noload,abn_nomask,abn_handoff,allplain \
             allplain,abn_handoff,abn_nomask,abn_noload,acc_band_nostage,default; do
  echo "== $order"
  timeout ${BENCH_TIMEOUT:-150} python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases \
    > "$out/cute_split_${order%%,*}_first_$sha.log" 2>&1
  tail -$((n + 1)) "$out/cute_split_${order%%,*}_first_$sha.log"
done
