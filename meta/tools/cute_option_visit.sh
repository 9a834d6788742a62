#!/usr/bin/env bash
# H200 visit for one schedule option under trial: a cute_ws_bench VARIANT and the SCHEDULE keywords
# (OPTION, e.g. " rescale_threshold=8.0,") that adopt it.
#   . /tmp/site/env.sh && VARIANT=name OPTION=" key=value," bash meta/tools/cute_option_visit.sh SHA
# The probe of VARIANT, cute_ws_bench against the build in both orders (eager do_bench medians),
# then the conformance suite on the CuTe backend with OPTION added to the device copy's SCHEDULE.
# (At 30b99b8 it ran VARIANT=rescale8 OPTION=" rescale_threshold=8.0,": TUNING "rescale_threshold".)
# VARIANT may list several (a,b: timed as default,a,b and a,b,default); PROBE names the variants
# probed (comma-separated; default VARIANT's), PROBE=none none; OPTION=none skips the conformance run.
sha=${1:?usage: VARIANT=name OPTION=" key=value," cute_option_visit.sh SHA}
variant=${VARIANT:?set VARIANT}; option=${OPTION:?set OPTION (none: no conformance run)}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
probe=${PROBE:-$variant}
for p in ${probe//,/ }; do
  [ "$p" = none ] && continue
  timeout 90 python3 meta/tools/cute_ws_bench.py --probe $p > "$out/probe_${p}_$sha.log" 2>&1; tail -1 "$out/probe_${p}_$sha.log"
done
cases=${CASES:-prefill8k_global_page128,prefill8k_sliding_page128,prefill8k_global_page16,prefill32k_global_page128,chunk2k_on16k_x4_page16,serving_chunk2k_decodes63_global_page16,serving_chunk2k_decodes63_sliding_page16}
n=$(echo $cases | tr , '\n' | wc -l)
for order in default,$variant $variant,default; do
  echo "== $order"
  timeout ${BENCH_TIMEOUT:-170} python3 meta/tools/cute_ws_bench.py --out "$out" --variants $order --cases $cases > "$out/${order//,/_}_$sha.log" 2>&1
  tail -$((n + 1)) "$out/${order//,/_}_$sha.log"
done
[ "$option" = none ] && exit 0
kernel=inkling_ops/kernels/cute_fwd_sm90.py
for key in $(echo "$option" | grep -o '[a-z_0-9]*='); do  # a key SCHEDULE has would be a repeated keyword
  sed -n '/^SCHEDULE = dict(/,/^)/p' $kernel | grep -q "[ (]$key" && { echo "OPTION's ${key%=} is in SCHEDULE already: change it there"; exit 2; }
done
cp $kernel /tmp/cute_fwd_sm90.py.keep
sed -i "s/^\(    bias_bulk=True,.*,\)\$/\1$option/" $kernel  # OPTION's keywords appended to SCHEDULE
grep -qF "$option" $kernel || { echo "could not add '$option' to SCHEDULE"; cp /tmp/cute_fwd_sm90.py.keep $kernel; exit 2; }
timeout ${CONF_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider tests/test_conformance.py tests/test_cute_runtime.py -k cute -rfE \
  > "$out/cute_conformance_${probe//,/_}_$sha.log" 2>&1
echo "== conformance with$option exit $?"; tail -3 "$out/cute_conformance_${probe//,/_}_$sha.log"
cp /tmp/cute_fwd_sm90.py.keep $kernel
