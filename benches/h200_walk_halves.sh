#!/usr/bin/env bash
# After the seventeenth session landed the passes with fewer barriers (the walk's and the
# output pass's stage in two halves, W from registers, k and v packed, the walk's W
# product by key halves through a shuffle): the walk's halves cost registers (168 for
# 128: one workgroup an SM) and B = 4 lost 4% where B = 1 gained 8.5%. main's kernels
# (`new`) against probe roots read through `bin` (main's build with DELTATAPE_ROOT_<root>,
# not in the crate), rounds alternating:
#   sk       main's walk with its state update by step halves too (invocations li and
#            li ^ 1 each over every other step octet for both their rows, the partner's
#            part handed over by a shuffle: 48 loads from workgroup memory a chunk, not 64)
#   ksone    the walk's key halves by a shuffle on one stage (7 barriers a chunk, 21 KiB)
#   kssk     ksone with sk's state update
#   walkold  the walk before the session (one stage, no shuffle)
#   outold   the output pass before the session (one stage: 12 barriers, 12 KiB)
# then record and fla 0.6.0's chunk kernel (CUDA graphs) at T = 2048 and 8192, B = 1 and
# 4 (issue 49's table in one command), the matrix-unit fast path, the driver's register
# counts, main's tests on the device (the passes against their twin between the
# rounds, the rest after), and what is left of the first pass (now as long as the walk)
# without parts of it (probe roots; their results wrong, their times what is left):
# nogram (the Gram products), nosolve (the substitution's off-diagonal blocks), norhs
# (the right-hand sides' loads after the first two quads).
# Carry [".dev/p23", ".gl"]; within BUDGET_S (default 540).
set -u
E=.dev/p23 DEFAULT_BUDGET_S=540
. benches/device_env.sh # left, tests, c, stats (E is now the absolute .dev/p23)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16,f32)
round() {
  c new bin $vec -- "${cells[@]}"
  c sk bin $vec DELTATAPE_ROOT_chunk_walk=$E/w/sk.wgsl -- "${cells[@]}"
  c ksone bin $vec DELTATAPE_ROOT_chunk_walk=$E/w/ksone.wgsl -- "${cells[@]}"
  c kssk bin $vec DELTATAPE_ROOT_chunk_walk=$E/w/ksone_sk.wgsl -- "${cells[@]}"
  c walkold bin $vec DELTATAPE_ROOT_chunk_walk=$E/w/walkold.wgsl -- "${cells[@]}"
  c outold bin $vec DELTATAPE_ROOT_chunk_out=$E/w/outold.wgsl -- "${cells[@]}"
}
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  round
  tests "t/lib 60 portable"
  round
  c new2k bin $vec -- --ops record_chunked --batches 1,4 --steps 2048 --dtypes bf16,f32
  c record bin -- --ops record --batches 1,4 --steps 2048,8192 --dtypes bf16,f32
  if [ "$(left)" -gt 150 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    CASES="1:2048,1:8192,4:2048,4:8192" DTYPES=bfloat16,float32 PYTHONPATH=/tmp/site \
      timeout 120 python3 $E/fla/fla_prefill_bench.py 2>&1 | grep -E "RESULT fla_chunk|Error|error" | head -12
  fi
  c coop bin -- --fast-f16 --ops record_chunked --batches 1,4 --steps 8192 --dtypes bf16
  stats bin vkstats chunk_walk chunk_out chunk_prep
  for k in chunk_walk chunk_out; do mv "$OUT/$k.spv.hex" "$OUT/new_$k.spv.hex"; done
  DELTATAPE_ROOT_chunk_walk=$E/w/ksone.wgsl DELTATAPE_ROOT_chunk_out=$E/w/outold.wgsl \
    stats bin vkstats chunk_walk chunk_out
  mv "$OUT/chunk_walk.spv.hex" "$OUT/ksone_chunk_walk.spv.hex"
  DELTATAPE_ROOT_chunk_walk=$E/w/ksone_sk.wgsl stats bin vkstats chunk_walk > /dev/null
  mv "$OUT/chunk_walk.spv.hex" "$OUT/kssk_chunk_walk.spv.hex"
  DELTATAPE_ROOT_chunk_walk=$E/w/sk.wgsl stats bin vkstats chunk_walk
  tests "t/chunk 150" "t/rollback 60 long_drafts" "t/varlen 90" "t/layer 90"
  for p in nogram nosolve norhs; do
    c $p bin $vec DELTATAPE_ROOT_chunk_prep=$E/w/$p.wgsl -- "${cells[@]}"
  done
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/walk-halves.txt"
