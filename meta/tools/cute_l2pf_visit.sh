#!/usr/bin/env bash
# One H200 call for bias_l2_prefetch (RelAttnFwdSm90): its probe against the reference, then
# cute_ws_bench's A/B against the build on the prefill, sliding and serving cases (eager clock),
# then the head_dim 64 conformance run (cute_head_dim64_visit.sh).
#   . /tmp/site/env.sh && bash meta/tools/cute_l2pf_visit.sh SHA
sha=${1:?usage: cute_l2pf_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for v in default bias_l2pf; do
  timeout 90 python3 meta/tools/cute_ws_bench.py --probe $v > "$out/probe_${v}_$sha.log" 2>&1; tail -1 "$out/probe_${v}_$sha.log"
done
timeout ${BENCH_TIMEOUT:-330} python3 meta/tools/cute_ws_bench.py --out "$out" --variants ${VARIANTS:-default,bias_l2pf,allplain,bias_nostage} \
  --cases ${CASES:-prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,prefill8k_sliding_page16,prefill32k_global_page128,chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,serving_chunk2k_decodes63_sliding_page16} \
  > "$out/cute_ws_bench_l2pf_$sha.log" 2>&1
tail -10 "$out/cute_ws_bench_l2pf_$sha.log"
[ -n "$NO_HD64" ] || bash meta/tools/cute_head_dim64_visit.sh "$sha"
