# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # tsflash quick start
#
# Where a researcher starts: build the package's `CausalTransformer`, train a tiny one on a slice
# of 1-minute bars (or load a saved one), read up/flat/down probabilities for a window, and plot
# the published sweeps' two answers, cost and benefit against the context length N.
#
# Data: the bar store in `data/` (fill it with `tsflash data fetch ...` or `tsflash data import
# FOLDER`), or another store named by the environment variable `TSFLASH_DATA`. Without bars for
# the slice, the notebook uses tsflash's seeded synthetic random walk, so it always runs.

# %%
import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

import tsflash
from tsflash import CausalTransformer, ModelConfig, load_bars, random_walk_bars
from tsflash.dataset import CLASS_NAMES, FEATURE_NAMES, gather_windows

torch.manual_seed(0)
REPO = Path.cwd() if (Path.cwd() / "tsflash").is_dir() else Path.cwd().parent
STORE = Path(os.environ.get("TSFLASH_DATA", REPO / "data"))
N = 256  # context length of this tiny demo (the sweep goes to 131072)
HORIZON = 15  # label: direction of the next 15 minutes

# %% [markdown]
# ## A slice of bars
# Two weeks of 1-minute bars: real ones from the store if present, else a synthetic random walk.

# %%
try:
    bars = load_bars(STORE, "BTCUSDT", "1m", start="2024-03-01", end="2024-03-14")
except Exception:  # no store here: fall back to synthetic bars
    bars = None
if bars is None or len(bars) < 4 * N:
    bars = random_walk_bars(14 * 1440, seed=0, start="2024-03-01")
    source = "synthetic random walk"
else:
    source = f"store {STORE}"
print(f"{len(bars):,} bars from {source}")

# %% [markdown]
# ## Features and labels
# `tsflash.model_inputs` builds them as the sweep's engine does: causal features (row t uses bars
# up to t), the normaliser and the flat band fitted on the training part only (the first 80 %
# here, `fit_idx`), labels 0 down / 1 flat / 2 up and -1 where the horizon spans a gap.

# %%
T = len(bars)
train_idx = np.arange(int(0.8 * T) - HORIZON)  # purge the horizon before the held-out tail
inputs = tsflash.model_inputs(bars, horizon=HORIZON, fit_idx=train_idx)
x_all, y_all, threshold = inputs.features, inputs.labels, inputs.flat_threshold  # (T, F), (T,)
print(f"F = {len(FEATURE_NAMES)} features; flat band |r_15m| <= {threshold:.2e}")

# %% [markdown]
# ## The model
# Rotary positions make the parameter count independent of N. On a CPU the attention runs on
# PyTorch's fused flash CPU kernel; `attention_backend_used` proves which kernel ran.

# %%
config = ModelConfig(n_features=len(FEATURE_NAMES), d_model=32, n_layers=2, n_heads=2)
model = CausalTransformer(config)
print(f"{model.n_params():,} parameters")

saved = REPO / "notebooks" / "tiny-model.pt"
if saved.exists():
    model = CausalTransformer.load(saved)
else:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    starts_pool = torch.arange(0, len(train_idx) - N)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        starts = starts_pool[torch.randint(len(starts_pool), (8,), generator=gen)]
        xb = gather_windows(x_all, starts, N)  # (8, N, F)
        yb = gather_windows(y_all, starts, N)  # (8, N)
        _, loss = model(xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"training loss {losses[0]:.3f} -> {losses[-1]:.3f} (ln 3 = {np.log(3):.3f} is chance)")
print("attention kernel that ran:", model.attention_backend_used)

# %% [markdown]
# ## Up / flat / down probabilities for one window
# The window ends at the last bar; the model scores every position causally.

# %%
model.eval()
with torch.no_grad():
    logits, _ = model(x_all[-N:].unsqueeze(0))  # (1, N, 3)
probs = torch.softmax(logits[0], dim=-1).numpy()  # (N, 3)
last = dict(zip(CLASS_NAMES, probs[-1].round(3), strict=True))
print("last bar:", last)

fig, ax = plt.subplots(figsize=(8, 3))
for k, name in enumerate(CLASS_NAMES):
    ax.plot(probs[:, k], label=name)
ax.set_xlabel("position in the window (bars)")
ax.set_ylabel("probability")
ax.set_title(f"up/flat/down probabilities over one N={N} window")
ax.legend()
plt.show()

# %% [markdown]
# ## The published answer: two questions, cost and benefit against N
# The second edition, committed under `reports/h200-btcusdt-1m-second-edition/` (one H200,
# BTCUSDT 1m 2021-01..2025-06, five walk-forward folds, three seeds, each N at its own validated
# optimum): `questions.json` holds the two answers with every paired test, `results.json` everything
# the report shows. Beside it, the first edition (`reports/h200-btcusdt-1m/`: one seed, a fixed
# 200-step budget, N up to 131072).

# %%
editions = {"second edition": REPO / "reports" / "h200-btcusdt-1m-second-edition",
            "first edition": REPO / "reports" / "h200-btcusdt-1m"}
questions = json.loads((editions["second edition"] / "questions.json").read_text())
print("1. forecasting:", questions["forecast"]["sentence"].split(". Against")[0] + ".")
print("2. trading:", questions["trading"]["sentence"])

results = {name: json.loads((path / "results.json").read_text()) for name, path in editions.items()}
fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
for k, (name, res) in enumerate(results.items()):
    per_n = sorted(res["per_configuration"], key=lambda r: r["n"])
    ns = [r["n"] for r in per_n]
    style = dict(marker="o", color=f"C{k}", label=name)
    axes[0].plot(ns, [r["tokens_per_s"] / 1e6 for r in per_n], **style)
    axes[1].plot(ns, [r["peak_memory_bytes"] / 2**30 for r in per_n], **style)
    for r in per_n:
        print(f"{name}, N={r['n']:>6}: acc {r['accuracy']:.4f}  log-loss {r['log_loss']:.4f}  "
              f"{r['tokens_per_s'] / 1e6:.2f} M tok/s  {r['tflops']:.0f} TFLOP/s  kernel {r['backend']}")
# The benefit as the paired tests see it: each N's per-bar log-loss minus the reference's on the
# same test bars, with its 95 % interval (the fold-to-fold spread of the raw losses is far wider)
for k, ref in enumerate(["n512", "baseline-logreg"]):
    comps = sorted((c for c in questions["forecast"]["comparisons"] if c["reference"] == ref and c["score"] == "log_loss"),
                   key=lambda c: int(c["series"][1:]))
    xs = [int(c["series"][1:]) for c in comps]
    mean = np.array([c["mean_diff"] for c in comps])
    err = [mean - [c["lo"] for c in comps], [c["hi"] for c in comps] - mean]
    axes[2].errorbar(xs, mean, yerr=err, marker="o", capsize=4, color=f"C{k + 2}",
                     label=f"minus {'N=512' if ref == 'n512' else 'logistic regression'}")
axes[0].set_ylabel("training throughput (M tokens/s)")
axes[0].set_title("cost: throughput")
axes[1].set_ylim(bottom=0)
axes[1].set_ylabel("peak GPU memory (GiB)")
axes[1].set_title("cost: memory (flat: fused attention)")
axes[2].axhline(0, color="black", linewidth=0.8)
axes[2].set_ylabel("log-loss difference per bar (nats)")
axes[2].set_title("benefit, second edition (< 0: N better)")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length N (bars)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## A sweep from Python
# `tsflash.run_sweep` takes the options of `tsflash sweep` as keywords (`set` is `--set`) and
# returns the run folder with its results; not run here (it trains every N over every fold):
#
# ```python
# res = tsflash.run_sweep(lengths=[512, 4096], data="synthetic:random-walk", set={"train.steps": 3})
# res.folder, res.report, res.results["verdict_sentence"]
# ```
