#!/usr/bin/env bash
# One H200 visit for decode_splits (issue 17): the CuTe conformance matrix on the default build,
# the matrix and a CUDA-graph replay with cute_backend.DECODE_SPLITS 2, then the kernel timed with
# and without the split on serving batches across decode lengths (cute_ws_bench.py --variants
# decode_splits2). Everything goes to $OUT.
#   . /tmp/site/env.sh && bash meta/tools/cute_splits_visit.sh SHA
sha=${1:?usage: cute_splits_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== conformance -k cute (default build)"
timeout ${CONF_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider tests/test_conformance.py -k "cute and not decode_splits" \
  -rfE > "$out/conformance_$sha.log" 2>&1; tail -3 "$out/conformance_$sha.log"
echo "== decode_splits 2: matrix and CUDA graph"
timeout ${SPLIT_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider tests/test_conformance.py tests/test_cute_dispatch.py \
  -k "decode_splits" -m gpu -rfE > "$out/splits_$sha.log" 2>&1; tail -3 "$out/splits_$sha.log"
echo "== timings"
timeout ${BENCH_TIMEOUT:-200} python3 meta/tools/cute_ws_bench.py --out "$out" --variants decode_splits2 \
  --cases ${CASES:-serving_chunk2k_decodes63at256_global_page16,serving_chunk512_decodes127at1k_global_page16,serving_chunk2k_decodes255at2k_global_page16,serving_chunk2k_decodes63_global_page16,serving_chunk2k_decodes63_global_page128,serving_chunk1k_decodes31at16k_global_page16,serving_chunk1k_decodes31at16k_global_page128} \
  > "$out/splits_bench_$sha.log" 2>&1; tail -12 "$out/splits_bench_$sha.log"
