#!/usr/bin/env bash
# record_varlen's mixed form (issue 49, item 2) on an H100 or H200 in one command:
# HEAD's chunk, lib (record_chunked), varlen, layer, model and rollback tests (the chunk
# tests' gpu_varlen_mixed_by_default runs the mixed form on the matrix units); then
# record_varlen and record_layer_varlen (split) on packed prompts, bf16 and f32, by
# default (the mixed form where it is chosen), all sequences chunked
# (DELTATAPE_RECORD_CHUNKED=1) and all sequential (=0), alternating, over: the 8 prompts
# of shared/bench/fla_varlen_bench.py, one 8192-token prompt beside 64 of 100 tokens,
# and 8192 beside 100; and that script (fla 0.6.0's varlen chunk call, CUDA graphs) on
# the first two. Within BUDGET_S (default 540 s); logs under $OUT.
#
# Expects, in the project's root, .gl/ (shared/gpu/README.md) and .dev/vc/ (each
# executable may be gzipped):
#   new          HEAD's `deltatape` binary
#   t/           HEAD's stripped test executables chunk, lib, varlen, layer, model,
#                rollback
#   fla/         fla_varlen_bench.py and the fla 0.6.0 wheels
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/vc; NEW=$E/new; export DELTATAPE_BIN=$NEW
for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
t() { echo "== $(date +%T) [$(left) s left] $*"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $NEW info 2>&1 | head -8; } > "$OUT/info.txt" 2>&1
tb() {
  local log=$1 bin=$2 lim=$3; shift 3
  if [ "$(left)" -lt 60 ]; then t "skipped test $log"; return; fi
  t "test $log: $bin $*"
  timeout "$lim" "$E/t/$bin" --nocapture --test-threads 1 "$@" > "$OUT/t-$log.log" 2>&1; echo "rc $?"
  grep -E "^test result|panicked|FAILED|mixed|cooperative-matrix path|twins" "$OUT/t-$log.log" | sort | uniq -c | head -16
}
{ tb chunk chunk 120; tb lib lib 90 record_chunked; tb varlen varlen 120; tb layer layer 120
  CARGO_MANIFEST_DIR=$PWD tb model model 60; tb rollback rollback 60; } > "$OUT/tests.txt" 2>&1
W="--ops record_varlen,record_layer_varlen --dtypes bf16,f32 --runs 10 --warmup 2 --fast-f16"
vl() {
  local name=$1 chunked=$2; shift 2
  if [ "$(left)" -lt 60 ]; then t "skipped $name"; return; fi
  t "$name"
  env ${chunked:+DELTATAPE_RECORD_CHUNKED=$chunked} DELTATAPE_RECORD_SPLIT=1 timeout 60 "$NEW" bench $W "$@" 2>&1 \
    | grep -E "^record|rror" | sed "s/^/$name /"
}
MANY=8192$(printf ',100%.0s' $(seq 64))
{
  for r in 1 2; do
    vl fla8-default ""; vl fla8-chunked 1; vl fla8-sequential 0
  done
  vl many-default "" --lens $MANY; vl many-chunked 1 --lens $MANY; vl many-sequential 0 --lens $MANY
  vl two-default "" --lens 8192,100; vl two-sequential 0 --lens 8192,100
} > "$OUT/varlen.txt" 2>&1
if [ "$(left)" -gt 100 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  { PYTHONPATH=/tmp/site timeout 120 python3 $E/fla/fla_varlen_bench.py; echo "fla rc $?"
    LENS=$MANY PYTHONPATH=/tmp/site timeout 120 python3 $E/fla/fla_varlen_bench.py; echo "fla rc $?"; } > "$OUT/fla-varlen.txt" 2>&1
fi
t end >> "$OUT/varlen.txt"
cat "$OUT/info.txt" "$OUT/tests.txt" "$OUT/varlen.txt" "$OUT/fla-varlen.txt" 2>/dev/null | grep -v "^\s*$" | tail -150
