"""`tsflash sweep`: train and evaluate every context length over all folds, then write the report.

    tsflash sweep --lengths 512,4096,32768                      # the main job
    tsflash sweep --lengths 512,4096 --data synthetic:random-walk --seed 3   # the noise control
    tsflash sweep --lengths 512,4096,32768 --devices cuda:0,cuda:1           # one worker per GPU
    tsflash sweep --lengths 512,4096 --storage postgresql://u:p@host/db --artifacts /shared/art --devices all  # on each host
"""  # fmt: skip

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from tsflash.commands import options
from tsflash.commands.runs import answer_sentences
from tsflash.config import parse_overrides
from tsflash.runfolder import RunFolder


def register(sub) -> None:  # long: the subcommand's options, one call each
    p = sub.add_parser(
        "sweep",
        help="sweep context lengths N over walk-forward folds and write the report",
        description="Train and evaluate one configuration per context length N over all walk-forward folds "
        "(optuna is the trial ledger), then write report.md/report.html with cost, benefit, selection gates "
        "(DSR, PBO), precision and reproducibility. Killing it and rerunning the same command resumes.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Without CUDA, --preset auto applies the reduced tsflash/presets/cpu.toml (about 8.5 minutes on "
        "2 idle cores) and says so; --preset full insists on the full config. Without --out, the newest "
        "unfinished run folder of the same config under runs/ is resumed, else a new one is made. "
        "The whole resolved config is checked before anything is computed or written.",
        parents=[
            options.lengths_option(None, "comma-separated context lengths, powers of two (default: the config's)"),
            options.data_option(),
            options.device_option(),
            options.set_option("override a config field after the preset, e.g. --set train.steps=3 (repeatable)"),
            options.design_options(),
        ],
    )
    p.add_argument(
        "--out",
        type=Path,
        help="run folder (default: runs/<YYYYMMDD-HHMMSS>-<run hash>; reports/ is for published runs)",
    )
    p.add_argument(
        "--seed",
        type=options.non_negative_int,
        help="training seed (replaces the config's seeds; also seeds synthetic data)",
    )
    p.add_argument(
        "--devices",
        type=options.devices_type,
        default=None,
        metavar="LIST",
        help="one worker per device, each pulling (N, fold, seed) cells: cuda:0,cuda:1 | all (every GPU) | "
        "cpu,cpu (default: one worker on --device)",
    )
    p.add_argument(
        "--storage",
        help="optuna storage URL to share one study between hosts, e.g. "
        "postgresql://user:pass@host/db, with an --artifacts store they all reach "
        "(default: SQLite optuna.db in the run folder)",
    )
    p.add_argument(
        "--artifacts",
        metavar="PATH",
        help="where the cells' files are uploaded for the other hosts: "
        "a folder, or s3://bucket (optuna's Boto3ArtifactStore; pip install boto3) "
        "(default with --storage: artifacts/ in the run folder; none without)",
    )
    p.add_argument(
        "--preset",
        default="auto",
        help="auto (full config on CUDA, reduced CPU preset otherwise) | full | cpu (default: auto)",
    )
    p.add_argument("--no-precision", action="store_true", help="skip the precision oracle at each N")
    p.add_argument(
        "--time-budget",
        type=options.positive_float,
        default=None,
        metavar="SECONDS",
        help="start no new cell after this many seconds, nor one expected to end after them (by "
        "this run's measured cell times, else the calibrated ones; the first cell starts on a calibrated "
        "guess, never when this run measured it longer than the whole budget); "
        "rerun the same command to resume (for machines with a per-session time limit)",
    )
    p.add_argument(
        "--slice-by",
        choices=("fold", "cell"),  # sweep.plan.SLICE_BY, not imported here: it imports optuna (a test holds them equal)
        default="fold",
        help="with --time-budget, where a slice may end: between folds (default; a run folder carried to "
        "the next slice without its per-bar cells/*/*.npz files loses no trained cell) or between cells "
        "(more of the budget trains, for a run folder kept whole until the next slice)",
    )
    p.add_argument(
        "--validation-only",
        action="store_true",
        help="log each cell's validation loss instead of its test scores and write no report (a "
        "screen on data whose test bars must stay unread; `tsflash report` writes the report later)",
    )
    p.set_defaults(func=run)


def _command_line(args) -> str:
    """The command as typed, rebuilt from the parsed arguments (defaults left out)."""
    words = ["tsflash", "sweep"]
    lengths = ",".join(map(str, args.lengths)) if args.lengths is not None else None
    for flag, value, default in (
        ("--lengths", lengths, None),
        ("--config", args.config, "default"),
        ("--symbol", args.symbol, None),
        ("--data", args.data, "data"),
        ("--start", args.start, None),
        ("--end", args.end, None),
        ("--out", args.out, None),
        ("--device", args.device, "auto"),
        ("--devices", ",".join(args.devices) if args.devices else None, None),
        ("--seed", args.seed, None),
        ("--storage", args.storage, None),
        ("--artifacts", args.artifacts, None),
        ("--trials", args.trials, 1),
        ("--preset", args.preset, "auto"),
    ):
        if value is not None and value != default:
            words += [flag, str(value)]
    for item in args.overrides:
        words += ["--set", item]
    if args.no_precision:
        words.append("--no-precision")
    return shlex.join(words)


def with_symbol(overrides: dict, symbol: str | None) -> dict:
    """--symbol is data.symbol; a --set data.symbol=... given as well wins (it is the later, explicit one)."""
    from tsflash.config import merge_overrides

    if symbol is None:
        return overrides
    return merge_overrides({"data": {"symbol": symbol}}, overrides)


def run(args) -> int:
    from tsflash.sweep import run as sweep

    opts = sweep.SweepOptions(
        lengths=args.lengths,
        config=args.config,
        data=args.data,
        start=args.start,
        end=args.end,
        out=args.out,
        device=args.device,
        devices=args.devices,
        seed=args.seed,
        storage=args.storage,
        artifacts=args.artifacts,
        trials=args.trials,
        preset=args.preset,
        overrides=with_symbol(parse_overrides(args.overrides), args.symbol),
        command=_command_line(args),
        precision=not args.no_precision,
        time_budget=args.time_budget,
        slice_by=args.slice_by,
        validation_only=args.validation_only,
    )
    # plan_sweep resolves and validates the whole config (one line, exit 2, nothing written on a
    # mistake); the run logs the reduced-preset banner itself.
    run_dir = sweep.run_sweep(sweep.plan_sweep(opts))
    folder = RunFolder(run_dir)
    if folder.report_md.exists():  # where the report is, then the two lead sentences last, as `tsflash runs` reads them
        print(f"report: {folder.report_md} (and {folder.report_html.name})")
        for line in answer_sentences(folder):
            print(line)
    elif opts.validation_only and RunFolder(run_dir).is_complete():
        print(f"run folder: {run_dir} (complete; no report: --validation-only)")
    else:
        print(f"run folder: {run_dir} (unfinished: trials left for another worker or a rerun of this command)")
    return 0
