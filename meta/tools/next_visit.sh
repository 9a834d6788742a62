#!/usr/bin/env bash
# A device visit for issue 17, one call a step, so that each call's command line is short and the
# next can follow at once (a warm machine goes back after 30 s idle). Run from the repository root
# after the two staging calls:
#   call 1: carry [".device/part1"]: bash .device/part1/stash.sh
#   call 2: carry [".device/part2"]: bash .device/part2/install.sh >/tmp/install.log 2>&1; tail -1 /tmp/install.log;
#           . /tmp/site/env.sh && bash meta/tools/next_visit.sh checks SHA
#   call 3: . /tmp/site/env.sh && bash meta/tools/next_visit.sh page64 SHA   (or page64peers)
# (what the earlier visits ran, the trial options' steps since removed among them: meta/TUNING.md,
# "thirteenth day" and "fourteenth day")
# Steps:
#   checks   the GPU tests and the conformance matrix in 8 xdist workers, then the eager host overhead
#   page64   the CuTe backend against Triton at page 64 (for DEFAULT_CASES), eager
#   page64peers  benchmark.py at page 64, cute and Triton with the flash-attn-4 peers, both clocks:
#            the prefill cases, then the serving batches (for DEFAULT_CASES)
#   hd64pages  the CuTe backend at head_dim 64 and page 64 against Triton (cute_ws_bench), then
#            benchmark.py's 8K sliding prefill at pages 16, 64 and 128 in one run, cute and Triton
#            (is the page-64 gap between the two harnesses the harness or the page size?)
#   alone    compute-sanitizer memcheck and racecheck on the build (cute_sanitize.sh), then 8K
#            global prefill against flash-attn-4 without the bias in processes of its own, pages 16
#            and 128, three times: the target's ratio without the rest of the peer run before it
#   rounds   the prefill cases and the chunks against flash-attn-4 without the bias and with vLLM's score_mod,
#            both clocks in three rounds of alternating order (--clock-rounds 3): the targets'
#            ratios with the power cap's drift between loops split evenly between the clocks, then
#            each target met or missed by how much (meta/tools/targets.py)
#   serving  the serving batches against flash-attn-4 without the bias and our Triton, both clocks
#            in three rounds, then targets.py's verdict
#   gap      meta/tools/graph_gap_probe.py on the chunks at page 128 (ours and flash-attn-4 without
#            the bias): CUPTI's kernel time eager and replayed, against the event clocks
#   window   8K sliding at windows 255 to 2047 (cute_ws_bench: the build, allplain, bias_nostage, nopingpong, emptywalk,
#            Triton, flash-attn-4 without the bias), then meta/tools/window_fit.py: what a CTA costs
#            once against what a key tile costs
set -uo pipefail
step=${1:?usage: next_visit.sh checks|page64|page64peers|hd64pages|alone|rounds|serving|gap|window SHA}
sha=${2:?usage: next_visit.sh STEP SHA}
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader
case $step in
  checks)
    WORKERS=8 timeout 460 bash meta/tools/gpu_visit.sh "$sha" tests,conformance
    timeout 90 bash meta/tools/gpu_visit.sh "$sha" host | tail -20 ;;
  page64)
    timeout 300 python3 meta/tools/cute_ws_bench.py --out "$out" --variants default \
      --cases prefill8k_global_page64,prefill8k_sliding_page64,chunk2k_on16k_x4_page64,serving_chunk2k_decodes63_global_page64,serving_chunk2k_decodes63_sliding_page64 \
      > "$out/page64_$sha.log" 2>&1
    tail -6 "$out/page64_$sha.log" ;;
  page64peers)
    common="--git-sha $sha --quick --no-progress --page-sizes 64 --backends cute,triton --peers ours,fa4_scoremod,fa4_nobias --no-host-overhead"
    timeout 280 python3 meta/bench/benchmark.py --out "$out/p64_prefill" $common --cases-filter prefill8k,chunk2k > /dev/null 2>&1
    echo "prefill exit $?"; tail -28 "$out/p64_prefill/bench.log"
    timeout 200 python3 meta/bench/benchmark.py --out "$out/p64_serving" $common --cases meta/bench/serving_cases.json > /dev/null 2>&1
    echo "serving exit $?"; tail -28 "$out/p64_serving/bench.log" ;;
  hd64pages)
    CUTE_WS_HEAD_DIM=64 timeout 240 python3 meta/tools/cute_ws_bench.py --out "$out/hd64" --variants default \
      --cases prefill8k_global_page64,prefill8k_sliding_page64,serving_chunk2k_decodes63_global_page64,serving_chunk2k_decodes63_sliding_page64 \
      > "$out/hd64_page64_$sha.log" 2>&1
    echo "hd64 exit $?"; tail -6 "$out/hd64_page64_$sha.log"
    timeout 200 python3 meta/bench/benchmark.py --out "$out/pages" --git-sha "$sha" --quick --no-progress --page-sizes 16,64,128 \
      --backends cute,triton --peers ours,fa4_nobias --no-host-overhead --cases-filter prefill8k_local > /dev/null 2>&1
    echo "pages exit $?"; tail -14 "$out/pages/bench.log" ;;
  alone)
    timeout 240 bash meta/tools/cute_sanitize.sh "$sha" > /dev/null 2>&1; echo "sanitize exit $?"; tail -4 "$out/cute_sanitize_$sha.log"
    for i in 1 2 3; do
      timeout 60 python3 meta/bench/benchmark.py --out "$out/alone$i" --git-sha "$sha" --quick --no-progress --page-sizes 16,128 \
        --backends default --peers ours,fa4_nobias --no-host-overhead --cases-filter prefill8k_global > /dev/null 2>&1
      echo "alone$i exit $?"; tail -2 "$out/alone$i/bench.log"
    done ;;
  rounds)
    timeout 500 python3 meta/bench/benchmark.py --out "$out/rounds" --git-sha "$sha" --quick --no-progress --clock-rounds 3 \
      --backends default --peers ours,fa4_nobias,fa4_scoremod --no-host-overhead --cases-filter prefill,chunk > /dev/null 2>&1
    echo "rounds exit $?"; tail -10 "$out/rounds/bench.log"
    python3 meta/tools/targets.py "$out/rounds/bench_records.jsonl" ;;
  serving)
    timeout 300 python3 meta/bench/benchmark.py --out "$out/serving" --git-sha "$sha" --quick --no-progress --clock-rounds 3 \
      --backends default,triton --peers ours,fa4_nobias --cases meta/bench/serving_cases.json --no-host-overhead > /dev/null 2>&1
    echo "serving exit $?"; python3 meta/tools/targets.py "$out/serving/bench_records.jsonl" ;;
  gap)
    timeout 300 python3 meta/tools/graph_gap_probe.py --cases chunk2k_on16k_x4 --pages 128 --peers ours,fa4_nobias \
      > "$out/graph_gap_probe_$sha.log" 2>&1
    echo "gap exit $?"; tail -30 "$out/graph_gap_probe_$sha.log" ;;
  window)
    # twice, the variants in the other order the second time (cute_ws_bench's order effect);
    # PASSES=1 or PASSES=2 runs one (a call of its own each, under the 600 s limit)
    cases=prefill8k_sliding_page128,sliding_w255e256_page128,sliding_w1023e1024_page128,sliding_w2047e2048_page128,sliding_w1023e512_page128,sliding_w2047e512_page128
    for pass in ${PASSES:-1 2}; do
      variants=allplain,bias_nostage,nopingpong,emptywalk; [ $pass = 2 ] && variants=emptywalk,nopingpong,bias_nostage,allplain
      timeout 280 python3 meta/tools/cute_ws_bench.py --out "$out/window$pass" --variants $variants --cases $cases \
        > "$out/window${pass}_$sha.log" 2>&1
      echo "window pass $pass exit $?"; tail -8 "$out/window${pass}_$sha.log"
      python3 meta/tools/window_fit.py "$out/window$pass/cute_ws_bench.json"
    done ;;
  *) echo "unknown step $step (checks|page64|page64peers|hd64pages|alone|rounds|serving|gap|window)"; exit 2 ;;
esac
