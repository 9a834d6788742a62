#!/usr/bin/env bash
# The GPU tests other than conformance (which cute_schedule_visit.sh and gpu_visit.sh cute run),
# in one device call under 10 minutes: -m "gpu and not slow" without tests/test_conformance.py,
# then the Hugging Face GPU test with the carried transformers wheel (gpu_visit.sh hf).
#   bash meta/tools/gpu_tests_visit.sh SHA
sha=${1:?usage: gpu_tests_visit.sh SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 INKLING_GIT_SHA=$sha PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
timeout ${TESTS_TIMEOUT:-420} python3 -m pytest tests -m "gpu and not slow" --ignore=tests/test_conformance.py -q -rfE \
  --durations=15 -p no:cacheprovider --continue-on-collection-errors 2>&1 | tee "$out/gpu_tests_$sha.log" | tail -30
bash meta/tools/gpu_visit.sh "$sha" hf 2>&1 | tail -8
