"""Stage 2, resume: the training state of one cell and the checkpoint file that carries it.

`TrainingState` is what the training loop (`tsflash.engine._train`) carries from step to step:
steps done, timers, early stopping, the best weights, the learning curve and the observed
attention kernel. `Checkpoint` writes it with the model and the optimizer to
`<dir>/fold<k>-n<N>-seed<s>.pt` atomically, and refuses a file of another run by its identity
(`checkpoint_identity`). On disk the state is a plain dict (`TrainingState.to_dict`), the form
every checkpoint of TRAINING_CHECKPOINT_FORMAT has had, so files written before the dataclass
existed resume unchanged (bit-identically on CPU). The recipe's state (the weight average, the
rewind point and the decay of the "wsd" schedule) is written only where a cell uses it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tsflash import atomic
from tsflash.config import TrainConfig, added_since
from tsflash.device import sync
from tsflash.engine._prepare import Prepared
from tsflash.errors import UserError
from tsflash.identity import digest

log = logging.getLogger(__name__)

# A training checkpoint of one cell (model, optimizer, `TrainingState`), part of its identity; a saved
# trained model is tsflash.model.MODEL_FILE_FORMAT. 2: balanced windows, learning curve and early stopping.
TRAINING_CHECKPOINT_FORMAT = "tsflash-fold-checkpoint-2"

# The config version current when TRAINING_CHECKPOINT_FORMAT began: model and train keys added
# since (tsflash.config.added_since) are left out of the identity at the value their migration
# step fills, so that a cell cut before a key existed still resumes.
CHECKPOINT_CONFIG_VERSION = 1
# TrainingState fields added later: left out of the saved dict while None, so a cell without them
# writes the dict every older checkpoint holds.
STATE_ADDED_LATER = ("average", "rewind", "decay")


def _empty_curve() -> dict[str, list]:
    return {"step": [], "train_loss": [], "val_loss": []}


@dataclass
class TrainingState:
    """The training state of one cell; the field order is the saved dict's key order."""

    step: int = 0  # optimizer steps done
    train_seconds: float = 0.0  # the steps' wall-clock (validation and checkpoint writes excluded)
    val_seconds: float | None = 0.0  # the validation passes'; None: resumed from a checkpoint without it
    best_loss: float = math.inf  # best validation loss so far
    best_step: int = 0
    bad_evals: int = 0  # evaluations since the best one
    stopped: bool = False  # early-stopped
    best_model: dict[str, torch.Tensor] | None = None  # the best weights, on the host
    kernels_observed: list[str] | None = None  # the profiler's SDPA ops of the observed step; None: not yet
    loss_sum: float | torch.Tensor = 0.0  # training loss summed since the last evaluation (on the device)
    curve: dict[str, list] = field(default_factory=_empty_curve)  # {"step", "train_loss", "val_loss"}
    # train.ema_decay > 0: {"count": updates averaged, "weights": {name: tensor}} (on the device)
    average: dict | None = None
    # train.schedule "wsd" with a validation tail: the state at the best step of the stable phase,
    # {"step", "model", "optimizer", "average"} on the host, that the decay starts from
    rewind: dict | None = None
    # once the decay phase began: {"from": the best step rewound to, "start": the step it began at,
    # "steps": its length}; training ends at start + steps
    decay: dict | None = None

    def to_dict(self) -> dict:
        """The dict a checkpoint holds (shallow: the tensors are the state's own, not copies)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in STATE_ADDED_LATER or getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, saved: dict) -> TrainingState:
        # a checkpoint written before validation was timed has no val_seconds: unknown, not 0
        return cls(**({"val_seconds": None} | saved))


def checkpoint_identity(prepared: Prepared, n: int, fold: int, seed: int, settings: dict, tc: TrainConfig) -> str:
    """A short hash of everything that makes a checkpoint belong to one run."""
    model = _without_added(settings, "model")
    train = _without_added(dataclasses.asdict(tc), "train")
    identity = {"format": TRAINING_CHECKPOINT_FORMAT, "config": prepared.cfg.hash(), "n": n, "fold": fold,
                "seed": seed, "model": model, "train": train,
                "bars": [len(prepared.open_time), int(prepared.open_time[0]), int(prepared.open_time[-1])]}
    return digest(identity, 12)


def _without_added(settings: dict, section: str) -> dict:
    """`settings` (one config section) less the keys added since CHECKPOINT_CONFIG_VERSION at their filled value."""
    added = {k.removeprefix(f"{section}."): v for k, v in added_since(CHECKPOINT_CONFIG_VERSION).items()
             if k.startswith(f"{section}.")}
    return {k: v for k, v in settings.items() if k not in added or v != added[k]}


class Checkpoint:
    """Model + optimizer + training state of one (N, fold, seed) in `<dir>/fold<k>-n<N>-seed<s>.pt`
    (nothing without a folder), written atomically; refuses a file of another run. `due()` says
    when `every_s` seconds have passed since the last write (or since the start)."""

    def __init__(self, folder: Path | None, identity: str, n: int, fold: int, seed: int, every_s: float,
                 device: torch.device):
        self.path = Path(folder) / f"fold{fold}-n{n}-seed{seed}.pt" if folder is not None else None
        self.identity, self.every_s, self.device = identity, every_s, device
        self.last = time.perf_counter()

    def due(self) -> bool:
        return time.perf_counter() - self.last >= self.every_s

    def load(self, model, optimizer) -> TrainingState | None:
        """Restore model and optimizer in place and return the training state; None if there is none."""
        if self.path is None or not self.path.exists():
            return None
        blob = torch.load(self.path, map_location=self.device, weights_only=True)
        if blob.get("identity") != self.identity:
            raise UserError(f"checkpoint {self.path} belongs to a different run (identity {blob.get('identity')} != "
                            f"{self.identity}); delete it or use another checkpoint_dir")
        model.load_state_dict(blob["model"])
        optimizer.load_state_dict(blob["optimizer"])
        log.info("%s: resumed at step %d", self.path.name, blob["state"]["step"])
        return TrainingState.from_dict(blob["state"])

    def save(self, model, optimizer, state: TrainingState) -> None:
        if self.path is not None:
            sync(self.device)
            blob = {"identity": self.identity, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "state": state.to_dict()}
            with atomic.atomic_path(self.path) as tmp:
                torch.save(blob, tmp)
        self.last = time.perf_counter()
