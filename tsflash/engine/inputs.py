"""A model's inputs from bars, for a notebook: the (T, 14) features and the up/flat/down labels
built by the same functions, in the same order, as the engine's `prepare` and `fold_data`
(`tsflash.dataset.features`, `tsflash.dataset.labels`); nothing is computed here that those
modules do not own. The normaliser and the flat band are fitted on the bars named by `fit_idx`
(a fold's training bars in the engine; by default every bar, which is in-sample)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tsflash.config import load_config
from tsflash.dataset.features import Normalizer, as_tensor, compute_features, interval_us_of
from tsflash.dataset.labels import fit_flat_band, forward_log_returns, make_labels


@dataclass
class ModelInputs:
    """features: (T, 14) float32, normalised; labels: (T,) int64, 0 down / 1 flat / 2 up, -1 none.
    `x` and `targets` are the same with a batch axis, (1, T, 14) and (1, T), as the model takes them."""

    features: torch.Tensor
    labels: torch.Tensor
    normalizer: Normalizer
    flat_threshold: float

    @property
    def x(self) -> torch.Tensor:
        return self.features[None]

    @property
    def targets(self) -> torch.Tensor:
        return self.labels[None]


def model_inputs(bars, *, horizon: int | None = None, flat_fraction: float | None = None, fit_idx=None,
                 device: str | torch.device = "cpu") -> ModelInputs:
    """Features and labels of `bars` (a `tsflash.data.Bars`, e.g. `tsflash.data.random_walk_bars(4096)`).

    horizon, flat_fraction: the label horizon in bars and the flat share (default: the default
    config's). fit_idx: the bars the normaliser and the flat band are fitted on (default: all).
    """
    defaults = load_config("default").labels
    horizon = defaults.horizon if horizon is None else horizon
    flat_fraction = defaults.flat_fraction if flat_fraction is None else flat_fraction
    interval_us = interval_us_of(bars)
    raw = compute_features(bars, device=device, interval_us=interval_us)  # (T, 14)
    close = as_tensor(bars.close, torch.float64, device)
    fwd = forward_log_returns(close, as_tensor(bars.open_time, torch.int64, device), horizon, interval_us)
    fit = torch.as_tensor(np.arange(len(bars.close)) if fit_idx is None else np.asarray(fit_idx), device=raw.device)
    normalizer = Normalizer.fit(raw, fit)
    threshold = fit_flat_band(fwd, fit, flat_fraction)
    return ModelInputs(features=normalizer.apply(raw), labels=make_labels(fwd, threshold), normalizer=normalizer,
                       flat_threshold=threshold)
