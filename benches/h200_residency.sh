#!/usr/bin/env bash
# What holds chunk_prep_coop to one workgroup at a time an SM (issue 50), on an H100 or
# H200 in one command: the driver's statistics (benches/vk_stats.rs) and the fast path's
# passes timed at B = 1 over T = 256 ... 8192 (128 workgroups a 256 steps: one an SM at
# T = 256) with variants of the pass's WGSL, twice, alternating: base (main), fs32 (`fs`
# unpadded, 31264 bytes), fs24 (29216 bytes, wrong values), pad36 (36384 bytes), rolled
# (every constant loop bound made opaque to unrolling), and base with
# DELTATAPE_CHUNK_PREP_SPLIT=1; then the fast path's portable twins forced onto the
# matrix units' GPU beside the portable passes and record. Within BUDGET_S (default 420
# s); logs under $OUT. Results: benches/results/h100-2026-12-06-residency.txt.
#
# Expects, in the project's root, .gl/ (shared/gpu/README.md) and .dev/pv.tgz holding
# pv/d (a probe build of deltatape), pv/vkstats (`cargo bench --bench vk_stats
# --no-run`'s executable) and pv/w/*.wgsl (the variants). The probe build is main with
# two patches that stay out of the branch:
#   src/engine/source.rs, KernelKey::source: where DELTATAPE_ROOT_<root> names a file,
#     assemble its text in place of the op's root (here DELTATAPE_ROOT_chunk_prep);
#   src/op/record_chunked/gpu.rs, prepare_record_chunked's fast path: the walk key's
#     `coop` false where DELTATAPE_PROBE_TWINS is set (the three twins run).
# The variants, from main's src/op/record_chunked/chunk_prep.wgsl:
#   fs32, fs24: `const FS: u32 = 32u + 4u;` as 32u, 24u;  pad36: h16's length + 2048u;
#   rolled: every `for` whose bound is a constant (not after `#unroll`) bounded by
#     `(bound) * min(params.workgroups, 1u)`.
# Packed with: tar czf .dev/pv.tgz -C /tmp pv/d pv/w pv/vkstats; run with carry
# [".dev/pv.tgz", ".gl"]: bash benches/h200_residency.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-420} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
P=/tmp/pv; mkdir -p $P && tar xzf .dev/pv.tgz -C /tmp && chmod +x $P/d $P/vkstats
t() { echo "== $(date +%T) [$(left) s left] $*"; }
v() { local n=$1; shift; if [ "$n" = base ]; then "$P/d" "$@"; else DELTATAPE_ROOT_chunk_prep=$P/w/$n.wgsl "$P/d" "$@"; fi; }
b() { local n=$1 steps=$2 dt=${3:-bf16}; shift 3
  [ "$(left)" -lt 20 ] && { t "skip $n $steps"; return; }
  timeout 60 env "$@" bash -c "$(declare -f v); P=$P; v $n bench --fast-f16 --ops record_chunked --batches 1 --steps $steps --dtypes $dt --runs 5 --warmup 2 --copy-mib 64" 2>&1 \
    | grep -E "chunk_prep|rror" | sed "s/^/$n $* /"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; "$P/d" info 2>&1 | head -5; } | tee "$OUT/info.txt"
for n in base fs32 fs24 pad36 rolled; do v $n msl chunk_prep_coop --lang spirv --dtype bf16 > $P/$n.spv.hex; done
for k in chunk_walk_coop chunk_out_coop chunk_wu_coop; do "$P/d" msl $k --lang spirv --dtype bf16 > $P/$k.spv.hex; done
timeout 60 $P/vkstats $P/*.spv.hex 2>&1 | tee "$OUT/stats.txt"
{ for r in 1 2; do for n in base fs32 fs24 pad36 rolled; do b $n 256,512,1024,2048,8192 bf16; done; done
  b base 256,512,1024,2048,8192 bf16 DELTATAPE_CHUNK_PREP_SPLIT=1
  for n in base fs32 rolled; do b $n 8192 f32; done
} 2>&1 | tee "$OUT/sweep.txt"
{ timeout 90 env DELTATAPE_PROBE_TWINS=1 $P/d bench --fast-f16 --ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "record_chunked|rror" | sed "s/^/twins /"
  timeout 90 $P/d bench --ops record_chunked,record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32 --runs 3 --warmup 1 --copy-mib 64 2>&1 | grep -E "^record|rror" | sed "s/^/portable /"
} 2>&1 | tee "$OUT/twins.txt"
t end
