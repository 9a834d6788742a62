#!/usr/bin/env bash
# Both clocks of prefill8k_global (pages 16 and 128) for the build and for SCHEDULE edits, each in a
# process of its own (the device copy of the kernel edited by sed, so its source hash and cache key
# change), with flash-attn-4 without the bias as the control, in the order given. Written for the
# peer runs' graph clock on 8K global page 128 (up to 5% above the eager one since 432109e): at
# 65686ba every process here read both clocks within 0.8%, so that gap is the peer run's
# (meta/TUNING.md, "The graph clock's 5%").
#   . /tmp/site/env.sh && bash meta/tools/cute_graph_clock_visit.sh [build lean_off tma_off ...]
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}; mkdir -p "$out"
kernel=inkling_ops/kernels/cute_fwd_sm90.py
cp $kernel /tmp/cute_fwd_sm90.py.clock
declare -A EDITS=(
  [build]=""
  [lean_off]="s/lean_mask=True,/lean_mask=False,/"
  [tma_off]="s/tma_kv=True,/tma_kv=False,/"
  [rescale_off]="s/rescale_threshold=8.0,/rescale_threshold=0.0,/"
)
for v in "${@:-build lean_off build lean_off}"; do
  for name in $v; do
    cp /tmp/cute_fwd_sm90.py.clock $kernel
    edit=${EDITS[$name]?unknown variant $name}
    if [ -n "$edit" ]; then
      sed -i "$edit" $kernel
      cmp -s $kernel /tmp/cute_fwd_sm90.py.clock && { echo "$name: the edit '$edit' changed nothing"; exit 2; }
    fi
    echo "== $name"
    timeout ${CASE_TIMEOUT:-120} python3 meta/bench/benchmark.py --quick --no-progress --no-host-overhead --records none \
      --log none --backends cute --peers ours,fa4_nobias --cases-filter prefill8k_global 2>&1 \
      | grep -E "^prefill8k_global|^case|Error" | tee -a "$out/graph_clock_$name.log"
  done
done
cp /tmp/cute_fwd_sm90.py.clock $kernel
