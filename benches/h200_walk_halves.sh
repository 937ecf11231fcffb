#!/usr/bin/env bash
# The passes on vector units after the seventeenth session (the walk's and the output
# pass's stage in two halves, W from registers, k and v packed, the walk's W product by
# key halves through a shuffle): the walk's halves cost registers (168 for 128: one
# workgroup an SM) and B = 4 lost 4% where B = 1 gained 8.5%. Two calls on one warm
# machine, PHASE=1 then PHASE=2, each within BUDGET_S (default 560); carry
# [".dev/p23", ".gl"].
#
# PHASE=1: main's kernels (`new`, through `bin`: main's build with DELTATAPE_ROOT_<root>,
# which reads a probe root in place of the op's; not in the crate) against, in rounds:
#   sk       the walk's state update by step halves too (invocations li and li ^ 1 each
#            over every other step octet for both their rows, the partner's part handed
#            over by a shuffle: 48 loads from workgroup memory a chunk, not 64;
#            branch walk-step-halves)
#   ksone    the walk's key halves on one stage (7 barriers a chunk, 21 KiB; branch
#            walk-one-stage)
#   kssk     ksone with sk's state update
#   wfma     the walk's products as chains of multiply-adds (dot8: 8 a word where
#            dot + dot + add took 10)
#   rows     `bin2`, branch rows-out: the walk hands the output pass s16 and f16(delta)
#            as rows copied out of `sw` and `dw` a word an invocation (3 stores a chunk
#            for 24 f16 stores), the output pass reads them so (dot8 chains)
#   rowsfma  rows with wfma's walk
#   rall     rows with every walk candidate at once: ksone's one stage, sk, wfma
#   outold   the output pass before the seventeenth session (one stage, 12 barriers)
#   pfma     the first pass's Gram and solve products as chains of multiply-adds
#   pidx     the first pass's right-hand sides: each column's index a base and a step's
#            stride (not rhs_index twice a value), their scales a vec4 a row quad
#   pboth    pfma and pidx together
# (the walk's variants and pfma, pidx in bf16 alone: the walk's time is the same in
# both dtypes)
# then record at T = 2048 and 8192 (issue 49's ratio in the same command) and the
# passes against their twin on the device (`lib portable`, rows' `lib2 twin`).
#
# PHASE=2: fla 0.6.0's chunk kernel (CUDA graphs) beside the vector form at T = 2048
# and the matrix-unit fast path (issue 50's ratio in one command); record_layer fused and
# split (the prologue pass) against `bin3`, branch layer-consts (the norm switch and q's
# scale loaded with the weights, not after the norms' sums); the driver's register
# counts, what is left of the first pass without parts of it (probe roots, bf16; results
# wrong, times what is left): nogram (the Gram products), nosolve (the substitution's
# off-diagonal blocks), norhs (the right-hand sides' loads after the first two quads);
# then the remaining tests (rows' fast-path tests too).
set -u
E=.dev/p23 DEFAULT_BUDGET_S=560
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p23)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16,f32)
bf16=(--ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16)
root() { echo "DELTATAPE_ROOT_chunk_$1=$E/w/$2.wgsl"; }
round() {
  c new bin $vec -- "${cells[@]}"
  c sk bin $vec "$(root walk sk)" -- "${bf16[@]}"
  c ksone bin $vec "$(root walk ksone)" -- "${bf16[@]}"
  c kssk bin $vec "$(root walk ksone_sk)" -- "${bf16[@]}"
  c wfma bin $vec "$(root walk wfma)" -- "${bf16[@]}"
  c rows bin2 $vec -- "${cells[@]}"
  c rowsfma bin2 $vec "$(root walk rows_wfma)" -- "${bf16[@]}"
  c rall bin2 $vec "$(root walk rows_all)" -- "${bf16[@]}"
  c outold bin $vec "$(root out outold)" -- "${cells[@]}"
  c pfma bin $vec "$(root prep pfma)" -- "${bf16[@]}"
  c pidx bin $vec "$(root prep pidx)" -- "${bf16[@]}"
  c pboth bin $vec "$(root prep pboth)" -- "${cells[@]}"
}
layer_cells=(--ops record_layer --batches 1,8,64 --steps 1,4,16 --dtypes bf16,f32)
layers() {
  c fused bin DELTATAPE_RECORD_SPLIT=0 -- "${layer_cells[@]}"
  c fused3 bin3 DELTATAPE_RECORD_SPLIT=0 -- "${layer_cells[@]}"
  c split bin DELTATAPE_RECORD_SPLIT=1 -- "${layer_cells[@]}"
  c split3 bin3 DELTATAPE_RECORD_SPLIT=1 -- "${layer_cells[@]}"
}
phase1() {
  round
  c record bin -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  tests "t/lib 60 portable" "t/lib2 60 twin"
  [ "$(left)" -gt 200 ] && round
}
phase2() {
  c new2k bin $vec -- --ops record_chunked --batches 1,4 --steps 2048 --dtypes bf16,f32
  if [ "$(left)" -gt 150 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:2048,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 120 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
  fi
  c coop bin -- --fast-f16 --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  layers
  [ "$(left)" -gt 400 ] && layers
  stats bin vkstats chunk_walk chunk_out chunk_prep > /dev/null
  for k in chunk_walk chunk_out chunk_prep; do mv "$OUT/$k.spv.hex" "$OUT/new_$k.spv.hex"; done
  for v in sk ksone_sk ksone wfma; do
    export "$(root walk $v)"
    stats bin vkstats chunk_walk > /dev/null
    unset DELTATAPE_ROOT_chunk_walk
    mv "$OUT/chunk_walk.spv.hex" "$OUT/${v}_chunk_walk.spv.hex"
  done
  stats bin2 vkstats chunk_walk chunk_out
  for p in nogram nosolve norhs; do
    c $p bin $vec "$(root prep $p)" -- "${bf16[@]}"
  done
  tests "t/chunk 150" "t/chunk2 60 fast_path" "t/rollback 60 long_drafts" "t/varlen 90" "t/layer 90"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  case ${PHASE:-1} in 1) phase1 ;; *) phase2 ;; esac
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/walk-halves-${PHASE:-1}.txt"
