#!/usr/bin/env bash
# The walk on vector units with its tiles staged (2026-12-07, twelfth session):
# chunk_walk.wgsl copies each chunk's W and (G_end K)^T into workgroup memory a quarter
# at a time (8 KiB), coalesced, the next quarter in flight through the current one's
# sums; before, each of the eight invocations that read a word loaded it itself, after
# the barrier that needed it (1325 us at bf16 B = 1, T = 8192 on an H100, 19% of the
# f32 peak). Against .dev/s20/v3 (the same first pass and output pass, the walk before),
# beside record and fla 0.6.0's chunk kernel, in one command. First the new build's
# tests: the fast path on both forms (chunk: at 16 and 32 rows where the adapter has the
# memory), the lib's portable passes, record_varlen's and record_layer's chunked forms.
# Carry [".dev/s21", ".dev/s20", ".dev/fla", ".gl"]; within BUDGET_S (default 420 s).
set -u
E=.dev DEFAULT_BUDGET_S=420
. benches/device_env.sh # left, tests (E is now the absolute .dev)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "s21/t/chunk 150 gpu_fast_path" "s21/t/lib 60 portable" \
    "s21/t/varlen 60 chunked" "s21/t/layer 60 chunked"
  c new s21/bin $vec -- --ops record_chunked,record "${cells[@]}"
  c before s20/v3 $vec -- --ops record_chunked "${cells[@]}"
  c new32 s21/bin $vec DELTATAPE_CHUNK_WALK_ROWS=32 -- --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  c coop s21/bin -- --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16
  if [ "$(left)" -gt 100 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 100 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -8
  fi
  "$E/s21/bin" msl chunk_walk --lang spirv --dtype bf16 > "$OUT/walk.spv.hex" 2>/dev/null
  [ -x "$E/s21/vkstats" ] && timeout 60 "$E/s21/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/walk-staged.txt"
