#!/usr/bin/env bash
# The fast path's first pass on vector units in its own f32 form (2026-12-07, twelfth
# session: chunk_prep.wgsl, register-tiled Gram products, wgsl/chunk_solve.wgsl's f32
# solve, W and U with k and v read straight from memory), against the lane-loop twin it
# replaces (.dev/s17's build) and the matrix-unit form, beside record and fla 0.6.0's
# chunk kernel (CUDA graphs), in one command. Also the walk on vector units with its
# two products unrolled (`bin_u`, the loads issued ahead of the sums) against it
# rolled. First the new build's fast-path tests (both forms where the adapter has
# cooperative matrices; chunk_prep_coop now takes its gates from wgsl/chunk_gates.wgsl).
# Carry [".dev/s18", ".dev/s17", ".dev/fla", ".gl"]; within BUDGET_S (default 450 s).
set -u
E=.dev DEFAULT_BUDGET_S=450
. benches/device_env.sh # left, tests (E is now the absolute .dev)
c() { # NAME BIN ENV... -- BENCH-ARGS...
  local name=$1 bin=$2; shift 2; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ "$(left)" -lt 40 ] && { echo "skipped $name $*"; return; }
  timeout 120 env "${envs[@]}" "$E/$bin" bench --dims 16,32,128,128 --runs 5 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
}
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "s18/t/chunk 150 gpu_fast_path" "s18/t/lib 60 portable"
  c vec s18/bin $vec -- --ops record_chunked,record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c vec-unrolled s18/bin_u $vec -- --ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16
  c old s17/bin $vec -- --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  c coop s18/bin -- --fast-f16 --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  if [ "$(left)" -gt 100 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -8
  fi
  for b in bin bin_u; do
    for k in chunk_prep chunk_walk; do
      "$E/s18/$b" msl $k --lang spirv --dtype bf16 > "$OUT/$b.$k.spv.hex" 2>/dev/null
    done
  done
  [ -x "$E/s17/vkstats" ] && timeout 60 "$E/s17/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/prep-vector.txt"
