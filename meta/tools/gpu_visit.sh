#!/usr/bin/env bash
# One visit to the H200, as docs/running.md describes it: correctness first, then timings.
#
#   bash meta/tools/gpu_visit.sh SHA tests   # GPU tests (-m "gpu and not slow"), the A/B of the Triton backend against
#                                            # the base copy in .ab/base (if present), the host-overhead probe
#   bash meta/tools/gpu_visit.sh SHA bench   # the peer benchmark (every peer, both clocks)
#
# Writes logs and records under $OUT (the device tool brings them back). SHA names the commit the
# tree is at (the copied tree has no usable .git).
set -uo pipefail
sha=${1:?usage: gpu_visit.sh SHA tests|bench}
part=${2:?usage: gpu_visit.sh SHA tests|bench}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
case $part in
  tests)
    python3 -m pytest tests -m "gpu and not slow" -q -p no:cacheprovider 2>&1 | tee "$out/gpu_tests_$sha.log" | tail -25
    if [[ -d .ab/base/inkling_ops ]]; then
      python3 meta/tools/ab_backend.py .ab/base --label "base=$(cat .ab/base/SHA 2>/dev/null) new=$sha" \
        --out "$out/ab_backend_$sha.jsonl" 2>&1 | tee "$out/ab_backend_$sha.log"
    fi
    python3 meta/tools/host_overhead.py --device cuda --record "$out/host_overhead.jsonl" 2>&1 | tee "$out/host_overhead_$sha.log"
    ;;
  bench)
    python3 meta/bench/benchmark.py --out "$out" --git-sha "$sha" --quick --no-progress 2>&1 \
      | tee "$out/bench_${sha}_all_cases.log" | tail -60
    ;;
  *) echo "unknown part $part (tests|bench)"; exit 2 ;;
esac
