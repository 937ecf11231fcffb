#!/usr/bin/env bash
# The closing run of the session of 2026-12-06 (later), on an H100 or H200 in one
# command: HEAD's chunk, lib (record_chunked), varlen, rollback and layer tests (one
# thread each; the chunk tests' gpu_varlen_mixed_by_default runs record_varlen's mixed
# form on the matrix units); then what naga's bounds checks cost the fast path's passes
# (a probe build, benches/h200_residency.sh's, with DELTATAPE_PROBE_UNCHECKED=1 creating
# its modules with wgpu's ShaderRuntimeChecks::unchecked(): no index clamping) against
# the same build checked, alternating, bf16 and f32, B = 1, T = 256 and 8192. Within
# BUDGET_S (default 330 s); logs under $OUT.
#
# Expects .gl/, .dev/vc/new (HEAD's `deltatape`, which the bench tests run; the run of
# 2026-12-06 lacked it, so its chunk and varlen bench tests failed to start it),
# .dev/vc/t/ (HEAD's stripped test executables, gzipped) and .dev/pv.tgz
# (benches/h200_residency.sh's probe, built with the third patch: in
# src/engine/cache.rs, create_module's runtime checks `unchecked()` where
# DELTATAPE_PROBE_UNCHECKED is set).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-330} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/vc; export DELTATAPE_BIN=$E/new; for f in $(find "$E" -name '*.gz'); do gunzip -f "$f"; chmod +x "${f%.gz}"; done
P=/tmp/pv; mkdir -p $P && tar xzf .dev/pv.tgz -C /tmp && chmod +x $P/d
t() { echo "== $(date +%T) [$(left) s left] $*"; }
tb() {
  local log=$1 bin=$2 lim=$3; shift 3
  if [ "$(left)" -lt 40 ]; then t "skipped test $log"; return; fi
  t "test $log: $bin $*"
  timeout "$lim" "$E/t/$bin" --nocapture --test-threads 1 "$@" > "$OUT/t-$log.log" 2>&1; echo "rc $?"
  grep -E "^test result|panicked|FAILED|mixed|cooperative-matrix path on" "$OUT/t-$log.log" | sort | uniq -c | head -8
}
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  tb chunk chunk 100; tb lib lib 80 record_chunked; tb varlen varlen 60; tb rollback rollback 60
  tb layer layer 60; } 2>&1 | tee "$OUT/tests.txt"
b() { local name=$1 dt=$2; shift 2
  [ "$(left)" -lt 20 ] && { t "skip $name"; return; }
  timeout 60 env "$@" $P/d bench --fast-f16 --ops record_chunked --batches 1 --steps 256,8192 \
    --dtypes $dt --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "chunk_prep|rror" | sed "s/^/$name /"; }
{ for r in 1 2; do for dt in bf16 f32; do
    b checked $dt; b unchecked $dt DELTATAPE_PROBE_UNCHECKED=1
  done; done; } 2>&1 | tee "$OUT/unchecked.txt"
t end
