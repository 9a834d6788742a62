#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck on a few small calls of the CuTe backend (issue 17, item 4).
#
#   bash meta/tools/cute_sanitize.sh SHA      # on the H200, from the repository root
#   TOOLS=memcheck bash meta/tools/cute_sanitize.sh SHA   # the plain run and memcheck only
#
# 1. a plain run of meta/tools/cute_sanitize_cases.py: the cases are correct, and their kernels are
#    compiled once into a private kernel store (so the sanitized runs only load them);
# 2. memcheck, with torch's caching allocator off (every tensor its own allocation, so an access
#    past a tensor is outside any allocation and is reported);
# 3. racecheck (shared-memory hazards between the threads of a CTA).
# Logs go to $OUT (default /tmp/out): cute_sanitize_SHA.log (the summary), cute_memcheck_SHA.log,
# cute_racecheck_SHA.log. Exit status: 0 when the three steps are clean, else 1.
# Needs the CuTe DSL (../shared/device/stage; this script sources /tmp/site/env.sh when present)
# and compute-sanitizer ($COMPUTE_SANITIZER, else on PATH, else under /usr/local/cuda*).
set -uo pipefail
sha=${1:?usage: cute_sanitize.sh SHA}
out=${OUT:-/tmp/out}
mkdir -p "$out"
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export INKLING_OPS_CACHE_DIR=${INKLING_OPS_CACHE_DIR:-/tmp/cute-sanitize-store}
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)}
summary="$out/cute_sanitize_$sha.log"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
if [ -z "$cs" ] || [ ! -x "$cs" ]; then say "compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 1; fi
say "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)  $("$cs" --version | tail -1)"
status=0

say "== plain run (correctness; compiles into $INKLING_OPS_CACHE_DIR)"
python3 meta/tools/cute_sanitize_cases.py 2>&1 | tee -a "$summary"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

for tool in ${TOOLS:-memcheck racecheck}; do  # TOOLS=memcheck: skip racecheck
  log="$out/cute_${tool}_$sha.log"
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check no)
  say "== $tool (log: $(basename "$log"))"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 1500 "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 50 \
    --log-file "$log" python3 meta/tools/cute_sanitize_cases.py 2>&1 | tee -a "$summary"
  rc=${PIPESTATUS[0]}
  tail -3 "$log" | tee -a "$summary"
  say "$tool exit status $rc (0: clean; 99: the tool reported errors; 1: a case was wrong; 124: timed out)"
  [ "$rc" -eq 0 ] || status=1
done
say "cute_sanitize: $([ $status -eq 0 ] && echo clean || echo NOT clean)"
exit $status
