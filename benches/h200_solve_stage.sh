#!/usr/bin/env bash
# The passes on vector units after three changes (2026-12-07, thirteenth session):
# wgsl/chunk_solve.wgsl's diagonal blocks in registers and merged in pairs (16 -> 32 ->
# 64, 2 x 2 register blocks) where it solved row block by row block; the walk's and the
# output pass's staged tiles unpacked to f32 once, at the copy, where each of the eight
# or sixteen invocations that read a word unpacked it (the output pass's rows whole).
# Against .dev/old/bin (98c6813, the commit before), beside record, in one command;
# first the new build's tests: the fast path on both forms (the matrix-unit path where
# the adapter has it), the portable passes (chunk_wy's solve), the lib's passes on
# vector units, record_layer's split form through them. The coop rows re-time
# bdb0595's clean-up (owed from the twelfth session). `nosolve` is the new build with the
# first pass's solve left out (its results wrong, its time what is left).
# Carry [".dev/new", ".dev/old", ".dev/nosolve", ".gl"]; within BUDGET_S (default 330 s).
set -u
E=.dev DEFAULT_BUDGET_S=330
. benches/device_env.sh # left, tests, c (E is now the absolute .dev)
vec=DELTATAPE_CHUNK_PRECISION=fast-f16
cells=(--batches 1,4 --steps 2048,8192 --dtypes bf16,f32)
{ nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
  tests "new/t/chunk 150 gpu_" "new/t/lib 60 portable" "new/t/layer 60 chunked"
  c new new/bin $vec -- --ops record_chunked,record "${cells[@]}"
  c old old/bin $vec -- --ops record_chunked "${cells[@]}"
  c new-again new/bin $vec -- --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  c old-again old/bin $vec -- --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  c nosolve nosolve/bin $vec -- --ops record_chunked --batches 1 --steps 8192 --dtypes bf16,f32
  c coop-new new/bin -- --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16
  c coop-old old/bin -- --fast-f16 --ops record_chunked --batches 1 --steps 8192 --dtypes bf16
  c exact-new new/bin -- --ops record_chunked --batches 1 --steps 2048 --dtypes f32
  c exact-old old/bin -- --ops record_chunked --batches 1 --steps 2048 --dtypes f32
  stats new/bin new/vkstats chunk_prep chunk_walk chunk_out
  echo "end, $(left) s left"
} 2>&1 | tee "$OUT/solve-stage.txt"
