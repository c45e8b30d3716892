"""Walk-forward engine: prepare the data once, then train and evaluate one (N, fold, seed).

The experiment asks whether the context length N changes out-of-sample performance, so N is the
only thing that varies between runs of `run_fold`: architecture and parameter count (rotary
positions, no per-position parameters), initial weights (seeded by `seed` only), AdamW, the
learning-rate schedule, the maximum number of optimizer steps, the tokens per step (batch = tokens / N),
the target, the loss positions (a fixed FRACTION of each window), the sampling (every training bar
equally likely to be scored) and the early-stopping rule (the same patience on the same
validation tail; how that gives every N the same training signal: `tsflash.engine._train`).

Stages, one module each (this package re-exports their public names):

    _prepare    Prepared, prepare, FoldData, fold_data,    inputs, fitted per fold on train bars only;
                split_validation                           the purged validation tail
    _train      run_fold, train_until, lr_at,              the training loop, validated early
                sample_starts, step_seed,                  stopping, balanced sampling, learning curve;
                lowest_val_loss_by                         a cell paused at a step (screening)
    _restarts   run_cell, restart_seeds, cell_steps        a cell as the validated best of k trainings,
                                                           all to the end or screened at a step
    _checkpoint TrainingState, TRAINING_CHECKPOINT_FORMAT  the training state and its checkpoint file
                                                           (resume; a checkpoint of another run refused)
    _evaluate   predict_range, FoldResult                  every test bar scored once (also with the
                                                           context cut); the saved cell
    _baselines  run_baselines, run_probes, lagged_features class prior, logistic regression and the
                                                           linear information probe per N
    _cost       (FoldResult.cost)                          time, tokens/s, TFLOP/s, memory, kernels
    inputs      model_inputs, ModelInputs                  a model's inputs from bars in one call, as
                                                           `prepare` builds them (for a notebook)
    tsflash.model.flops  flops_per_token                         the one FLOPs rule (engine and bench)

Data flow and leakage guards
----------------------------
`prepare` computes, once for all folds, the quantities that need no fitting: causal features
(row t uses bars <= t), forward log returns fwd[t] over bars t+1..t+h (NaN across gaps), next-bar
simple returns, gap segments and the walk-forward folds (`WalkForward`, purge >= h, so no
training label's horizon reaches a test block). `fold_data` then fits, on the fold's TRAINING
bars only, the feature normaliser and the flat band of the labels, and splits off the purged
validation tail (``splits.val_days``). Training windows lie inside the fit range and inside one
gap-free segment; validation and test bars are scored by `eval_windows` (every bar exactly
once, context of N/2..N bars ending at the bar; with patch tokens, ``model.patch`` > 1, the
windows' patch grid ends at the scored bar).

One fold, as bars (T fit, . purge, V validation tail, # test, - later data, never read)::

    TTTTTTTTTTTTTTTTTTTTTTTTT...VVVVV...##########----------
    [train windows of N bars ]         [eval windows reach back N/2 before the test block]

Cost accounting (`FoldResult.cost`): see `tsflash.engine._cost`.
"""

from tsflash.engine._baselines import MAX_LOGREG_ROWS, lagged_features, run_baselines, run_probes
from tsflash.engine._checkpoint import TRAINING_CHECKPOINT_FORMAT, TrainingState
from tsflash.engine._evaluate import FoldResult, fold_result, predict_range, validation_loss
from tsflash.engine._prepare import FoldData, Prepared, contiguous_runs, fold_data, prepare, split_validation
from tsflash.engine._restarts import cell_steps, restart_seeds, run_cell
from tsflash.engine._train import lowest_val_loss_by, lr_at, run_fold, sample_starts, step_seed, train_until
from tsflash.engine.inputs import ModelInputs, model_inputs
from tsflash.model.flops import flops_per_token

__all__ = [
    "MAX_LOGREG_ROWS",
    "TRAINING_CHECKPOINT_FORMAT",
    "FoldData",
    "FoldResult",
    "ModelInputs",
    "Prepared",
    "TrainingState",
    "cell_steps",
    "contiguous_runs",
    "flops_per_token",
    "fold_data",
    "fold_result",
    "lagged_features",
    "lowest_val_loss_by",
    "lr_at",
    "model_inputs",
    "predict_range",
    "prepare",
    "restart_seeds",
    "run_baselines",
    "run_probes",
    "run_cell",
    "run_fold",
    "sample_starts",
    "split_validation",
    "step_seed",
    "train_until",
    "validation_loss",
]
