#!/usr/bin/env bash
# H200 visit for 64-key tiles (CuteFwdConfig.tile_n = 64; TUNING "tile_n 64"), mainly on sliding layers.
#   . /tmp/site/env.sh && bash meta/tools/cute_tile_visit.sh SHA
# The probe of tile_n64, the conformance suite's direct checks through it, then cute_ws_bench in
# both orders: the build, tile_n64 and no_tma_kv (the 128-key build gathered, the control at page 128).
sha=${1:?usage: cute_tile_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
timeout 90 python3 meta/tools/cute_ws_bench.py --probe tile_n64 > "$out/probe_tile_n64_$sha.log" 2>&1; tail -1 "$out/probe_tile_n64_$sha.log"
cases=${CASES:-prefill8k_sliding_page16,prefill8k_sliding_page128,serving_chunk2k_decodes63_sliding_page16,serving_chunk2k_decodes63_sliding_page128,chunk2k_on16k_x4_sliding_page128,prefill8k_global_page16}
n=$(echo $cases | tr , '\n' | wc -l)
for order in default,tile_n64,no_tma_kv no_tma_kv,tile_n64,default; do
  echo "== $order"
  timeout 200 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/tile_${order//,/_}_$sha.log" 2>&1
  tail -$((n + 1)) "$out/tile_${order//,/_}_$sha.log"
done
