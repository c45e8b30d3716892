#!/usr/bin/env bash
# How the published results were produced on a lent H200 (one GPU, torch 2.11, no polars/optuna,
# at most 10 minutes and 64 MiB of inputs per run). Run from the repository root there:
#
#   bash lab/h200.sh bench     # attention crossover, precision oracle, training-step MFU -> reports/bench/
#   bash lab/h200.sh sweep     # the real sweep; resumable, so run it again until it reports "done"
#   bash lab/h200.sh scaling   # the default sweep on 1 GPU, then on all GPUs -> reports/bench/scaling.md (resumable)
#   bash lab/h200.sh mfu       # training-step MFU, eager vs torch.compile modes, and auto's kernel per N -> reports/bench/mfu.md
#   bash lab/h200.sh compile   # sweep cells plain vs train.compile=true, compiling counted -> reports/bench/compile-cells.md
#   bash lab/h200.sh model-variants  # faster models against the experiment's on the positive control -> reports/bench/model-variants.md
#   bash lab/h200.sh recipes   # training-recipe candidates on validation tails and controls (issue 29), resumable
#   bash lab/h200.sh ladder    # the echo-strength ladder: detection rate and the 80 % power point (issue 29), resumable
#
# Inputs carried into the checkout (git-ignored): .whl/ (optuna and its 4 dependencies, Python 3.12
# wheels) and .carry/data/btcusdt-1m/*.parquet (the years the sweep needs), or instead .carry/packed/
# (device_env.sh unpacks it into .carry/data; 2021..2025 are 35 MB packed, 54 MB as store files),
# prepared here with: python lab/carry_inputs.py --data STORE (the wheels too; STORE: the bar store)
# A previous run's state comes back in as .carry/state-<run>.tar (what a run returns as $OUT/state-<run>.tar). Outputs go to $OUT (the device tool's return folder) when set.
#
# The sweep writes to the git-ignored runs/ (RUN, default runs/h200-btcusdt-1m); publishing is a
# deliberate copy into reports/. RUN=reports/h200-btcusdt-1m resumes (or re-reports) the published
# run. The copy on the device has no .git: pass TSFLASH_GIT_COMMIT=$(git rev-parse HEAD) so that
# run.json names the commit (otherwise it says "unknown").
source lab/device_env.sh
RUN=${RUN:-runs/h200-btcusdt-1m}
LENGTHS=${LENGTHS:-512,4096,32768,131072}
BUDGET_S=${BUDGET_S:-200}

case "${1:-}" in
  bench)
    T="timeout --signal=INT"
    $T 150 python3 -m tsflash.cli bench attention --device cuda --lengths 256,512,1024,2048,4096,8192,16384,32768,65536,131072 --force --out reports/bench 2>&1 | tee "$OUT/bench-attention.log"
    $T 90 python3 -m tsflash.cli bench attention --device cuda --batch 1 --lengths 1024,4096,16384,32768,65536,131072 --force --out reports/bench/attention-batch1 2>&1 | tail -20
    $T 60 python3 -m tsflash.cli bench precision --device cuda --lengths 512,4096,32768,131072 --force --out reports/bench 2>&1 | tee "$OUT/bench-precision.log"
    $T 90 python3 -m tsflash.cli bench train --device cuda --lengths 512,4096,32768,131072 --force --out reports/bench 2>&1 | tee "$OUT/bench-train.log"
    $T 90 python3 -m tsflash.cli bench train --device cuda --compile --lengths 32768 --force --out reports/bench/train-compile 2>&1 | tail -8
    $T 180 python3 benchmarks/bench_engine.py --data .carry/data --config first-edition --lengths 32768 --device cuda --out reports/bench 2>&1 | tee "$OUT/bench-engine.log"
    tar cf "$OUT/bench.tar" reports/bench
    ;;
  sweep)
    # --time-budget: start no new cell after BUDGET_S seconds, so each run ends on a cell boundary
    # well inside the device's 10-minute limit; the next run resumes from the finished cells.
    # The timeout is only a safety net (a cell cut there resumes from its checkpoint next time).
    # DEVICES=all spreads the cells over every GPU of the machine (one worker each). SWEEP_ARGS adds
    # sweep options, e.g. SWEEP_ARGS="--set train.seeds=[3,4,5]" for an A/A replicate of a run.
    timeout --signal=INT "${LIMIT_S:-560}" python3 -m tsflash.cli sweep --lengths "$LENGTHS" --data .carry/data \
      --devices "${DEVICES:-cuda:0}" --preset full --out "$RUN" --time-budget "$BUDGET_S" ${SWEEP_ARGS:-} 2>&1 | tee "$OUT/sweep.log"
    echo "sweep exit: ${PIPESTATUS[0]}"
    # Per-bar cell files (~10 MB each) stay behind; the cell summaries, fold scores (scores/), series
    # and ledger go: the resume retrains only the cells of folds not yet scored (seeds not all saved).
    tar cf "$OUT/state-$(basename "$RUN").tar" --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' "$RUN"
    ls -la "$OUT"
    ;;
  scaling)
    # The default sweep (SCALING_LENGTHS) from an empty run folder on 1 GPU, then on every GPU of
    # this machine (--devices all: one worker per GPU, each pulling (N, fold, seed) cells); the
    # wall-clock of the whole command (start-up, data, cells, precision check, report). Rows go
    # to reports/bench/scaling.json and .md (a row per GPU count and lengths, replaced on a rerun).
    # SCALING_GPUS="1" or "all" runs one of the two. Resumable: the 1-GPU default sweep takes about
    # 13.5 minutes, more than one call, so each invocation stops starting cells after
    # SCALING_BUDGET_S, adds its wall-clock to the run folder's scaling-seconds.json and returns
    # $OUT/state-scaling.tar; carry it back as .carry/state-scaling.tar and call again until the log
    # says "complete". SCALING_FRESH=1 starts a measurement over (the run folders are deleted).
    SCALING_LENGTHS=${SCALING_LENGTHS:-512,4096,32768}
    K=$(python3 -c "import torch; print(torch.cuda.device_count())")
    t_call=$(date +%s)
    for gpus in ${SCALING_GPUS:-1 all}; do
      if [ "$gpus" = 1 ]; then devs=cuda:0; n=1; else devs=all; n=$K; fi
      [ "$gpus" != 1 ] && [ "$K" = 1 ] && { echo "one GPU only: no multi-GPU row"; continue; }
      run=runs/scaling-$n-gpu
      [ "${SCALING_FRESH:-0}" = 1 ] && rm -rf "$run"
      if python3 -c "import sys; from tsflash.runfolder import RunFolder as R; f = R('$run'); sys.exit(not (f.exists() and f.is_complete()))"; then
        echo "$n GPU(s): complete in an earlier call"; continue
      fi
      left=$(( ${SCALING_LIMIT_S:-570} - ($(date +%s) - t_call) ))
      [ "$left" -lt 120 ] && { echo "$n GPU(s): no time left in this call"; continue; }
      budget=$(( left - 110 ))
      t0=$(date +%s.%N)
      timeout --signal=INT "$left" python3 -m tsflash.cli sweep --lengths "$SCALING_LENGTHS" --data .carry/data \
        --devices "$devs" --preset full --out "$run" --time-budget "$budget" ${SCALING_ARGS:-} >> "$OUT/scaling-$n.log" 2>&1
      echo "sweep on $n GPU(s) exit: $?"
      t1=$(date +%s.%N)
      tail -3 "$OUT/scaling-$n.log"
      python3 -c "from pathlib import Path; from lab.bench_tables import add_scaling_time, record_scaling
total, calls = add_scaling_time(Path('$run'), $t1 - $t0)
print(record_scaling(Path('reports/bench/scaling.json'), Path('$run'), $n, total, '$SCALING_LENGTHS', calls).read_text())"
    done
    tar cf "$OUT/scaling.tar" reports/bench/scaling.json reports/bench/scaling.md
    tar cf "$OUT/state-scaling.tar" --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' runs/scaling-*-gpu 2>/dev/null
    ;;
  mfu)
    # Training-step MFU (one FLOPs rule) at N = 512, 4096, 32768 for eager, torch.compile "default"
    # and "reduce-overhead" (CUDA graphs), one `bench train` process per variant, all in this one
    # call so the ratios are fair; every row also keeps the kernel `auto` chose at that N (timed at
    # the real shape), its margin over the runner-up, and the compile's first-call seconds (the
    # first step of each N: dynamo, inductor and Triton from a cold cache; with CUDA graphs the
    # recording follows in the warm-up steps). reports/bench/mfu.md puts them side by side;
    # tsflash.model.fastpath.COMPILE_MODE is set from it.
    # Time: each compiled mode compiles twice (N = 512 static, then one shape-generic graph that
    # N = 4096 and 32768 share: the rotary tables have one length for every N). Measured on the
    # H200 (2026-12-01): eager, default, reduce-overhead and default-head128 with MFU_PROFILE=3 took
    # 155 s in all. The limits below (80 + 230 s per compiled variant) keep the call inside 10
    # minutes even when a compile is slow; a variant that hits its limit loses its row, not the others'.
    # MFU_PROFILE=STEPS adds where each step's time goes (`bench train --profile`: kernel time by
    # kind and the device's idle time); MFU_DIR (default reports/bench/mfu) is where the variant
    # folders go, mfu.md beside it (MFU_DIR=runs/mfu for a look that publishes nothing);
    # MFU_LIMIT_S the limit of each compiled variant (max-autotune tunes every matmul: give it more).
    # MFU_MODES picks the variants: eager and torch.compile modes ("tuned" among them), each with
    # optional model suffixes (other models than the experiment's: what its numerics cost), e.g.
    # default-head128, default-bf16-residual, default-head128-bf16-residual (parsed below).
    # max-autotune-no-cudagraphs (2026-12-01): compiling N=512 did not finish in 420 s (every matmul
    # shape tuned, forward and backward; cuBLAS won the large ones, so no GELU was fused into them).
    # MFU_BANDWIDTH=1 adds `bench train --bandwidth` to the variant "default" (the bytes inductor's
    # kernels move per step against the copy ceiling: a separate compile per N after the timed rows).
    T="timeout --signal=INT"
    dir=${MFU_DIR:-reports/bench/mfu}
    profile=${MFU_PROFILE:+--profile $MFU_PROFILE}
    # MFU_HEAD128=1 adds the variant default-head128: "default" with 2 heads of 128 instead of 4 of
    # 64 (same parameters and FLOPs, another model: not the experiment's, a measure of the kernel).
    # no row (nor ceiling) of an earlier call beside this call's; MFU_KEEP=1 for a second
    # invocation in the same call (other variants or lengths, e.g. MFU_MODES=tuned MFU_LENGTHS=512)
    [ "${MFU_KEEP:-0}" = 1 ] || rm -f "$dir"/*/train.json
    for mode in ${MFU_MODES:-eager default reduce-overhead} ${MFU_HEAD128:+default-head128}; do
      # A variant is a compile mode (or eager) with model suffixes: -head128 (2 heads of 128, `--heads 2`)
      # and -bf16-residual (`--residual compute`), e.g. reduce-overhead-head128-bf16-residual.
      base=$mode; model=""
      case "$base" in *-bf16-residual) model="--residual compute"; base=${base%-bf16-residual} ;; esac
      case "$base" in *-head128) model="--heads 2 $model"; base=${base%-head128} ;; esac
      case "$base" in
        eager) flag="$model"; limit=80 ;;
        default) flag="--compile default $model"; [ "${MFU_BANDWIDTH:-0}" = 1 ] && [ -z "$model" ] && flag="$flag --bandwidth"
                 limit=${MFU_LIMIT_S:-230} ;;
        *) flag="--compile $base $model"; limit=${MFU_LIMIT_S:-230} ;;
      esac
      $T $limit python3 -m tsflash.cli bench train --device cuda --lengths "${MFU_LENGTHS:-512,4096,32768}" $flag \
        $profile --force --out "$dir/$mode" 2>&1 | tee "$OUT/mfu-$mode.log" | tail -16
      echo "mfu $mode exit: ${PIPESTATUS[0]}"
    done
    python3 -c "from lab.bench_tables import write_mfu_markdown; print(write_mfu_markdown('$dir').read_text())"
    tar cf "$OUT/mfu.tar" "$dir" "$(dirname "$dir")/mfu.md"
    ;;
  compile)
    # torch.compile in the engine, cell by cell: the default config on the random walk (nothing to
    # carry), folds COMPILE_FOLDS (0,4) at N = 512, 4096, 32768, seed 0, first plain, then with
    # train.compile=true, one process each (a fresh compile cache: compiling is paid in full);
    # reports/bench/compile-cells.md puts the two side by side (lab.bench_tables.write_compile_cells_markdown).
    # About 2 minutes per variant on the H200; COMPILE_VARIANTS=compiled reruns only that one (the
    # other's engine-cuda.json stays).
    d=${COMPILE_DIR:-reports/bench/compile-cells}
    for variant in ${COMPILE_VARIANTS:-eager compiled}; do
      flag=""; [ "$variant" = compiled ] && flag="--set train.compile=true"
      rm -f "$d/$variant/engine-cuda.json"
      timeout --signal=INT "${COMPILE_LIMIT_S:-270}" python3 benchmarks/bench_engine.py --data synthetic:random-walk \
        --config default --lengths "${COMPILE_LENGTHS:-512,4096,32768}" --folds "${COMPILE_FOLDS:-0,4}" --device cuda \
        $flag --out "$d/$variant" 2>&1 | grep -v "^USDT" | tee "$OUT/compile-$variant.log" | tail -10
      echo "compile $variant exit: ${PIPESTATUS[0]}"
    done
    python3 -c "from lab.bench_tables import write_compile_cells_markdown; print(write_compile_cells_markdown('$d').read_text())"
    tar cf "$OUT/compile.tar" "$d" "$d.md"
    ;;
  compile-parity)
    # Compiled against eager, the same numbers? One BTC cell per N of the default config (one fold,
    # seed 0): eager, eager again, compiled, eager at seed 1, one after the other
    # (lab/compile_parity.py). Resumable: run it again until its summary has every N. Carry .whl and
    # .carry/packed. About 12 cells of the default (18 s each on the H200) plus compiling.
    d=${PARITY_DIR:-reports/bench/compile-parity}
    timeout --signal=INT "${PARITY_LIMIT_S:-540}" python3 lab/compile_parity.py --data .carry/data --out "$d" 2>&1 \
      | grep -v "^USDT" | tee "$OUT/compile-parity.log" | tail -8
    echo "compile-parity exit: ${PIPESTATUS[0]}"
    tar cf "$OUT/compile-parity.tar" "$d"
    ;;
  model-variants)
    # Do the models that run faster (the mfu variants -head128 and -bf16-residual) learn what the
    # experiment's model learns? Each compiled, on the positive control (synthetic:long-memory, the
    # planted echo only a long context can use), the default protocol, VARIANTS_LENGTHS at folds
    # VARIANTS_FOLDS (0,2: where seed 0 found the echo at N=32768 in the published controls,
    # reports/controls/protocol), seed VARIANTS_SEED (0), one process per variant.
    # VARIANTS (default "experiment fast"): experiment, fast (both changes), head128 or bf16-residual.
    # Results go to VARIANTS_TOP (reports/bench/model-variants)/seed<S>-folds<F>/<variant>/ (that
    # variant's folder is replaced, the others stay); VARIANTS_TOP.md is the table over every
    # folder there (`lab.bench_tables.write_model_variants_markdown`), with the cells that found the
    # echo counted at the published controls' bar. Keep one VARIANTS_DATA per VARIANTS_TOP.
    data=${VARIANTS_DATA:-synthetic:long-memory:0:strength=0.2}
    seed=${VARIANTS_SEED:-0}; folds=${VARIANTS_FOLDS:-0,2}
    top=${VARIANTS_TOP:-reports/bench/model-variants}; d=$top/seed$seed-folds${folds//,/-}
    for variant in ${VARIANTS:-experiment fast}; do
      flag="--set train.compile=true --set train.seeds=[$seed]"
      case "$variant" in
        experiment) ;;
        fast) flag="$flag --set model.n_heads=2 --set model.residual=compute" ;;
        head128) flag="$flag --set model.n_heads=2" ;;
        bf16-residual) flag="$flag --set model.residual=compute" ;;
        *) echo "unknown model variant $variant" >&2; exit 2 ;;
      esac
      rm -f "$d/$variant/engine-cuda.json"
      set -f  # the flags split into words, but "[0]" is no file pattern
      timeout --signal=INT "${VARIANTS_LIMIT_S:-270}" python3 benchmarks/bench_engine.py --data "$data" \
        --config default --lengths "${VARIANTS_LENGTHS:-512,32768}" --folds "$folds" --device cuda $flag \
        --out "$d/$variant" 2>&1 | tee "$OUT/variants-$variant.log" | grep -E "^N=|preparation|wrote"
      echo "variant $variant exit: ${PIPESTATUS[0]}"
      set +f
    done
    python3 -c "from pathlib import Path; from lab.bench_tables import control_found_bar, write_model_variants_markdown as w
print(w(*sorted(p for p in Path('$top').iterdir() if p.is_dir()), out='$top.md', found_at=control_found_bar('$data')).read_text())"
    tar cf "$OUT/variants.tar" "$d" "$top.md"
    ;;
  recipes|ladder)
    # The issue-29 measurements, resumable in slices like `sweep` (state in, state out):
    #   recipes: lab/recipes.py, the training-recipe candidates side by side on the controls and
    #            BTC (validation tails and control test bars only); RECIPES_ARGS e.g.
    #            "--candidates baseline,wsd-ema --sources long-memory,iid --baseline btc=reports/h200-btcusdt-1m-second-edition"
    #   ladder:  lab/power_ladder.py, the echo-strength ladder (N=512 against 32768); LADDER_ARGS
    #            e.g. "--replicates 4 --strengths 0.05,0.2"
    # Each prints its GPU cost plan first (--plan, from the calibrated cost table).
    if [ "$1" = recipes ]; then script=lab/recipes.py; run=${RUN_RECIPES:-runs/recipes}; args=(--out "$run" --btc-data .carry/data ${RECIPES_ARGS:-})
    else script=lab/power_ladder.py; run=${RUN_LADDER:-runs/power-ladder}; args=(--runs "$run" ${LADDER_ARGS:-}); fi
    python3 "$script" "${args[@]}" --plan | tail -15
    timeout --signal=INT "${LIMIT_S:-560}" python3 "$script" "${args[@]}" --device cuda --time-budget "$BUDGET_S" \
      2>&1 | tee "$OUT/$1.log" | grep -vE " DEBUG "
    echo "$1 exit: ${PIPESTATUS[0]}"
    tar cf "$OUT/state-$(basename "$run").tar" --exclude='*/checkpoints' --exclude='*/artifacts' --exclude='*/cells/*/*.npz' "$run"
    ls -la "$OUT"
    ;;
  *)
    echo "usage: bash lab/h200.sh bench|sweep|scaling|mfu|compile|model-variants|recipes|ladder" >&2
    exit 2
    ;;
esac
