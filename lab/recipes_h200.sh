#!/usr/bin/env bash
# Training-recipe candidates side by side on a lent H200 (issue 29, deliverable 2), several
# lab/recipes.py processes at once on the one GPU: each job is one candidate on its sources,
# into its own folder, so the jobs never share a run folder. Their cost columns are not a measure
# of one cell alone (the GPU time-slices between them). Run from the repository root there:
#
#   bash lab/recipes_h200.sh      # resumable: run it again (with the returned state) until every job says complete
#
# A job is OUT|CANDIDATE|SOURCES|ARGS (ARGS: more recipes.py flags, e.g. "--set train.seeds=[0]"
# for a one-seed screen or "--set model.patch=16" for patch tokens). State comes back in as
# .carry/state-recipes.tar (what a run returns, in parts, as $OUT/state-recipes.tgz.*). Pass
# TSFLASH_GIT_COMMIT=$(git rev-parse HEAD) so that run.json names the commit.
source lab/device_env.sh
BUDGET_S=${BUDGET_S:-420}
# The default jobs are the next measurements after reports/recipes/ (its README, "What remains"): the
# rest of the patch tokens' last round on the echo (patches of 4 bars at 524,288 bars a step, dropout
# 0.2, seeds 0-2: one N=32768 cell and eight N=512 cells left), resumed from
# reports/recipes/pools/unfinished-patch4-seed0|1|2 (README item 2 says how). Its choice is settled
# already (lab/patch_choice.py --final): these cells complete the screen's record, nothing
# more. One call of BUDGET_S=200 LIMIT_S=240, or beside other work.
P4="--set model.dropout=0.2 --set model.patch=4 --set train.tokens_per_step=524288"
RECIPES_JOBS=${RECIPES_JOBS:-"runs/recipes-patch4-s0|short-mix-ema-fast|long-memory|--set train.seeds=[0] $P4
runs/recipes-patch4-s1|short-mix-ema-fast|long-memory|--set train.seeds=[1] $P4
runs/recipes-patch4-s2|short-mix-ema-fast|long-memory|--set train.seeds=[2] $P4"}

# The job lines, parsed once: line k (from 0, job k + 1 in messages) is outs[k], candidates[k],
# sources[k] and its ARGS in extras[k].
outs=(); candidates=(); sources=(); extras=()
while IFS='|' read -r out candidate source extra; do
  [ -z "$out" ] && continue
  outs+=("$out"); candidates+=("$candidate"); sources+=("$source"); extras+=("$extra")
done <<< "$RECIPES_JOBS"

# Every job's BTC bars are checked before any job starts: a missing store would fail that job only
# after the others had taken the call's device time.
for ((i = 0; i < ${#outs[@]}; i++)); do
  [[ ",${sources[i]}," == *",btc,"* ]] || continue
  read -ra flags <<< "${extras[i]}"
  store=data  # recipes.py's default --btc-data
  for ((k = 0; k < ${#flags[@]}; k++)); do [ "${flags[k]}" = "--btc-data" ] && store=${flags[k + 1]:-}; done
  if [ ! -d "$store" ]; then
    echo "job $((i + 1)) (${outs[i]}) reads BTC bars from $store, which is not there: carry .carry/packed" \
         "(python lab/carry_inputs.py --data STORE)" >&2
    exit 2
  fi
done

# The device returns at most 8 files: job logs go to one folder, returned as one tarball.
LOGS=$(mktemp -d)/recipes-logs  # fresh each call: no log of an earlier call comes back
mkdir -p "$LOGS"
pids=()
for ((i = 0; i < ${#outs[@]}; i++)); do
  read -ra flags <<< "${extras[i]}"  # ARGS split on blanks, never globbed (train.seeds=[0] is a pattern)
  # Two threads each: several processes on 16 cores, none starving the others' data work.
  TSFLASH_GPU_JOBS=${#outs[@]} OMP_NUM_THREADS=2 timeout --signal=INT --kill-after=30 "${LIMIT_S:-560}" \
    python3 lab/recipes.py \
    --out "${outs[i]}" --candidates "${candidates[i]}" --sources "${sources[i]}" --device cuda \
    --time-budget "$BUDGET_S" "${flags[@]}" > "$LOGS/recipes-$((i + 1)).log" 2>&1 &
  pids+=("$!")
done
rc=0
for ((i = 0; i < ${#pids[@]}; i++)); do
  wait "${pids[i]}"; job_rc=$?
  echo "job $((i + 1)) (${candidates[i]} in ${outs[i]}) exit: $job_rc"
  grep -E '"complete"|Error|error:' "$LOGS/recipes-$((i + 1)).log" | tail -2
  job_failed "$job_rc" && rc=$job_rc  # device_env.sh: 124, stopped at LIMIT_S, is resumable
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
tar czf "$OUT/recipes-logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
# Cell summaries, fold scores, series, forecasts and ledgers come back; per-bar cell files and
# checkpoints stay (an interrupted cell trains again). Returned files are capped at 16 MiB: parts.
tar czf - --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' runs/recipes* \
  | split -b 15m - "$OUT/state-recipes.tgz."
ls -la "$OUT"
exit $rc
