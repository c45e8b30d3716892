#!/usr/bin/env bash
# FP8 attention precision on a lent H200 (issue 14): one GPU, torch 2.11, about 4 minutes.
# Run from the repository root there:
#
#   bash lab/fp8_h200.sh
#
# Input carried into the checkout (git-ignored): .carry/data/btcusdt-1m/btcusdt-1m-2024.parquet
# (one year, about 12 MB; at most 64 MiB travels to the device). Without it the bench still
# runs, on a freshly initialised model with gaussian inputs, and says so in the JSON ("cell").
# Writes to $OUT (the device tool's return folder): precision-fp8.json, precision-fp8.md (the
# table), fp8.log, and the trained cell's checkpoint. The JSON and the table are rewritten after
# every N, so a timeout or an out-of-memory keeps every N before it. Publish with
#   cp $OUT/precision-fp8.json reports/bench/   (and the table into the README's benchmarks)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tsflash-out}
LENGTHS=${LENGTHS:-512,1024,2048,4096,8192,16384,32768,65536,131072}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
ls -la .carry/data/btcusdt-1m/ 2>&1 | tail -3
# SIGINT first (the driver's files are already written up to the last finished N), then KILL.
timeout --signal=INT --kill-after=10 230 python3 lab/fp8_h200.py --data .carry/data --device cuda \
  --lengths "$LENGTHS" --train-n 4096 --out "$OUT" 2>&1 | tee "$OUT/fp8.log"
echo "fp8 exit: ${PIPESTATUS[0]}"
ls -la "$OUT"
