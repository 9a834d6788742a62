#!/usr/bin/env bash
# One H200 call: is the bias staging's share (8-9% of 8K global page 128, TUNING "2026-12-02 visits
# (b6bbcf6, ...)") shared-memory bandwidth? ncu's shared-memory tables for the build, the build
# with nothing staged (bias_nostage) and all plain tiles (allplain), on 8K global page 128, plus
# the tensor pipe's activity. Compare the "Shared Memory" rows, wavefronts and bank conflicts, and
# sm__pipe_tensor_cycles_active, across the three (the bulk copies write through the async proxy, so
# the tables, not the LSU wavefronts, show them).
#   . /tmp/site/env.sh && bash meta/tools/cute_smem_visit.sh SHA
sha=${1:?usage: cute_smem_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
metrics=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,gpu__time_duration.sum
for v in "" :bias_nostage :allplain; do
  name=${v#:}; name=${name:-build}
  timeout 150 ncu --section MemoryWorkloadAnalysis_Tables --metrics $metrics -k regex:RelAttn -c 1 \
    python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128$v > "$out/cute_ncu_smem_${name}_$sha.txt" 2>&1
  echo "== $name"; grep -E "tensor_cycles|wavefronts_mem_shared|bank_conflicts|duration|Shared" "$out/cute_ncu_smem_${name}_$sha.txt" | head -14
done
