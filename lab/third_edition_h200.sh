#!/usr/bin/env bash
# The pre-registered third edition on a lent H200, in resumable slices (issue 33): the planned runs
# named in RUNS (their folders relative to the plan, e.g. "per-bar controls/aa/per-bar", or "ladder";
# by default the plan's next stage's runs not complete, `python -m lab.plan --next`), side by side on
# the one GPU, each by its plan's own command (`python -m lab.plan --commands`: a `tsflash sweep`, or
# the ladder's script) with --time-budget BUDGET_S, stopped at LIMIT_S. Run from the repository root
# there:
#
#   BUDGET_S=520 LIMIT_S=545 bash lab/third_edition_h200.sh         # the next stage's runs
#   SLICE_BY=cell BUDGET_S=520 LIMIT_S=545 bash lab/third_edition_h200.sh   # a call another follows on this machine
#   RUNS="per-bar controls/aa/per-bar" BUDGET_S=520 LIMIT_S=545 bash lab/third_edition_h200.sh
#   DEVICE_S=400 BUDGET_S=330 LIMIT_S=350 bash lab/third_edition_h200.sh   # a call whose own limit is 400 s
#
# DEVICE_S is the device call's own limit: its timeout, or the session's device time left if less.
#
# At most RUNS_MAX (default 1) runs a call when RUNS is not given: the stage's first run not
# complete, the rest in later calls (the log says which). Runs side by side gain no throughput on one
# H200 (an N=32768 BTC cell of the rule took 118 s alone and 427-533 s with four jobs sharing, an
# N=512 cell 38 s alone and 155-191 s with four: reports/recipes/README.md, ninth to eleventh screens;
# 129-282 s with two, the third edition's first calls), and sharing costs whole folds: a sliced run
# starts a cell only when the rest of its fold fits the slice too (tsflash.sweep.workers.CellQueue:
# a fold is scored from its seeds' per-bar files together, and those stay behind on the device), at
# the longest cell the run has measured at that N; three N=32768 seeds at two runs' pace (up to
# 846 s) never fit a 520 s slice, where alone (354 s at 118 s a cell) they do. The first three calls
# ran two runs side by side: their model cells' per-bar files stayed behind before any fold was
# whole, and those cells are trained again.
# In: the plan, its amendments (AMENDMENT.md, ...: --next and --commands read the plan as amended) and
# its runs' state as .carry/state-third.tar, made here from the repository root by
#   `python lab/carry_state.py reports/third-edition [RUN ...]` (default: the next runs; what a
#   resume and the ladder's summary read, and the whole carry checked against the device's 64 MiB),
# and the BTC bars as .carry/packed (`tsflash data pack`), read where the plan's bar store has no bars
# (a store's folder is not a departure from the plan: its bars are fingerprinted in data.json).
# Out: $OUT/state-third.tgz.* (the plan and the named runs, per-bar cell files and checkpoints left
# behind: an interrupted cell trains again; and this call's record, $PLAN/calls/<start>.json: its
# start, wall-clock seconds, runs and their exit codes, the GPU and how many, which `python -m
# lab.plan --summary` adds up as the device time the plan used) and $OUT/third-logs.tgz. Back
# here, from the repository root: `cat <files_at>/state-third.tgz.* | tar xzf -`, then `python -m
# lab.plan --check reports/third-edition`.
# The checkout's tracked reports/ (about 116 MiB) is over the device's 64 MiB carry: call from a checkout
# holding only this plan's reports, `git sparse-checkout set --no-cone '/*' '!/reports/*' '/reports/third-edition/'`
# (`git sparse-checkout disable` afterwards), carrying .whl and .carry/packed. A warm machine goes back after
# a short idle time: start the next call as soon as one returns; its state comes back from $KEEP (below).
# SLICE_BY (a sweep's --slice-by, default fold): where a call's slice may end. By fold, a slice shorter
# than three of the longest N's cells (about 450 s on an H100) starts no fold at that N, except a run's
# first cell where none of its cells at that N is measured (it starts on a guess, so that every slice makes
# progress). By cell, any cell that fits starts: the per-bar files of a fold left half done stay in $KEEP
# for the next call on the same warm machine, and are lost only when the machine goes back. So call with
# SLICE_BY=cell while another call follows, and let the session's last call slice by fold; a fold begun
# comes first in the next call (tsflash.sweep.workers.CellQueue). Size the last call to a whole fold
# (`python -m lab.plan --check` says how long one of the next run takes at each N), with room for a
# fresh process's first cell, which ran 68-72 s at N=4096 on an H100 where later ones ran 51-58 s.
# A run's first fold at an N starts on the cost table's H200 price: on an H100 an echo/per-bar cell ran
# 98-152 s at N=32768 and 36-73 s at N=4096, so a fold there takes 342-430 s (BUDGET_S=520 holds one)
# and 140-215 s; slice by fold from a session's first call while N=32768 folds are left, one a call.
# A call's wall-clock is 12-17 s of set-up (the "set-up:" line: 1-4 s of lab/device_env.sh, the rest
# reading the plan, two processes side by side that import torch; 29-38 s one after the other), the
# sweeps, and a few seconds of packing; LIMIT_S counts from the sweeps' start, so the call lowers
# LIMIT_S and BUDGET_S to what DEVICE_S leaves (below), and the device's own stop never takes a call's state.
CALL_START=$(date -u +%Y-%m-%dT%H:%M:%SZ); CALL_T0=$SECONDS  # before the environment: the whole call
source lab/device_env.sh
PLAN=${PLAN:-reports/third-edition}
BUDGET_S=${BUDGET_S:-520}
LIMIT_S=${LIMIT_S:-545}
DEVICE_S=${DEVICE_S:-600}  # the device call's limit (run's timeout_s, at most 600)
STOP_ROOM_S=${STOP_ROOM_S:-30}  # a sweep's stop at LIMIT_S (it is killed 20 s after) and the packing
RUNS_MAX=${RUNS_MAX:-1}  # the stage's runs a call when RUNS is not named (the head says why)
SLICE_BY=${SLICE_BY:-fold}  # where a slice may end (the head says when cell)
case $SLICE_BY in fold|cell) ;; *) echo "SLICE_BY must be fold or cell, got '$SLICE_BY'" >&2; exit 2 ;; esac
if [ ! -f "$PLAN/PLAN.json" ]; then
  echo "no $PLAN/PLAN.json: carry the plan in .carry/state-third.tar" >&2
  exit 2
fi
# On a warm machine an earlier call's state is newer than the checkout's (which comes back only after
# the call): restore it, per-bar files of a fold not yet scored included, so no trained cell is lost.
KEEP=${KEEP:-/tmp/tsflash-keep/$PLAN}  # the tests give each call a folder of its own
T_ENV=$((SECONDS - CALL_T0))  # the set-up's parts, printed below: where a call's first seconds go
if [ -d "$KEEP" ]; then cp -a "$KEEP/." "$PLAN/" && echo "restored the state an earlier call left in $KEEP"; fi
T_KEEP=$((SECONDS - CALL_T0 - T_ENV))
# The plan's commands are read beside its next runs: each is a process that imports torch.
PLANNED_FILE=$(mktemp)
python3 -m lab.plan --commands "$PLAN" > "$PLANNED_FILE" &
PLANNED_PID=$!
if [ -z "${RUNS:-}" ]; then  # the plan's order: the next stage's runs not complete
  RUNS=$(python3 -m lab.plan --next "$PLAN") || exit 2
  if [ -z "$RUNS" ]; then
    echo "every stage of $PLAN/PLAN.json is complete: nothing to run" >&2
    exit 0
  fi
  read -ra next <<< "$RUNS"
  if [ ${#next[@]} -gt "$RUNS_MAX" ]; then
    echo "held for a later call (RUNS_MAX=$RUNS_MAX runs a call): ${next[*]:$RUNS_MAX}"
  fi
  RUNS="${next[*]:0:$RUNS_MAX}"
  echo "the plan's next runs: $RUNS"
fi
wait "$PLANNED_PID" || exit 2
planned=$(cat "$PLANNED_FILE") && rm -f "$PLANNED_FILE"
echo "set-up: ${T_ENV}s environment, ${T_KEEP}s restoring, $((SECONDS - CALL_T0 - T_ENV - T_KEEP))s reading the plan"

# Every named run is found in the plan before any starts: a typo costs nothing.
dirs=(); commands=()
for run in $RUNS; do
  command=""
  while IFS=$'\t' read -r dir line; do
    [ "$dir" = "$PLAN/$run" ] && command=$line
  done <<< "$planned"
  if [ -z "$command" ]; then
    amended=$(cd "$PLAN" && ls AMENDMENT*.md 2>/dev/null | tr '\n' ' ')
    echo "run $run is not in $PLAN/PLAN.json${amended:+ as amended (${amended% })}; its runs: $(cut -f1 <<< "$planned" | sed "s#^$PLAN/##" | tr '\n' ' ')" >&2
    exit 2
  fi
  dirs+=("$PLAN/$run"); commands+=("$command")
done

# Every GPU of the machine: on several, a sweep takes one worker each (`--devices all` for the plan's
# `--device cuda`; the ladder's script `--device all`, its replicates' sweeps likewise: the same run
# key, a cell depends only on its configuration, fold and seed), so a machine of eight GPUs runs a
# stage about eight times as fast.
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$GPUS" -ge 1 ] 2>/dev/null || GPUS=1

# The device ends a call at DEVICE_S (the call's own limit) and returns only what is packed by then:
# the sweeps stop at LIMIT_S after the set-up, with room left for their stop and the packing, and each
# slice's budget ends before that stop, or its last fold's per-bar files are lost with the machine.
room=$((DEVICE_S - (SECONDS - CALL_T0) - STOP_ROOM_S))
if [ "$room" -lt 60 ]; then
  echo "DEVICE_S=$DEVICE_S leaves ${room}s for the sweeps after $((SECONDS - CALL_T0))s of set-up and STOP_ROOM_S=$STOP_ROOM_S: nothing started" >&2
  exit 2
fi
if [ "$LIMIT_S" -gt "$room" ]; then
  echo "LIMIT_S $LIMIT_S -> $room: the device ends the call at DEVICE_S=$DEVICE_S, after $((SECONDS - CALL_T0))s of set-up"
  LIMIT_S=$room
fi
if [ "$BUDGET_S" -gt $((LIMIT_S - 20)) ]; then
  echo "BUDGET_S $BUDGET_S -> $((LIMIT_S - 20)): a slice's budget ends 20s before LIMIT_S stops it"
  BUDGET_S=$((LIMIT_S - 20))
fi

LOGS=$(mktemp -d)/third-logs  # fresh each call: no log of an earlier call comes back
mkdir -p "$LOGS"
pids=()
for ((i = 0; i < ${#dirs[@]}; i++)); do
  eval "set -- ${commands[i]}"  # the plan's own words (shlex-quoted by tsflash preregister)
  # the checkout's own code here, not an installed script: "tsflash sweep ..." or "python lab/..."
  if [ "$1" = "tsflash" ]; then program=(-m tsflash.cli); shift; else program=(); shift; fi
  args=()
  while [ $# -gt 0 ]; do
    # the checkout's data/ holds a README, not bars: the carried store stands in for a store without any
    if [ "$1" = "--data" ] && [[ "$2" != synthetic:* ]] && ! ls "$2"/*/*.parquet >/dev/null 2>&1 \
       && ls .carry/data/*/*.parquet >/dev/null 2>&1; then
      args+=(--data .carry/data); shift 2; continue
    fi
    if [ "$1" = "--device" ] && [ "$2" = "cuda" ] && [ "$GPUS" -gt 1 ]; then
      if [ "${program[*]}" = "-m tsflash.cli" ]; then args+=(--devices all); else args+=(--device all); fi
      shift 2; continue
    fi
    args+=("$1"); shift
  done
  [ "${program[*]}" = "-m tsflash.cli" ] && args+=(--slice-by "$SLICE_BY")  # the ladder's script slices by replicate
  # the last --time-budget wins: this call's slice, also over the ladder's planned 400
  # TSFLASH_GPU_JOBS: each run records that its slice shared the GPU (its report says its cost is shared)
  TSFLASH_GPU_JOBS=${#dirs[@]} OMP_NUM_THREADS=2 timeout --signal=INT --kill-after=20 "$LIMIT_S" \
    python3 "${program[@]}" "${args[@]}" \
    --time-budget "$BUDGET_S" > "$LOGS/$((i + 1)).log" 2>&1 &
  pids+=("$!")
done
rc=0; exits=()
for ((i = 0; i < ${#pids[@]}; i++)); do
  wait "${pids[i]}"; job_rc=$?; exits+=("$job_rc")
  echo "run $((i + 1)) (${dirs[i]}) exit: $job_rc"
  tail -n 2 "$LOGS/$((i + 1)).log"
  job_failed "$job_rc" && rc=$job_rc  # device_env.sh: 124, stopped at LIMIT_S, is resumable
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
# this call's record (run folders are plain paths, so no JSON escaping is needed)
gpu=$(head -n 1 "$OUT/gpu.txt" 2>/dev/null | cut -d, -f1 | tr -d '"')
runs_json=$(printf '"%s",' "${dirs[@]#"$PLAN"/}"); exits_json=$(printf '%s,' "${exits[@]}")
mkdir -p "$PLAN/calls"
printf '{"started": "%s", "seconds": %d, "runs": [%s], "exit_codes": [%s], "budget_s": %d, "limit_s": %d, "gpu": "%s", "gpu_count": %d}\n' \
  "$CALL_START" "$((SECONDS - CALL_T0))" "${runs_json%,}" "${exits_json%,}" "$BUDGET_S" "$LIMIT_S" "$gpu" "$GPUS" \
  > "$PLAN/calls/${CALL_START//:/}.json"
mkdir -p "$KEEP" && cp -a "$PLAN/." "$KEEP/"  # for the next call on this machine (above)
tar czf "$OUT/third-logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"
existing=()
for dir in "${dirs[@]}"; do [ -d "$dir" ] && existing+=("$dir"); done
tar czf - --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' \
  "$PLAN/PLAN.json" "$PLAN/PLAN.md" "$PLAN/calls" "${existing[@]}" | split -b 15m - "$OUT/state-third.tgz."
ls -la "$OUT"
exit $rc
