#!/usr/bin/env bash
# The positive and the noise control at full size on a lent H200 (issue 17, item 7): the default
# sweep protocol on synthetic:long-memory and synthetic:random-walk (bar count of 2021-01-01..
# 2025-06-30, lengths 512,4096,32768), then summary.md. Run from the repository root there:
#
#   bash lab/controls_h200.sh        # resumable: run it again until the log says "complete": true
#
# Like lab/h200.sh: optuna and its dependencies come as Python 3.12 wheels in .whl/ (the
# device has no optuna and no polars); a previous invocation's state comes back in as
# .carry/state-<run>.tar (what a run returns as $OUT/state-<run>.tar); outputs go to $OUT (the device tool's return folder). The bars are generated on
# the device, so no data is carried. The runs go to RUN (default runs/controls); publishing is a
# deliberate copy into reports/controls/. Pass TSFLASH_GIT_COMMIT=$(git rev-parse HEAD) so that
# run.json names the commit. EXTRA passes more arguments to lab/controls.py, e.g.
# EXTRA="--long-memory strength=0.1" or EXTRA="--set train.steps=400".
source lab/device_env.sh
RUN=${RUN:-runs/controls}
LENGTHS=${LENGTHS:-512,4096,32768}
BUDGET_S=${BUDGET_S:-400}

# --time-budget: start no new trial after BUDGET_S seconds (counted over both sweeps), so that each
# invocation ends on a trial boundary inside the device's 10-minute limit; the timeout is only a
# safety net (a cell cut there is recomputed next time).
# EXTRA is split as the shell would split it, so a quoted value keeps its spaces
# (EXTRA="--set description=\"two words\"").
eval "extra=(${EXTRA:-})"
timeout --signal=INT "${LIMIT_S:-560}" python3 lab/controls.py --out "$RUN" --lengths "$LENGTHS" --device cuda \
  --preset full --time-budget "$BUDGET_S" "${extra[@]}" 2>&1 | tee "$OUT/controls.log"
echo "controls exit: ${PIPESTATUS[0]}"
# Per-bar cell files stay behind; the cell summaries, fold scores (scores/), series and ledgers go:
# the resume retrains only the cells of folds not yet scored (whose seeds were not all saved).
tar cf "$OUT/state-$(basename "$RUN").tar" --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' "$RUN"
[ -f "$RUN/summary.md" ] && cp "$RUN/summary.md" "$OUT/summary.md"
ls -la "$OUT"
