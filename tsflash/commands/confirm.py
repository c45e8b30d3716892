"""`tsflash confirm RUN_DIR --start DAY [--end DAY]`: re-test a finished sweep on a later hold-out.

    tsflash sweep --lengths 512,4096,32768 --set data.end='"2024-12-31"'
    tsflash confirm runs/20260101-120000-ab12cd34 --start 2025-01-01 --end 2025-06-30
"""  # fmt: skip

from __future__ import annotations

from pathlib import Path

from tsflash.commands import options


def register(sub) -> None:
    p = sub.add_parser(
        "confirm",
        help="re-test a finished sweep's candidates, unchanged, on a later period (confirm.md/.html/.json)",
        description="Retrain every candidate N and the baselines of a finished sweep exactly as a fold would, on "
        "every bar before --start (minus the purge), score the hold-out [--start, --end] once, and answer both "
        "questions there: confirm.md, confirm.html and confirm.json in RUN_DIR say whether the verdict holds. "
        "Resumable: run the same command again after an interruption.",
        parents=[options.device_option()],
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the finished sweep's run folder")
    p.add_argument(
        "--start",
        type=options.date_type,
        required=True,
        metavar="YYYY-MM-DD",
        help="first UTC day of the hold-out (after the run's data range)",
    )
    p.add_argument(
        "--end",
        type=options.date_type,
        default=None,
        metavar="YYYY-MM-DD",
        help="last UTC day of the hold-out (default: the store's last day; synthetic data: the run's test_days)",
    )
    p.add_argument(
        "--data",
        type=options.data_type,
        default=None,
        help="bar store folder or synthetic:random-walk[:SEED] etc. (default: the run's own)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from tsflash.sweep.confirm import confirm

    md, html, js = confirm(args.run_dir, args.start, args.end, args.data, args.device)
    print(f"confirm: {md}")
    print(f"         {html}")
    print(f"         {js}")
    return 0
