"""From bars to a model's inputs: causal per-bar features and the train-only normaliser
(`features`), up/flat/down labels (`labels`), walk-forward folds with purges (`splits`), and
context windows by index arithmetic (`windows`); and the linear information probe per N on
multi-scale aggregates of the last N bars (`probe`)."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "FEATURE_NAMES": "features", "compute_features": "features", "Normalizer": "features",
    "CLASS_NAMES": "labels", "make_labels": "labels", "fit_flat_band": "labels",
    "WalkForward": "splits", "walk_forward_folds": "splits",
    "probe_features": "probe", "probe_windows": "probe", "run_probe": "probe",
    "eval_windows": "windows", "gather_windows": "windows", "BalancedWindows": "windows",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
