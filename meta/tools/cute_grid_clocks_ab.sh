#!/usr/bin/env bash
# One-off A/B (c56296a): both clocks of the chunked prefill and the global serving batch, the plan's
# grid (compact for several requests) against the dense grid, in two orders.
#   . /tmp/site/env.sh && bash meta/tools/cute_grid_clocks_ab.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
for rule in plan dense dense plan; do
  echo "== grid: $rule"
  python3 - "$rule" <<'PY' 2>&1 | grep -E "^chunk|^serving" | tee -a $out/grid_clocks_ab.log
import sys
from inkling_ops.backends import cute_backend
if sys.argv[1] == "dense":
    cute_backend.compact_grid = lambda problem: False
sys.path.insert(0, "meta/bench")
import benchmark
common = ["--quick", "--no-progress", "--no-host-overhead", "--records", "none", "--log", "none", "--backends", "cute", "--peers", "ours,fa4_nobias"]
benchmark.main(common + ["--cases-filter", "chunk2k_on16k_x4"])
benchmark.main(common + ["--cases", "meta/bench/serving_cases.json", "--cases-filter", "global"])
PY
done
