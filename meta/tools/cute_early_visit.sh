#!/usr/bin/env bash
# H200 visit for bias_early (RelAttnFwdSm90's option: an unmasked band tile's bias read into
# registers while its QK GEMM runs; TUNING "bias_early") and the dense grid's producer registers.
#   . /tmp/site/env.sh && bash meta/tools/cute_early_visit.sh SHA
# The probe of each variant, then cute_ws_bench A/Bs in both orders (eager do_bench medians):
# the bias_early variants against the build on CASES, and dense_producer40 against the build on
# single-request cases (REGS_CASES), where the plan's grid is the dense one.
sha=${1:?usage: cute_early_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
variants=${VARIANTS:-bias_early_half,bias_early_f32,bias_early_bf16}
for v in ${variants//,/ }; do timeout 90 python3 meta/tools/cute_ws_bench.py --probe $v 2>&1 | tail -1; done
cases=${CASES:-prefill8k_global_page128,prefill8k_sliding_page128,prefill8k_global_page16,serving_chunk2k_decodes63_sliding_page16,serving_chunk2k_decodes63_global_page16,chunk2k_on16k_x4_page16}
reverse=$(echo "default,$variants" | tr , '\n' | tac | paste -sd,)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -l 1 > "$out/smi_early_$sha.csv" &
smi=$!
for order in "default,$variants" "$reverse"; do
  echo "== $order"
  timeout 240 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/early_${order//,/_}_$sha.log" 2>&1
  tail -$(( $(echo $cases | tr , '\n' | wc -l) + 1 )) "$out/early_${order//,/_}_$sha.log"
done
if [ -n "${REGS_CASES-prefill8k_global_page128,prefill32k_global_page128}" ]; then
  for order in default,dense_producer40 dense_producer40,default; do
    echo "== $order"
    timeout 120 python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order \
      --cases ${REGS_CASES:-prefill8k_global_page128,prefill32k_global_page128} > "$out/regs_${order/,/_}_$sha.log" 2>&1
    tail -3 "$out/regs_${order/,/_}_$sha.log"
  done
fi
kill $smi
