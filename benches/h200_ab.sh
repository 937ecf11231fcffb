#!/usr/bin/env bash
# An A/B run on the H200 in one command: the old and new `deltatape` binaries
# alternating over every bench op (record, replay, repeat; record_chunked, portable and
# fast; record_varlen) and the resident round (draft, commit, conv; deferred: fold_record),
# then the new test binaries, all within a wall-clock budget (the device's command
# limit). Expects .dev/ab.tgz holding d-old, d-new and t/ (stripped test executables),
# and .gl/ the Vulkan loader (shared/gpu/README.md). OPS: the decode grid's ops
# (default record,replay,repeat; add conv,fold_record where both binaries have them).
# BUDGET_S: seconds to stay within;
# a step that would not fit is skipped and says so. Writes logs under $OUT.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-560} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan CI=true
B=/tmp/ab; mkdir -p $B && tar xzf .dev/ab.tgz -C $B
export DELTATAPE_BIN=$B/d-new
t() { echo "== $(date +%T) [$(left) s left] $*"; }
# step NEEDED_SECONDS COMMAND...: run it if that much budget is left.
step() {
  local need=$1; shift
  if [ "$(left)" -lt "$need" ]; then t "skipped (budget): $*"; return; fi
  "$@"
}
test_bin() {
  local f; f=$(ls $B/t/"$1"-* | head -1); t "test $1"
  timeout "${2:-120}" "$f" > "$OUT/test-$1.log" 2>&1; echo "$1 rc $?"
  grep -E "^test result|panicked|FAILED|cooperative-matrix path|fast path" "$OUT/test-$1.log" | head -30
}
bench() { local v=$1; shift; t "$v bench $*"; $B/d-$v bench "$@" 2>/dev/null; }
round() { local v=$1; shift; t "$v round $*"; $B/d-$v round "$@" 2>/dev/null; }

{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  $B/d-new info; } 2>&1 | tee "$OUT/info.txt"
# The test that runs the cooperative-matrix path where the adapter has it.
test_bin chunk 2>&1 | tee "$OUT/tests.txt"
{
  # OPS: the decode grid's ops (conv and fold_record need binaries from b73a7a1 on).
  for v in old new new old; do
    step 40 bench $v --ops "${OPS:-record,replay,repeat}" --dtypes f32,bf16 --runs 10
  done
  for v in old new; do
    step 30 bench $v --fast-f16 --ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2
  done
  # The escape hatch: the new binary with naga's loop counter back in every kernel.
  DELTATAPE_FORCE_LOOP_BOUNDING=1 step 30 bench new --fast-f16 --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16 --runs 5 --warmup 2
  for v in old new; do
    step 40 bench $v --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2
    step 30 bench $v --ops record_chunked --batches 4 --steps 8192 --dtypes bf16 --runs 3 --warmup 1
  done
  for v in old new; do step 20 bench $v --ops record_varlen --dtypes bf16,f32 --runs 5; done
} 2>&1 | tee "$OUT/bench.txt"
{
  for v in old new; do
    step 30 round $v --modes single
    step 30 round $v --modes single --conv-in-place --deferred
  done
} 2>&1 | tee "$OUT/round.txt"
{
  for name in gpu_kernels varlen rollback reliability demo model tune gates conv examples faults validation properties deltatape; do
    step 25 test_bin $name 90
  done
  step 20 t "demo"
  step 20 $B/d-new demo
} 2>&1 | tee -a "$OUT/tests.txt"
t "end"
