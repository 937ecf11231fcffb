#!/usr/bin/env bash
# The fast path's kernels on the driver, in one command on an H100 or H200 (issue 50,
# items 1 and 3): the driver's register counts and workgroup memory of each pass and
# variant (benches/vk_stats.rs); HEAD's chunk, layer and varlen tests; the passes timed
# alone with a variant of chunk_prep's or chunk_out_coop's WGSL in place of HEAD's
# (HEAD's between); the variants' chunk tests; record_varlen and record_layer_varlen
# (split and fused forms) on the 8 prompts of shared/bench/fla_varlen_bench.py beside
# that script (fla 0.6.0's varlen chunk call, CUDA graphs). Within BUDGET_S (default
# 560 s); logs under $OUT. Results: benches/results/h200-2026-12-05-variants.txt.
#
# Expects, in the project's root, .gl/ (shared/gpu/README.md) and .dev/exp/:
#   deltatape    HEAD built with a local patch (not committed) to KernelKey::source and
#                check_loops (src/engine/source.rs): for root R, when DELTATAPE_WGSL_R
#                names a file, that file's text is the root's
#   vkstats      `cargo bench --bench vk_stats --no-run`'s executable
#   var/         out-V.wgsl, prep-V.wgsl (the variants; base = HEAD's) and
#                `deltatape msl <op> --lang spirv` of each, as *.hex
#   t/           HEAD's stripped test executables chunk, layer, varlen
#   fla/         fla_varlen_bench.py and the fla 0.6.0 wheels
# Variants (2026-12-05): out sb (the block's 48 B tiles staged in workgroup memory, six
# coop loads and stores a subgroup, before the products), sbA (sb, and each subgroup's
# 12 A tiles loaded into registers first); prep np6 (phase 6, W and U, skipped; wrong
# results on purpose), bw32 (W and U in blocks of 32 columns: a subgroup makes one
# output tile over all four inner tiles, 8 blocks in place of 16).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
left() { echo $(( ${BUDGET_S:-560} - ($(date +%s) - start) )); }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json} WGPU_BACKEND=vulkan CI=true
E=$PWD/.dev/exp; V=$E/var; D=$E/deltatape; export DELTATAPE_BIN=$D
t() { echo "== $(date +%T) [$(left) s left] $*"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader; $D info 2>&1 | head -8; } > "$OUT/info.txt" 2>&1
{ t stats; $E/vkstats $V/*.hex; } > "$OUT/stats.txt" 2>&1
tb() {
  local name=$1 prep=$2 out=$3 bin=$4 lim=$5; shift 5
  if [ "$(left)" -lt 40 ]; then t "skipped test $name $bin"; return; fi
  t "test $name $bin $*"
  if [ "$name" = head ]; then
    timeout $lim $E/t/$bin "$@" > "$OUT/t-$name-$bin.log" 2>&1; echo "rc $?"
  else
    DELTATAPE_WGSL_chunk_prep=$V/prep-$prep.wgsl DELTATAPE_WGSL_chunk_out_coop=$V/out-$out.wgsl \
      timeout $lim $E/t/$bin "$@" > "$OUT/t-$name-$bin.log" 2>&1; echo "rc $?"
  fi
  grep -E "^test result|panicked|FAILED|vs record, f32|T = 4096|by default|kernels compiled" "$OUT/t-$name-$bin.log" | sort | uniq -c | head -12
}
{ tb head - - chunk 90; tb head - - layer 120; tb head - - varlen 120; } > "$OUT/tests-head.txt" 2>&1
bench() {
  local name=$1 prep=$2 out=$3 steps=$4 dt=${5:-bf16} b=${6:-1}
  if [ "$(left)" -lt 150 ]; then t "skipped $name"; return; fi
  t "$name T $steps $dt B $b"
  DELTATAPE_WGSL_chunk_prep=$V/prep-$prep.wgsl DELTATAPE_WGSL_chunk_out_coop=$V/out-$out.wgsl \
    timeout 60 $D bench --fast-f16 --ops record_chunked --batches "$b" --steps "$steps" --dtypes "$dt" \
    --runs 5 --warmup 2 --copy-mib 128 2>&1 | grep -E "^record_chunked|rror" | sed "s/^/$name /"
}
{
  bench base base base 2048,8192
  bench sb base sb 2048,8192
  bench sbA base sbA 2048,8192
  bench np6 np6 base 2048,8192
  bench bw32 bw32 base 2048,8192
  bench base base base 2048,8192
  bench bw32+sbA bw32 sbA 2048,8192
  bench base base base 8192 bf16 4
  bench bw32+sbA bw32 sbA 8192 bf16 4
  bench base base base 8192 f32
  bench bw32+sbA bw32 sbA 8192 f32
} > "$OUT/bench.txt" 2>&1
{ tb sbA base sbA chunk 90; tb bw32 bw32 base chunk 90; tb sb base sb chunk 90; } > "$OUT/tests-var.txt" 2>&1
# The owed record_layer_varlen split / fused beside fla's varlen call.
if [ "$(left)" -gt 100 ]; then
  W="--ops record_varlen,record_layer_varlen --dtypes bf16,f32 --runs 10 --warmup 2"
  { t varlen; echo "== split (DELTATAPE_RECORD_SPLIT=1)"; DELTATAPE_RECORD_SPLIT=1 timeout 60 $D bench $W 2>/dev/null | grep -E "^record"
    echo "== fused (DELTATAPE_RECORD_SPLIT=0)"; DELTATAPE_RECORD_SPLIT=0 timeout 60 $D bench $W 2>/dev/null | grep -E "^record"; } > "$OUT/varlen.txt" 2>&1
fi
if [ "$(left)" -gt 45 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
  PYTHONPATH=/tmp/site timeout $(( $(left) - 10 )) python3 $E/fla/fla_varlen_bench.py > "$OUT/fla-varlen.txt" 2>&1; echo "fla rc $?" >> "$OUT/fla-varlen.txt"
fi
t end >> "$OUT/bench.txt"
