#!/usr/bin/env bash
# One H200 call: the CuTe kernel at head_dim 64, which compiles (tests/test_cute_compile.py::
# test_cute_compile_head_dim_64) but has not run on a GPU, so the backend refuses it. This lets the
# backend take 64 in the device's copy only (SUPPORTED_HEAD_DIMS), then runs the CuTe conformance
# matrix at head_dim 64 (INKLING_TEST_GPU_HEAD_DIM). If it passes, run the sanitizer on a head_dim 64 case, add 64
# to cute_backend.SUPPORTED_HEAD_DIMS in the repository and time it before choosing it by default.
#   . /tmp/site/env.sh && bash meta/tools/cute_head_dim64_visit.sh SHA
sha=${1:?usage: cute_head_dim64_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
sed -i 's/^SUPPORTED_HEAD_DIMS = (128,)$/SUPPORTED_HEAD_DIMS = (64, 128)/' inkling_ops/backends/cute_backend.py
grep -n '^SUPPORTED_HEAD_DIMS' inkling_ops/backends/cute_backend.py
INKLING_TEST_GPU_HEAD_DIM=64 timeout 200 python3 -m pytest -q -p no:cacheprovider --continue-on-collection-errors \
  tests/test_conformance.py -k cute -rfE > "$out/cute_conformance_hd64_$sha.log" 2>&1
tail -3 "$out/cute_conformance_hd64_$sha.log"
# then, when the matrix passed, cute against triton and flash-attn-4 (no bias) at head_dim 64
if grep -q " passed" "$out/cute_conformance_hd64_$sha.log" && ! grep -q " failed" "$out/cute_conformance_hd64_$sha.log"; then
  CUTE_WS_HEAD_DIM=64 timeout ${HD64_BENCH_TIMEOUT:-150} python3 meta/tools/cute_ws_bench.py --out "$out/hd64" --variants default \
    --cases ${HD64_CASES:-prefill8k_global_page128,prefill8k_global_page16,prefill8k_sliding_page128,serving_chunk2k_decodes63_global_page16} \
    > "$out/cute_ws_bench_hd64_$sha.log" 2>&1
  tail -6 "$out/cute_ws_bench_hd64_$sha.log"
fi
