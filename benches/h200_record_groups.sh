#!/usr/bin/env bash
# Record's steps several a reduction (GdnClass::steps_per_sum, 2026-12-07), on an H100 or
# H200 in one command: record's sequential kernel at B = 1 and 8 (the small-grid class,
# where the groups are meant to pay), T = 4, 16 and 256, bf16 and f32, with
# DELTATAPE_RECORD_SPS = 1 (one step a reduction, the table's default), 4, 8 and 2
# alternating twice; the same build's GPU tests on the device (the groups on NVIDIA's
# 32-wide subgroups; chunk's on the matrix units); fla 0.6.0's fused recurrent kernel
# (CUDA graphs) beside; then a prefill (T = 2048, record's sequential kernel) and
# record_layer / fold_record at each setting. Within BUDGET_S (default 540 s).
#
# Expects .gl/ and $GROUPS_E (default .dev/s14/): bin(.gz) (the deltatape binary), t/*(.gz)
# (the test executables of the same build: gpu_kernels, rollback, layer, varlen, model,
# chunk, lib), fla/ (the fla 0.6.0 wheels and ../shared/bench/fla_bench.py cut to
# B = 1 and 8). Run with carry [".dev/s14", ".gl"].
set -u
E=${GROUPS_E:-.dev/s14} DEFAULT_BUDGET_S=540
. benches/device_env.sh # left, tests
g() { # SPS BENCH-ARGS...: one bench call with that many steps a reduction
  local sps=$1; shift
  [ "$(left)" -lt "${RESERVE_S:-60}" ] && { echo "skipped sps=$sps $*"; return; }
  DELTATAPE_RECORD_SPS=$sps timeout 90 "$E/bin" bench --dims 16,32,128,128 --runs 10 \
    --warmup 2 --copy-mib 64 "$@" 2>&1 | grep -E "^(record|fold)|rror" | sed "s/^/sps=$sps /"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  RESERVE_S=330
  for sps in 1 4 8 2; do g $sps --ops record --batches 1,8 --steps 4,16,256 --dtypes bf16,f32; done
  tests "gpu_kernels 60" "rollback 60" "chunk 100" "layer 60" "varlen 50" "lib 40 record"
  RESERVE_S=80
  for sps in 1 4 8 2; do g $sps --ops record --batches 1,8 --steps 4,16,256 --dtypes bf16,f32; done
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  PYTHONPATH=/tmp/site timeout 70 python3 $E/fla/fla_bench.py 2>&1 \
    | grep -E "RESULT fla_fused_recurrent .* B=(1|8) |Error|error" | head -20
  for sps in 1 4; do g $sps --ops record --batches 1 --steps 2048 --dtypes bf16,f32; done
  for sps in 1 4; do g $sps --ops record_layer,fold_record --batches 1,8 --steps 4,16 --dtypes bf16; done
  tests "model 60"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/groups.txt"
