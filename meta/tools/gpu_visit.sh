#!/usr/bin/env bash
# One visit to the H200, as docs/running.md describes it: correctness first, then timings.
#
#   bash meta/tools/gpu_visit.sh SHA tests,ab,host   # steps, in order:
#     tests  the GPU tests (-m "gpu and not slow") but the conformance matrix (about 3 minutes)
#     conformance  the conformance matrix's GPU tests (294 at 5e34de4; about 7 minutes: a call of its own)
#     ab     the Triton backend against the base commit's copy in .ab/base (meta/tools/ab_backend.py)
#     host   the eager host overhead per call (meta/tools/host_overhead.py)
#     split  where the split-KV decode's host time goes (meta/tools/host_overhead.py --split-breakdown)
#     bench  the peer benchmark, every peer, both clocks (meta/bench/benchmark.py --quick)
#     sweep  the sweeps of docs/performance.md (meta/bench/sweep_cases.json, --quick)
#     warmup cold / warm warmup, first call of a warmed process, strict serving (meta/tools/warmup_probe.py)
#     hf     the Hugging Face GPU tests (and the CUDA demo's) with transformers from a carried wheel in .whl/ (the image's 5.17
#            lacks what they need), installed into /tmp/hf ahead of the image's copy
#     cute   the CuTe backend: its conformance cases, the runtime's GPU tests, the launch probe
# BENCH_BACKENDS (default "default,cute") names the backends of ours the bench steps time.
# WORKERS (e.g. 8): the tests, conformance and cute steps run in that many pytest-xdist processes
# (the image has xdist; the steps are compile-bound, and the machine has 16 cores).
# SMI_MS (e.g. 50): sample the SM clock, power and temperature every SMI_MS ms for the whole visit
# into $OUT/smi_SHA.csv.gz (nvidia-smi -lms), to set the records' timestamps against (at 3ee10cd it
# showed the 32K graph / eager disagreement to be the power cap: meta/BENCHMARKS.md, "3ee10cd").
# `python3 meta/tools/smi_clocks.py $OUT/bench_records.jsonl $OUT/smi_SHA.csv.gz` then
# gives each measurement (case, peer, clock) the SM clock and throttle reasons seen during it.
#
# Writes logs and records under $OUT (the device tool brings them back). SHA names the commit the
# tree is at (the copied tree has no usable .git).
set -uo pipefail
sha=${1:?usage: gpu_visit.sh SHA STEP[,STEP...]}
part=${2:?usage: gpu_visit.sh SHA STEP[,STEP...]}
out=${OUT:-/tmp/out}
mkdir -p "$out"
workers=(); [ -n "${WORKERS:-}" ] && workers=(-n "$WORKERS")
export PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
if [ -n "${SMI_MS:-}" ]; then
  fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
  nvidia-smi --query-gpu=$fields --format=csv >/dev/null 2>&1 || fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu
  nvidia-smi --query-gpu=$fields --format=csv,nounits -lms "$SMI_MS" > "$out/smi_$sha.csv" 2>&1 &
  smi_pid=$!
  trap 'kill $smi_pid 2>/dev/null; wait $smi_pid 2>/dev/null; gzip -f "$out/smi_$sha.csv"' EXIT
fi
for step in ${part//,/ }; do
  case $step in
    tests)  # modules whose test-only imports (expecttest, hypothesis) are missing there hold no GPU test
      python3 -m pytest "${workers[@]}" tests -m "gpu and not slow" --ignore=tests/test_conformance.py -q -rfEs -p no:cacheprovider \
        --continue-on-collection-errors 2>&1 | tee "$out/gpu_tests_$sha.log" | tail -25 ;;
    conformance)
      python3 -m pytest "${workers[@]}" tests/test_conformance.py -m "gpu and not slow" -q -rfEs -p no:cacheprovider 2>&1 \
        | tee "$out/gpu_conformance_$sha.log" | tail -15 ;;
    ab)
      python3 meta/tools/ab_backend.py .ab/base --label "base=$(cat .ab/base/SHA 2>/dev/null) new=$sha" \
        --out "$out/ab_backend_$sha.jsonl" 2>&1 | tee "$out/ab_backend_$sha.log" ;;
    host)
      python3 meta/tools/host_overhead.py --device cuda --record "$out/host_overhead.jsonl" 2>&1 | tee "$out/host_overhead_$sha.log" ;;
    split)
      python3 meta/tools/host_overhead.py --device cuda --split-breakdown --record "$out/host_overhead.jsonl" 2>&1 \
        | tee "$out/host_split_breakdown_$sha.log" ;;
    bench)
      python3 meta/bench/benchmark.py --out "$out" --git-sha "$sha" --quick --no-progress --backends "${BENCH_BACKENDS:-default,cute}" 2>&1 \
        | tee "$out/bench_${sha}_all_cases.log" | tail -60 ;;
    sweep)
      python3 meta/bench/benchmark.py --cases meta/bench/sweep_cases.json --out "$out" --git-sha "$sha" --quick --no-progress 2>&1 \
        | tee "$out/bench_${sha}_sweeps.log" | tail -60 ;;
    warmup)
      python3 meta/tools/warmup_probe.py --out "$out/warmup_probe.jsonl" 2>&1 | tee "$out/warmup_probe_$sha.log" ;;
    hf)
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/hf $(ls .whl/transformers-*.whl /tmp/whl/transformers-*.whl 2>/dev/null | head -1) 2>&1 | tail -2
      PYTHONPATH=/tmp/hf:$PYTHONPATH python3 -m pytest tests/test_hf_integration.py tests/test_demo_serving.py -m gpu -q -rA -p no:cacheprovider 2>&1 \
        | tee "$out/gpu_hf_$sha.log" | tail -15 ;;
    cute)
      python3 -m pytest "${workers[@]}" tests/test_conformance.py tests/test_cute_runtime.py tests/test_cute_compile.py -k cute -q -rs -p no:cacheprovider \
        --continue-on-collection-errors 2>&1 | tee "$out/gpu_cute_$sha.log" | tail -15 ;;
    *) echo "unknown step $step (tests|conformance|ab|host|split|bench|sweep|warmup|hf|cute)"; exit 2 ;;
  esac
done
