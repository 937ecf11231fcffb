#!/usr/bin/env bash
# record_varlen in record's chunked form, and the fast path's first pass whole and split,
# on an H100 or H200, in one command (issues 49 and 50):
# HEAD's chunk, varlen, layer and model tests (the cooperative-matrix path over packed
# sequences: each sequence bit for bit record_chunked of it alone); record_varlen and
# record_layer_varlen on the 8 prompts of shared/bench/fla_varlen_bench.py, by default
# and with DELTATAPE_RECORD_CHUNKED=1 (fast path, then portable passes), bf16 and f32,
# and one long prompt beside a short one (the fast path against the sequential kernel),
# beside that script (fla 0.6.0's varlen chunk call, CUDA graphs); the padded fast path
# at B = 1, T = 2048 and 8192 before (OLD) and after (HEAD, its first pass whole and
# split), alternating, first after the chunk tests. Within BUDGET_S (default 560 s);
# logs under $OUT.
#
# Expects, in the project's root, .gl/ (shared/gpu/README.md) and .dev/vc/ (each
# executable may be gzipped):
#   new, old     HEAD's and the base commit's `deltatape` binaries
#   t/           HEAD's stripped test executables chunk, varlen, layer, model, rollback
#                and the library's unit tests as lib (the fast path's portable twins)
#   fla/         fla_varlen_bench.py and the fla 0.6.0 wheels
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-560} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/vc; NEW=$E/new; OLD=$E/old; export DELTATAPE_BIN=$NEW
# The executables travel gzipped (the carry's 64 MiB).
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
t() { echo "== $(date +%T) [$(left) s left] $*"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $NEW info 2>&1 | head -8; } > "$OUT/info.txt" 2>&1
tb() {
  local log=$1 bin=$2 lim=$3; shift 3
  if [ "$(left)" -lt 60 ]; then t "skipped test $log"; return; fi
  t "test $log: $bin $*"
  timeout "$lim" "$E/t/$bin" --nocapture "$@" > "$OUT/t-$log.log" 2>&1; echo "rc $?"
  grep -E "^test result|panicked|FAILED|chunked form at C|chunked packed prefill|twins|cooperative-matrix path" "$OUT/t-$log.log" | sort | uniq -c | head -16
}
# The fast path's first pass whole and split (DELTATAPE_CHUNK_PREP_SPLIT=1), old (base
# commit) and new alternating; each row times the passes one by one.
fp() {
  local name=$1 bin=$2 split=$3
  if [ "$(left)" -lt 40 ]; then t "skipped $name"; return; fi
  t "$name"
  DELTATAPE_CHUNK_PREP_SPLIT=$split timeout 40 "$bin" bench --fast-f16 --ops record_chunked \
    --batches 1 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 128 2>&1 \
    | grep -E "^record_chunked|rror" | sed "s/^/$name /"
}
{ tb chunk chunk 100; DELTATAPE_CHUNK_PREP_SPLIT=1 tb chunk-split chunk 100;
  tb lib lib 60 record_chunked; } > "$OUT/tests.txt" 2>&1
{ fp old "$OLD" 0; fp new "$NEW" 0; fp split "$NEW" 1; fp old "$OLD" 0; fp new "$NEW" 0;
  fp split "$NEW" 1; } > "$OUT/fast.txt" 2>&1
{ tb varlen varlen 120; tb layer layer 120; CARGO_MANIFEST_DIR=$PWD tb model model 60;
  tb rollback rollback 60; } >> "$OUT/tests.txt" 2>&1
W="--ops record_varlen,record_layer_varlen --dtypes bf16,f32 --runs 10 --warmup 2"
vl() {
  local name=$1 bin=$2 chunked=$3; shift 3
  if [ "$(left)" -lt 90 ]; then t "skipped $name"; return; fi
  t "$name"
  env ${chunked:+DELTATAPE_RECORD_CHUNKED=$chunked} DELTATAPE_RECORD_SPLIT=1 timeout 60 "$bin" bench $W "$@" 2>&1 \
    | grep -E "^record|rror" | sed "s/^/$name /"
}
{
  vl old-default "$OLD" "" --fast-f16
  vl new-default "$NEW" "" --fast-f16
  vl new-chunked-fast "$NEW" 1 --fast-f16
  vl new-chunked-portable "$NEW" 1
  vl old-default "$OLD" "" --fast-f16
  vl new-chunked-fast "$NEW" 1 --fast-f16
  # One long prompt beside a short one (record's class shape B = 1, T = 8192, where
  # record takes the fast path by default): the fast path against the sequential kernel.
  vl long-new-chunked-fast "$NEW" 1 --fast-f16 --lens 8192,100
  vl long-new-sequential "$NEW" 0 --fast-f16 --lens 8192,100
} > "$OUT/varlen.txt" 2>&1
if [ "$(left)" -gt 60 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  PYTHONPATH=/tmp/site timeout 50 python3 $E/fla/fla_varlen_bench.py > "$OUT/fla-varlen.txt" 2>&1; echo "fla rc $?" >> "$OUT/fla-varlen.txt"
fi
t end >> "$OUT/varlen.txt"
