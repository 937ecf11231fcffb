#!/usr/bin/env bash
# record's bf16 outputs on small grids (2026-12-07): one row an invocation, so a pair of
# rows' bf16 y shares a word written by one of the two invocations; before, the even
# row's values crossed in workgroup memory behind a barrier every step
# (wgsl/record_emit_pairs.wgsl), now by a subgroup shuffle where both rows lie in one
# subgroup. On an H100 bf16 record took 20-26% longer than f32 at B = 1 (T = 2048: 972
# against 771 us, h100-2026-12-07-groups.txt) though it reads half the bytes. Times
# the build before ($OLD, .dev/s15) against the one with the shuffle ($NEW, .dev/s16):
# record at B = 1, 2, 4, 8, T = 1, 4, 16, 256, 2048, bf16 (f32 as the control: its
# kernel did not change). Carry
# [".dev/s15", ".dev/s16", ".gl"]; within BUDGET_S (default 450 s). First the new build's
# GPU tests (s16/t/gpu_kernels), as the shuffle never ran on 32-wide
# subgroups before; one round; then, with what is left, benches/h200_vector_passes.sh
# on the build in .dev/s16/v (the .dev/s17 build, carried inside s16).
set -u
E=.dev DEFAULT_BUDGET_S=450
. benches/device_env.sh # left (E is now the absolute .dev)
c() { # NAME BIN BENCH-ARGS...
  local name=$1 bin=$2; shift 2
  [ "$(left)" -lt 20 ] && { echo "skipped $name $*"; return; }
  timeout 90 "$bin" bench --dims 16,32,128,128 --runs 6 --warmup 2 --copy-mib 64 "$@" 2>&1 \
    | grep -E "^(record|fold)|rror" | sed "s/^/$name /"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "s16/t/gpu_kernels 70"
  for v in old:s15 new:s16; do
    c ${v%%:*} "$E/${v#*:}/bin" --ops record --batches 1,2,4,8 --steps 1,4,16,256,2048 --dtypes bf16,f32
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/pairs.txt"
[ -d "$E/s16/v" ] && VEC_E=.dev/s16/v BUDGET_S=$(left) bash benches/h200_vector_passes.sh
