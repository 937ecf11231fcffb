#!/usr/bin/env bash
# The first pass on vector units with k and v staged (2026-12-07, twelfth session): the
# ablation (h100-2026-12-07-prep-ablate.txt) put half of chunk_prep's 1919 us (bf16,
# B = 1, T = 8192, H100) in U's products, whose v every invocation loaded itself, eight
# scalars a step, sixteen invocations the same words. Now each block of 16 steps by
# 128 columns is loaded once, coalesced, into the solve's triangle (wgsl/chunk_solve.wgsl
# reads it through l_get / l_set), the next block in flight. Builds: base (.dev/s18/
# bin_u: before), p1 (staged; the products over 4 steps unrolled, the Gram products over
# 4 key quads), v2 (p1 with the Gram products one quad at a time), v3 (v2 with the
# products over 16 steps). p1 also has the walk on vector units at 8 value rows (512
# workgroups at B = 1: PROBE_WALK8=1, a probe's switch, not the crate's) beside 16. First
# p1's tests (its lib's portable passes, the 8-row walk among them, and the chunk tests'
# fast path on both forms). Carry [".dev/s20", ".dev/s18", ".gl"]; BUDGET_S (420 s).
set -u
E=.dev DEFAULT_BUDGET_S=420
. benches/device_env.sh # left, tests (E is now the absolute .dev)
c() { # NAME BIN ENV... -- BENCH-ARGS...
  local name=$1 bin=$2; shift 2; local envs=(DELTATAPE_CHUNK_PRECISION=fast-f16)
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ "$(left)" -lt 30 ] && { echo "skipped $name $*"; return; }
  timeout 90 env "${envs[@]}" "$E/$bin" bench --dims 16,32,128,128 --runs 5 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
}
cells=(--batches 1,4 --steps 8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "s20/t/lib 60 portable" "s20/t/chunk 150 gpu_fast_path"
  c base s18/bin_u -- --ops record_chunked "${cells[@]}"
  c p1 s20/p1 -- --ops record_chunked,record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c v2 s20/v2 -- --ops record_chunked "${cells[@]}"
  c v3 s20/v3 -- --ops record_chunked "${cells[@]}"
  c p1-walk8 s20/p1 PROBE_WALK8=1 -- --ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  c p1-again s20/p1 -- --ops record_chunked "${cells[@]}"
  for b in p1 v2 v3; do
    "$E/s20/$b" msl chunk_prep --lang spirv --dtype bf16 > "$OUT/$b.prep.spv.hex" 2>/dev/null
  done
  "$E/s20/p1" msl chunk_walk --lang spirv --dtype bf16 > "$OUT/p1.walk.spv.hex" 2>/dev/null
  [ -x "$E/s20/vkstats" ] && timeout 60 "$E/s20/vkstats" "$OUT"/*.spv.hex 2>&1 | sed "s|$OUT/||"
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/prep-staged.txt"
