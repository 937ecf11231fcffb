#!/usr/bin/env bash
# Where chunk_prep_coop's time goes (issue 50, item 1), in one command on an H100 or
# H200: (1) the driver's statistics (benches/vk_stats.rs) of small cooperative-matrix
# kernels, 1 / 9 / 33 products each, to read what one product, one load from workgroup
# or storage memory, one store and one scalar f16 access cost in the driver's binary;
# (2) the pass timed at B = 1, bf16, T = 256 (128 workgroups: one an SM) and 8192 with
# one phase of its WGSL cut out at a time (results wrong on purpose), alternating with
# the unchanged pass, and each variant's statistics. Within BUDGET_S (default 300 s).
#
# Expects .gl/ (shared/gpu/README.md) and .dev/pv2.tgz holding pv2/d (the probe build of
# benches/h200_residency.sh: DELTATAPE_ROOT_<root> names a WGSL file read in place of
# the op's root), pv2/vkstats, pv2/w/prep_*.wgsl (the variants: base, no2 the Gram
# blocks, no3 the rounds through `fs`, no4 the forward substitution, no5 the merges, no5c
# A's completion, no6 W and U, skel all of 2-6), pv2/s/*.spv (the small kernels, from a one-off
# generator not kept: a workgroup of 8 subgroups, 1 / 9 / 33 products of the kind the name says:
# reg operands in registers, wg / wgc / wgt / wg16 loaded from workgroup memory at a run-time
# / constant base / column-major / stride 16, st from storage, fst each product's sum
# stored to f32 workgroup memory, sc scalar f16 accesses) and pv2/s/*.spv.hex (the passes).
# Run with carry [".dev/pv2.tgz", ".gl"]: bash benches/h200_phases.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-300} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
P=/tmp/pv2; tar xzf .dev/pv2.tgz -C /tmp && chmod +x $P/d* $P/vkstats
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; "$P/d" info 2>&1 | head -3; } | tee "$OUT/info.txt"
[ -n "$(ls $P/s 2>/dev/null)" ] && (cd $P/s && timeout 90 ../vkstats *.spv *.spv.hex) 2>&1 | tee "$OUT/stats.txt"
[ -x $P/cm ] && timeout 60 $P/cm run resident 2>&1 | grep RESULT | tee "$OUT/resident.txt"
v() { local n=$1; shift; DELTATAPE_ROOT_chunk_prep=$P/w/prep_$n.wgsl "$P/d" "$@"; }
b() { local n=$1
  [ "$(left)" -lt 15 ] && { echo "skip $n"; return; }
  timeout 40 bash -c "$(declare -f v); P=$P; v $n bench --fast-f16 --ops record_chunked --batches 1 --steps ${STEPS:-256,8192} --dtypes bf16 --runs 5 --warmup 2 --copy-mib 64" 2>&1 \
    | grep -E "chunk_prep|rror" | sed "s/^/$n /"; }
{ for r in 1 2; do for n in ${VARIANTS:-base no2 no3 no4 no5 no5c no6 skel}; do b $n; done; done; } 2>&1 | tee "$OUT/sweep.txt"
# The same variants in the split form (DELTATAPE_CHUNK_PREP_SPLIT=1: the solve, then
# chunk_wu_coop).
for n in ${SPLIT_VARIANTS:-}; do
  timeout 40 env DELTATAPE_CHUNK_PREP_SPLIT=1 DELTATAPE_ROOT_chunk_prep=$P/w/prep_$n.wgsl $P/d bench --fast-f16 --ops record_chunked --batches 1 --steps ${STEPS:-256,8192} --dtypes bf16 --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "chunk_prep|rror" | sed "s/^/split-$n /"
done 2>&1 | tee "$OUT/split.txt"
# Whole binaries against each other (pv2/d and the names in BINS), alternating.
for r in 1 2; do for bin in ${BINS:-}; do
  [ "$(left)" -lt 30 ] && { echo "skip $bin"; continue; }
  timeout 60 $P/$bin bench --fast-f16 --ops record_chunked --batches 1,4 --steps 2048,8192 --dtypes bf16,f32 --runs 5 --warmup 2 --copy-mib 64 2>&1 | grep -E "^record_chunked|rror" | sed "s/^/$bin /"
done; done 2>&1 | tee "$OUT/bins.txt"
echo "end, $(left) s left"
