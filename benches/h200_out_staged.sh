#!/usr/bin/env bash
# The output pass on vector units with its operands staged (2026-12-07, twelfth
# session): chunk_out.wgsl copies the start state and gam Q, then delta and M, into
# 12 KiB of workgroup memory a sixth at a time, coalesced, the next part in flight
# through the current one's sums; before, each invocation loaded its words itself, each
# word by sixteen invocations (636 us at bf16 B = 1, T = 8192 on an H100, 30% of the f32
# peak). Against .dev/s21/bin (the commit before), beside record, in one command; first
# the new build's tests: the fast path on both forms, record_varlen through both, the
# lib's passes on vector units, record_layer's split form through them.
# Carry [".dev/s22", ".dev/s21", ".gl"]; within BUDGET_S (default 330 s).
set -u
E=.dev DEFAULT_BUDGET_S=330
. benches/device_env.sh # left, tests (E is now the absolute .dev)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "s22/t/chunk 150 gpu_" "s22/t/lib 60 portable" "s22/t/layer 60 chunked"
  c new s22/bin $vec -- --ops record_chunked,record "${cells[@]}"
  c before s21/bin $vec -- --ops record_chunked "${cells[@]}"
  c new-again s22/bin $vec -- --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  "$E/s22/bin" msl chunk_out --lang spirv --dtype bf16 > "$OUT/out.spv.hex" 2>/dev/null
  [ -x "$E/s22/vkstats" ] && timeout 60 "$E/s22/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/out-staged.txt"
