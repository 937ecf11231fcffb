#!/usr/bin/env bash
# The first passes after a clean-up that changes no arithmetic (2026-12-07, twelfth
# session: v's pairs from wgsl/v_pairs.wgsl, chunk_prep_coop's tile helpers without
# their unused lane parameter): the fast path's GPU tests on both forms and the lib's
# passes on vector units, then both forms once at bf16 B = 1, T = 8192 (the same as
# h100-2026-12-07-out-staged.txt within noise). Carry [".dev/s23", ".gl"]; BUDGET_S 200.
set -u
E=.dev DEFAULT_BUDGET_S=200
. benches/device_env.sh # left, tests
{ nvidia-smi --query-gpu=name --format=csv,noheader
  tests "s23/t/chunk 120 gpu_fast_path" "s23/t/lib 40 portable"
  r() { # NAME ARGS...
    local name=$1; shift
    env DELTATAPE_CHUNK_PRECISION=fast-f16 timeout 40 "$E/s23/bin" bench --dims 16,32,128,128 \
      --runs 3 --warmup 1 --copy-mib 64 --batches 1 --steps 8192 --dtypes bf16 \
      --ops record_chunked "$@" 2>&1 | grep -E "^record|rror" | sed "s/^/$name /"
  }
  r coop --fast-f16
  r vector
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/cleanup.txt"
