#!/usr/bin/env bash
# A/A replicates at full size on a lent H200 (issue 28, item 2): the default protocol with two
# disjoint seed sets on the same folds, on synthetic markets (generated on the device, nothing to
# carry but optuna's wheels in .whl/). Every job of AA_JOBS is one sweep; they run side by side on
# the one GPU (the GPU time-slices between them; their data preparation, baselines and scoring on
# the CPU overlap the others' training), so their cost columns are not a measure of one cell alone.
# Run from the repository root there:
#
#   bash lab/aa_h200.sh      # resumable: run it again (with the returned state) until every job says "complete"
#
# A job is NAME|DATA|LENGTHS|SEEDS. The runs go to runs/aa/NAME; publishing is a deliberate copy
# into reports/controls/aa/. State comes back in as .carry/state-aa.tar (what a run returns as
# $OUT/state-aa.tar). Pass TSFLASH_GIT_COMMIT=$(git rev-parse HEAD) so that run.json names the commit.
# The jobs' seeds 3-5 of long-memory replicate reports/controls/protocol/long-memory (config
# identical but for train.seeds); the iid and regime markets have both seed sets here.
source lab/device_env.sh
BUDGET_S=${BUDGET_S:-420}
AA_JOBS=${AA_JOBS:-"long-memory-seeds345|synthetic:long-memory:0:strength=0.2|512,4096|3,4,5
iid-seeds012|synthetic:iid:0|512,4096|0,1,2
iid-seeds345|synthetic:iid:0|512,4096|3,4,5
regime-seeds012|synthetic:regime:0|512|0,1,2
regime-seeds345|synthetic:regime:0|512|3,4,5"}

mkdir -p runs/aa
pids=()
while IFS='|' read -r name data lengths seeds; do
  [ -z "$name" ] && continue
  if python3 -c "import sys; from tsflash.runfolder import RunFolder as R; f = R('runs/aa/$name'); sys.exit(not (f.exists() and f.is_complete()))"; then
    echo "$name: complete in an earlier call"; continue
  fi
  # Two threads each: five processes on 16 cores, none starving the others' data work.
  OMP_NUM_THREADS=2 timeout --signal=INT "${LIMIT_S:-560}" python3 -m tsflash.cli sweep --lengths "$lengths" \
    --data "$data" --out "runs/aa/$name" --device cuda --preset full --set name=protocol \
    --set "train.seeds=[$seeds]" --no-precision --time-budget "$BUDGET_S" > "$OUT/aa-$name.log" 2>&1 &
  pids+=("$!:$name")
done <<< "$AA_JOBS"
for p in "${pids[@]}"; do
  wait "${p%%:*}"; echo "${p#*:} exit: $?"; tail -2 "$OUT/aa-${p#*:}.log"
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
# Per-bar cell files stay behind; cell summaries, fold scores, series, forecasts and ledgers go.
tar cf "$OUT/state-aa.tar" --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' runs/aa
for d in runs/aa/*/; do
  python3 -c "import sys; from tsflash.runfolder import RunFolder as R; f = R('$d'); print('$d', 'complete:', f.exists() and f.is_complete())"
done
ls -la "$OUT"
