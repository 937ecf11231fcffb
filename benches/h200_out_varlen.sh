#!/usr/bin/env bash
# Issue 50 item 3 and record_varlen's split rule, on an H100 or H200 in one command:
# the new build's chunk, record_chunked lib and varlen tests; the fast path's passes with
# chunk_out_coop at 128 value columns a workgroup (new) against 64 (old, the commit
# before), alternating, at B = 1 (T 2048, 8192) and B = 4 (T 8192), bf16 and f32; then
# record_varlen (bf16) on packed mixes, each as a whole chunked (DELTATAPE_RECORD_CHUNKED=1),
# by default, and in the two parts the mixed form runs (its long prompts chunked, the
# rest token by token), for refitting VarlenSplit::by_length. Within BUDGET_S (default
# 500 s); logs under $OUT.
#
# Expects .gl/ (shared/gpu/README.md) and .dev/s4/ (executables may be gzipped): new,
# old (`deltatape` binaries), t/ (the new build's stripped test executables chunk, lib,
# varlen). Run with carry [".dev/s4", ".gl"]: bash benches/h200_out_varlen.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-500} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/s4; export DELTATAPE_BIN=$E/new
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
t() { echo "== $(date +%T) [$(left) s left] $*"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $E/new info 2>&1 | head -4; } > "$OUT/info.txt" 2>&1
tb() {
  local log=$1 bin=$2 lim=$3; shift 3
  [ "$(left)" -lt 60 ] && { t "skipped test $log"; return; }
  t "test $log: $bin $*"
  timeout "$lim" "$E/t/$bin" --nocapture --test-threads 1 "$@" > "$OUT/t-$log.log" 2>&1; echo "rc $?"
  grep -E "^test result|panicked|FAILED|cooperative-matrix path" "$OUT/t-$log.log" | sort | uniq -c | head -16
}
{ tb chunk chunk 150; tb lib lib 90 record_chunked; tb varlen varlen 120; } > "$OUT/tests.txt" 2>&1
b() { local v=$1 lim=$2; shift 2
  [ "$(left)" -lt $((lim + 10)) ] && { t "skipped $v $*"; return; }
  timeout $lim $E/$v bench --fast-f16 "$@" --warmup 2 --copy-mib 64 2>&1 | grep -E "^record|rror" | sed "s/^/$v /"; }
{ for r in 1 2; do for v in new old; do
    b $v 40 --ops record_chunked --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5
  done; done
  for v in new old; do b $v 50 --ops record_chunked --batches 4 --steps 8192 --dtypes bf16,f32 --runs 3; done
} > "$OUT/bench.txt" 2>&1
vl() { local name=$1 chunked=$2 lens=$3
  [ "$(left)" -lt 30 ] && { t "skipped $name"; return; }
  env ${chunked:+DELTATAPE_RECORD_CHUNKED=$chunked} timeout 30 $E/new bench --ops record_varlen --dtypes bf16 \
    --runs 5 --warmup 2 --fast-f16 --copy-mib 64 --lens "$lens" 2>&1 | grep -E "^record_varlen|rror" | sed "s/^/$name /"; }
rep() { printf ",$1%.0s" $(seq $2); }
# name, long part, rest (the rule's split at 512 steps / 64 pairs with Hv = 32)
mixes="fla8 4096,2048 1777,1000,511,300,130,37
m2k6x300 2048 300$(rep 300 5)
m4k4x1k 4096,1000 1000,1000,1000
m8k16x100 8192 100$(rep 100 15)
m1k8x64 1024 64$(rep 64 7)
m4x3k 3000,2500 2000,1500
m8k2x600 8192,600 600
m8k64x100 8192 100$(rep 100 63)"
{ while read -r name long rest; do
    t "$name"
    vl $name-all 1 "$long,$rest"; vl $name-default "" "$long,$rest"
    vl $name-long 1 "$long"; vl $name-rest 0 "$rest"; vl $name-restchunked 1 "$rest"
  done <<< "$mixes"
} > "$OUT/varlen.txt" 2>&1
t end >> "$OUT/varlen.txt"
cat "$OUT/info.txt" "$OUT/tests.txt" "$OUT/bench.txt" "$OUT/varlen.txt" 2>/dev/null | grep -v "^\s*$" | tail -150
