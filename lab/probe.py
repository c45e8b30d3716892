"""The linear information probe per context length N (issue 29, deliverable 4), on CPU: a logistic
regression on multi-scale aggregates of the last N bars (`tsflash.dataset.probe`) for N in 512,
4096, 32768, 131072, on the second edition's BTCUSDT 1m bars (2021-01-01..2025-06-30) and on the
controls' synthetic markets, over their five walk-forward folds built as the sweep builds them
(`tsflash.engine.prepare` and `fold_data` from each run folder's config.json: the same folds,
purge, validation tail, labels and flat band fitted on the fold's training bars). Every N of a
market is fitted on the same rows: the fold's labelled training rows (validation tail and its
purge left out, as the baselines) with a whole context of the longest N, capped at the
baselines' MAX_LOGREG_ROWS by their seeded draw; scored on the fold's test bars. The table gives
per N the mean test log-loss and direction score over the folds and the difference to N=512 with
a t interval over the five fold differences.

    python lab/probe.py                                 # BTC and the controls -> runs/probe/
    python lab/probe.py --markets btc --root path/to/store
    python lab/probe.py --markets regime,iid --out reports/probe   # adds them; the other markets' sections stay
    python lab/probe.py --markets regime --set splits.n_folds=10 --set data.start=2018-07-06 \
        --source synthetic:regime:0:tilt=0.0375 --out runs/probe-regime   # a variant of a synthetic market

Markets already in OUT/probe.json and not rerun keep their numbers: probe.md is rendered from
every market the file holds.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash.atomic import write_text  # noqa: E402
from tsflash.config import (  # noqa: E402
    config_from_dict,
    merge_overrides,
    parse_overrides,
)
from tsflash.data.store import fingerprint, load_bars  # noqa: E402
from tsflash.data.synthetic import synthetic_bars  # noqa: E402
from tsflash.dataset.probe import fit_probe, probe_features, probe_fit_rows, probe_windows, score  # noqa: E402
from tsflash.engine import MAX_LOGREG_ROWS, fold_data, prepare  # noqa: E402
from tsflash.stats.runs import one_sample_t  # noqa: E402
from tsflash.sweep.source import configured_bar_count  # noqa: E402

log = logging.getLogger("probe")

LENGTHS = (512, 4096, 32768, 131072)
MARKETS = {  # name -> run folder whose config.json (folds) and data.json (bars) the probe repeats
    "btc": "reports/h200-btcusdt-1m-second-edition",
    "long-memory": "reports/controls/protocol/long-memory",
    "random-walk": "reports/controls/protocol/random-walk",
    "regime": "reports/recipes/baseline/regime",
    "iid": "reports/recipes/short-mix/iid",
}
TITLES = {"btc": "BTCUSDT 1m (second edition)", "long-memory": "long memory (positive control, one-week echo)",
          "random-walk": "random walk (noise control)",
          "regime": "slow hidden regime (second positive control, BTC-scale drift)", "iid": "iid returns (clean null)"}


NOT_LENGTHS = ("run", "seconds", "prior", "overrides")  # the keys of a market's record that are not an N


def read_record(path: Path, lengths) -> dict:
    """The markets an earlier run wrote to `path` (empty when none); refused when its lengths differ,
    since the sections of one probe.md share their N."""
    if not path.exists():
        return {}
    record = json.loads(path.read_text())
    for name, rec in record.items():
        held = tuple(int(k) for k in rec if k not in NOT_LENGTHS)
        if held != tuple(lengths) or name not in MARKETS:
            raise SystemExit(f"error: {path} holds {name} at lengths {held}, this run asks {tuple(lengths)}: "
                             "one probe.md has one set of lengths; choose another --out")
    return record


def market_bars(run: Path, root: Path, overrides: dict | None = None, source: str | None = None):
    """(config, bars) of a run folder: its resolved config, and its bars (the store for BTC, the
    seeded synthetic source named in data.json for a control), checked against its fingerprint.
    `overrides` (nested, as `--set` gives them) change the config first, e.g. a longer synthetic
    market with more folds of the same size; `source` replaces its synthetic source (e.g. a
    stronger planted effect). The bars are then not the run's, and not checked."""
    data = json.loads((run / "data.json").read_text())
    if (overrides or source) and data["kind"] != "synthetic":
        raise SystemExit(f"error: --set and --source change a synthetic market only; {run} reads the bar store")
    if source and not source.startswith(":".join(data["source"].split(":")[:2])):  # synthetic:<kind>
        raise SystemExit(f"error: --source {source} is not a variant of {run}'s market {data['source']}")
    data["source"] = source or data["source"]
    changed = bool(overrides or source)
    cfg = config_from_dict(merge_overrides(json.loads((run / "config.json").read_text()), overrides or {}))
    d = cfg.data
    if data["kind"] == "synthetic":
        bars, _ = synthetic_bars(data["source"], configured_bar_count(cfg), 0, start=d.start, interval=d.interval,
                                 symbol=d.symbol)
    else:
        bars = load_bars(root, d.symbol, d.interval, d.start, d.end)
    if not changed and fingerprint(bars)["sha256"] != data["fingerprint"]["sha256"]:
        log.warning("%s: the bars differ from the run's (fingerprint %s, the run's %s)", run,
                    fingerprint(bars)["sha256"][:12], data["fingerprint"]["sha256"][:12])
    return cfg, bars


def fold_inputs(cfg, bars, longest: int) -> list[dict]:
    """Per fold: labels (T,), the rows every N is fitted on, the test rows, and the class prior's scores."""
    prepared = prepare(cfg, bars, device="cpu")
    folds = []
    for k in range(len(prepared.folds)):
        fd = fold_data(prepared, k)
        labels = fd.labels.numpy()
        rows = probe_fit_rows(fd.fit_idx[labels[fd.fit_idx] >= 0], [longest], MAX_LOGREG_ROWS)
        prior = np.bincount(labels[rows], minlength=3) / len(rows)
        folds.append({"labels": labels, "rows": rows, "test": fd.test_idx,
                      "prior": score(labels[fd.test_idx], np.tile(prior, (len(fd.test_idx), 1)))})
    return folds


def probe_market(cfg, bars, lengths) -> dict:
    """{"prior": [per-fold scores], N: [per-fold ProbeResult-like dicts]} for one market."""
    folds = fold_inputs(cfg, bars, max(lengths))
    out = {"prior": [f["prior"] for f in folds]}
    for n in lengths:
        x = probe_features(bars.close, n)  # (T, 2 * windows), once per N for all folds
        out[n] = []
        for k, f in enumerate(folds):
            r = fit_probe(x, f["labels"], f["rows"], f["test"], n)
            out[n].append({"log_loss": r.log_loss, "direction": r.direction, "move_log_loss": r.move_log_loss,
                           "n_scored": r.n_scored, "n_fit": r.n_fit, "seconds": r.seconds})
            log.info("N=%d fold %d: log-loss %.5f, direction %.5f (%.1f s)", n, k, r.log_loss, r.direction, r.seconds)
        del x
    return out


def _difference(a: list[dict], b: list[dict], key: str) -> str:
    """b minus a on `key`, mean over folds with its 95 % t interval over the fold differences."""
    mean, _, _, _, p, (lo, hi) = one_sample_t(np.array([y[key] - x[key] for x, y in zip(a, b, strict=True)]))
    return f"{mean:+.5f} [{lo:+.5f}, {hi:+.5f}] p {p:.2f}"


def market_table(name: str, res: dict, lengths, seconds: float, overrides: Sequence[str] = ()) -> str:
    """The Markdown section of one market."""
    def mean(rows, key):
        return float(np.mean([r[key] for r in rows]))

    base = res[lengths[0]]
    lines = [f"### {TITLES.get(name, name)}" + "".join(f" `{o}`" for o in overrides), "",
             f"| N | windows | test log-loss | direction score | log-loss − N={lengths[0]} [95 % over folds] | "
             f"direction − N={lengths[0]} [95 % over folds] | fit s per fold |",
             "|---|---|---|---|---|---|---|",
             f"| class prior | – | {mean(res['prior'], 'log_loss'):.5f} | {mean(res['prior'], 'direction'):.5f} | "
             f"{_difference(base, res['prior'], 'log_loss')} | {_difference(base, res['prior'], 'direction')} | – |"]
    for n in lengths:
        w = probe_windows(n)
        lines.append(f"| {n} | {len(w)} (1 .. {w[-1]}) | {mean(res[n], 'log_loss'):.5f} | {mean(res[n], 'direction'):.5f} | "
                     + ("–" if n == lengths[0] else _difference(base, res[n], "log_loss")) + " | "
                     + ("–" if n == lengths[0] else _difference(base, res[n], "direction"))
                     + f" | {mean(res[n], 'seconds'):.1f} |")
    n_fit = res[lengths[0]][0]["n_fit"]
    lines += ["", f"{len(base)} folds; each N fitted on the same {n_fit:,} rows per fold (fold 0; at most "
              f"{MAX_LOGREG_ROWS:,}); wall-clock {seconds / 60:.1f} min (data, folds and all N)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="data", help="the bar store (default: data, as tsflash sweep)")
    ap.add_argument("--markets", default=",".join(MARKETS), help=f"comma-separated, of {', '.join(MARKETS)}")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="context lengths N; the first is the reference")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="change the synthetic markets' config, e.g. --set data.start=2018-09-25 "
                         "--set splits.n_folds=10 (more folds of the same size); repeatable")
    ap.add_argument("--source", default=None, help="a variant of the (one) synthetic market's source, e.g. "
                                                   "synthetic:regime:0:tilt=0.0375")
    ap.add_argument("--out", default="runs/probe", help="folder for probe.md and probe.json (default runs/probe)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    lengths = tuple(int(v) for v in args.lengths.split(","))
    names = args.markets.split(",")
    if args.source and len(names) != 1:
        ap.error(f"--source is a variant of one market; got --markets {args.markets}")
    unknown = [m for m in names if m not in MARKETS]
    if unknown:
        ap.error(f"unknown market(s) {', '.join(unknown)}; known: {', '.join(MARKETS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = read_record(out / "probe.json", lengths)
    for name in names:
        t0 = time.perf_counter()
        cfg, bars = market_bars(REPO / MARKETS[name], Path(args.root), parse_overrides(args.overrides), args.source)
        res = probe_market(cfg, bars, lengths)
        changes = args.overrides + ([f"source={args.source}"] if args.source else [])
        record[name] = {"run": MARKETS[name], "seconds": time.perf_counter() - t0, "overrides": changes,
                        **{str(k): v for k, v in res.items()}}
        write_text(out / "probe.json", json.dumps(record, indent=1) + "\n")  # after each market: a partial run keeps its part
    sections = [market_table(name, {k if k == "prior" else int(k): v for k, v in rec.items()
                                    if k not in NOT_LENGTHS or k == "prior"},
                             lengths, rec["seconds"], rec.get("overrides", ()))
                for name, rec in sorted(record.items(), key=lambda item: list(MARKETS).index(item[0]))]
    text = ("# Linear information probe per N\n\nA logistic regression on the sums of log returns and the log realised "
            "volatility over the last 1, 4, 16, ... and N bars (`tsflash.dataset.probe`). Lower is better; the "
            "direction score is the up-vs-down log-loss over the test bars that moved.\n\n" + "\n\n".join(sections) + "\n")
    write_text(out / "probe.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
