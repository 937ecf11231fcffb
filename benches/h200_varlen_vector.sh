#!/usr/bin/env bash
# record_varlen on fla's 8 prompts (9899 tokens, ../shared/bench/fla_varlen_bench.py) with
# each prompt in chunks on the fast path's passes on vector units (2026-12-07, twelfth
# session; DELTATAPE_RECORD_CHUNKED=1 with DELTATAPE_CHUNK_PRECISION=fast-f16), beside
# the sequential kernel (the default) and the portable passes (DELTATAPE_RECORD_CHUNKED=1
# alone), bf16 and f32, then fla 0.6.0's varlen call on the same lengths (CUDA graphs),
# in one command: issue 49's record_varlen targets. Then record_layer at B = 1,
# T = 8192 from raw inputs in the same three forms (its split form runs the prologue,
# then record's form). Carry [".dev/s22", ".dev/fla", ".gl"]; within BUDGET_S (240 s).
set -u
E=.dev DEFAULT_BUDGET_S=240
. benches/device_env.sh # left (E is now the absolute .dev)
c() { # NAME ENV... -- BENCH-ARGS...
  local name=$1; shift; local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  [ "$(left)" -lt 25 ] && { echo "skipped $name $*"; return; }
  timeout 60 env "${envs[@]}" "$E/s22/bin" bench --dims 16,32,128,128 --runs 5 --warmup 2 \
    --copy-mib 64 "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
}
lens=37,130,511,1000,1777,2048,300,4096
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  c sequential x=1 -- --ops record_varlen --lens $lens --dtypes bf16,f32
  c vector DELTATAPE_RECORD_CHUNKED=1 DELTATAPE_CHUNK_PRECISION=fast-f16 -- --ops record_varlen --lens $lens --dtypes bf16,f32
  c portable DELTATAPE_RECORD_CHUNKED=1 -- --ops record_varlen --lens $lens --dtypes bf16,f32
  c layer-seq x=1 -- --ops record_layer,record --batches 1 --steps 8192 --dtypes bf16
  c layer-vector DELTATAPE_RECORD_CHUNKED=1 DELTATAPE_CHUNK_PRECISION=fast-f16 -- --ops record_layer,record --batches 1 --steps 8192 --dtypes bf16
  if [ "$(left)" -gt 60 ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site $E/fla/*.whl > /dev/null 2>&1
    LENS=$lens PYTHONPATH=/tmp/site timeout 60 python3 $E/fla/fla_varlen_bench.py 2>&1 | grep -E "RESULT|Error|error" | head -6
  fi
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/varlen-vector.txt"
