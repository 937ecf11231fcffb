#!/usr/bin/env bash
# chunk_prep_coop in 24 KiB (two workgroups an SM on an H100; issue 50, item 1) in one
# command on an H100 or H200: the new build's chunk tests (every fast-path case on the
# matrix units, gpu_varlen_mixed_by_default in f32 and all bf16 among them), its
# record_chunked lib tests and varlen tests; the fast path's passes, new against old
# (the commit before), alternating, at B = 1 and 4, T = 2048 and 8192, bf16 and f32,
# and the split form (DELTATAPE_CHUNK_PREP_SPLIT=1); fla 0.6.0's chunk kernel (CUDA
# graphs) on the same cells; record itself (the fast path from 2048 steps at B = 1); the
# walk with its row strides unpadded (old, w/walk_*.wgsl).
# Within BUDGET_S (default 540 s); logs under $OUT.
#
# Expects .gl/ (shared/gpu/README.md) and .dev/p24/ (executables may be gzipped): new
# and old (`deltatape` binaries), t/ (the new build's stripped test executables chunk,
# lib, varlen), fla/ (fla_prefill_bench.py and the fla 0.6.0 wheels). Run with carry
# [".dev/p24", ".gl"]: bash benches/h200_prep24.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/p24; export DELTATAPE_BIN=$E/new
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
t() { echo "== $(date +%T) [$(left) s left] $*"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $E/new info 2>&1 | head -4; } > "$OUT/info.txt" 2>&1
tb() {
  local log=$1 bin=$2 lim=$3; shift 3
  [ "$(left)" -lt 60 ] && { t "skipped test $log"; return; }
  t "test $log: $bin $*"
  timeout "$lim" "$E/t/$bin" --nocapture --test-threads 1 "$@" > "$OUT/t-$log.log" 2>&1; echo "rc $?"
  grep -E "^test result|panicked|FAILED|mixed|cooperative-matrix path" "$OUT/t-$log.log" | sort | uniq -c | head -16
}
{ tb chunk chunk 150; tb lib lib 90 record_chunked; tb varlen varlen 120; } > "$OUT/tests.txt" 2>&1
b() { local v=$1 lim=$2; shift 2
  [ "$(left)" -lt $((lim + 10)) ] && { t "skipped $v $*"; return; }
  timeout $lim env ${SPLIT:+DELTATAPE_CHUNK_PREP_SPLIT=1} $E/$v bench --fast-f16 "$@" --warmup 2 --copy-mib 64 2>&1 \
    | grep -E "^record|rror" | sed "s/^/$v${SPLIT:+-split} /"; }
{ for r in 1 2; do for v in new old; do
    b $v 40 --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5
  done; done
  SPLIT=1 b new 40 --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5
  for v in new old; do b $v 50 --ops record_chunked --batches 4 --steps 8192 --dtypes bf16,f32 --runs 3; done
  for v in new old; do b $v 30 --ops record --batches 1 --steps 8192 --dtypes bf16,f32 --runs 5; done
  # The walk in 16 KiB (three workgroups an SM): old (a probe build whose
  # DELTATAPE_ROOT_chunk_walk_coop names the root's WGSL) with w/walk_*.wgsl: base,
  # w16a (both row strides unpadded, 14336 bytes), w16b (the f16 ones only, 16384).
  for r in 1 2; do for n in base w16a w16b; do
    [ "$(left)" -lt 50 ] && continue
    DELTATAPE_ROOT_chunk_walk_coop=$PWD/.dev/p24/w/walk_$n.wgsl timeout 40 $E/old bench --fast-f16 --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "chunk_walk|rror" | sed "s/^/walk-$n /"
  done; done
} > "$OUT/bench.txt" 2>&1
if [ "$(left)" -gt 100 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  CASES="1:2048,1:8192,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
    timeout 150 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -20 > "$OUT/fla.txt"
fi
t end >> "$OUT/bench.txt"
cat "$OUT/info.txt" "$OUT/tests.txt" "$OUT/bench.txt" "$OUT/fla.txt" 2>/dev/null | grep -v "^\s*$" | tail -150
