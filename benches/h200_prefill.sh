#!/usr/bin/env bash
# Issue 50, item 1 on the H200 (or an H100) in one command: the fast path's first pass
# on cooperative matrices (chunk_prep_coop, replacing chunk_wy + chunk_pack) checked and
# timed against main's binary, beside fla's chunk kernel. Within BUDGET_S (default
# 540 s); a step that would not fit is skipped and says so. Logs under $OUT.
#
# Expects, in the project's root:
#   .gl/            the Vulkan loader's debs (shared/gpu/README.md)
#   .dev/prefill.tgz  d-old (main's deltatape), d-new (this branch's), t/ (stripped test
#                   executables: chunk-*, translate-*, and the library's deltatape-*)
#   .dev/fla_prefill_bench.py and .dev/*.whl (optional: fla 0.6.0, shared/gpu/README.md)
#
# Built and packed on the development machine (x86-64), in the worktree:
#   P=/tmp/pf-pack; rm -rf $P; mkdir -p $P/t .dev
#   (cd /work/main && cargo build --release --bins) && cp /work/main/target/release/deltatape $P/d-old
#   cargo build --release --bins && cp target/release/deltatape $P/d-new
#   cargo test --release --no-run --lib --test chunk --test translate --message-format=json \
#     | jq -r 'select(.executable != null and .profile.test) | .executable' | xargs -I{} cp {} $P/t/
#   strip $P/d-old $P/d-new $P/t/*; tar czf .dev/prefill.tgz -C $P d-old d-new t
#   cp /work/shared/bench/fla_prefill_bench.py .dev/   # and the fla wheels, as the README says
# and run with carry [".gl", ".dev"]: bash benches/h200_prefill.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
B=/tmp/pf; mkdir -p $B && tar xzf .dev/prefill.tgz -C $B
export DELTATAPE_BIN=$B/d-new
t() { echo "== $(date +%T) [$(left) s left] $*"; }
# step NEEDED_SECONDS COMMAND...: run it if that much budget is left.
step() {
  local need=$1; shift
  if [ "$(left)" -lt "$need" ]; then t "skipped (budget): $*"; return; fi
  "$@"
}
# test_bin NAME TIMEOUT [FILTER...]: a test executable, its summary lines.
test_bin() {
  local name=$1 limit=$2; shift 2
  local f; f=$(ls $B/t/"$name"-* 2>/dev/null | head -1)
  if [ -z "$f" ]; then t "no test executable $name"; return; fi
  t "test $name $*"
  timeout "$limit" "$f" "$@" > "$OUT/test-$name.log" 2>&1; echo "$name rc $?"
  grep -E "^test result|panicked|FAILED|cooperative-matrix path|fast path|chunk_prep|twin|SKIPPED" \
    "$OUT/test-$name.log" | grep -v "^test .* ok$" | head -60
}
bench() { local v=$1; shift; t "$v bench $*"; $B/d-$v bench "$@" 2>/dev/null; }

{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  $B/d-new info; } 2>&1 | tee "$OUT/info.txt"

# 1. Correctness: naga on every cooperative variant; the chunk tests (the cooperative
# path must say it ran, and that chunk_prep_coop was compiled); the library's
# record_chunked tests (the CPU twin, and the portable chunk_prep against it here too).
{
  step 20 test_bin translate 60 coop_variants
  step 60 test_bin chunk 200
  step 40 test_bin deltatape 120 record_chunked
} 2>&1 | tee "$OUT/tests.txt"

# 2. The passes, old (chunk_wy + chunk_pack) against new (chunk_prep_coop), each pass
# timed alone (the `passes` rows), alternating binaries; the budget's cell first.
{
  for v in new old; do
    step 25 bench $v --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16 --runs 5 --warmup 2
  done
  for v in new old; do
    step 30 bench $v --fast-f16 --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2
  done
} 2>&1 | tee "$OUT/bench.txt"

# 3. fla's chunk kernel in the same command (CUDA graphs), where its wheels came along.
{
  fla=.dev/fla_prefill_bench.py; [ -f "$fla" ] || fla=../shared/bench/fla_prefill_bench.py
  if ls .dev/*.whl >/dev/null 2>&1 && [ -f "$fla" ]; then
    step 90 t "fla"
    if [ "$(left)" -ge 90 ]; then
      python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/*.whl \
        && CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
           timeout 150 python3 "$fla" 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -20
    fi
  else
    t "fla: no wheels in .dev (shared/gpu/README.md), skipped"
  fi
} 2>&1 | tee "$OUT/fla.txt"

# 4. B = 4, and record itself taking the fast path (B = 1 from 2048 steps).
{
  for v in new old; do
    step 35 bench $v --fast-f16 --ops record_chunked --batches 4 --steps 8192 --dtypes bf16,f32 --runs 3 --warmup 1
  done
  for v in new old; do
    step 25 bench $v --fast-f16 --ops record --batches 1 --steps 8192 --dtypes bf16 --runs 5 --warmup 2
  done
} 2>&1 | tee -a "$OUT/bench.txt"
t "end"
