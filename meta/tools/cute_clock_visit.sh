#!/usr/bin/env bash
# One H200 call: why the chunked prefill's CUDA-graph clock reads above its eager one (cute and
# flash-attn-4 alike, since 432109e; BENCHMARKS.md). The chunks case, cute against flash-attn-4
# without the bias, both clocks: --quick with the default L2 flush (a 256 MB zero_, leaving dirty
# lines), --quick with a read flush (clean lines), and full repetitions (100 graph replays) with
# the default flush. Then ncu's shared-memory tables in full (--print-details all) for the build
# and the all-plain variant on 8K global page 128 (cute_smem_visit.sh printed none of them).
#   . /tmp/site/env.sh && bash meta/tools/cute_clock_visit.sh SHA
sha=${1:?usage: cute_clock_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 - <<'PY' 2>&1 | grep -E "^==|^chunk" | tee "$out/cute_clocks_chunks_$sha.log"
import sys
sys.path.insert(0, "meta/bench")
import benchmark
common = ["--no-progress", "--no-host-overhead", "--records", "none", "--log", "none", "--backends", "cute",
          "--peers", "ours,fa4_nobias", "--cases-filter", "chunk2k_on16k_x4"]
for label, extra in (("quick, zero flush", ["--quick"]), ("quick, read flush", ["--quick", "--l2-flush", "read"]),
                     ("full, zero flush", []), ("quick, zero flush again", ["--quick"])):
    print("==", label, flush=True)
    benchmark.main(common + extra)
PY
for v in "" :allplain; do
  name=${v#:}; name=${name:-build}
  timeout 120 ncu --section MemoryWorkloadAnalysis_Tables --print-details all -k regex:RelAttn -c 1 \
    python3 meta/tools/cute_ws_bench.py --profile prefill8k_global_page128$v > "$out/cute_ncu_smem_tables_${name}_$sha.txt" 2>&1
  echo "== $name"; grep -iE "shared" "$out/cute_ncu_smem_tables_${name}_$sha.txt" | head -20
done
