"""`tsflash report RUN_DIR`: rebuild a sweep's report from its saved results (no training).

    tsflash report runs/20260101-120000-ab12cd34
    tsflash report reports/h200-btcusdt-1m --set eval.fee_bps=2 --out /tmp/fee2   # re-scored, elsewhere
"""  # fmt: skip

from __future__ import annotations

from pathlib import Path

from tsflash.commands import options
from tsflash.config import parse_overrides


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild report.md/report.html of a sweep run folder from its saved results",
        description="Rebuild report.md, report.html, results.json, fold_metrics.parquet, daily_returns.parquet "
        "and figures/ of a `tsflash sweep` run folder from the results it saved; nothing is trained.",
        parents=[
            options.set_option(
                "change a scoring field of the run's config, e.g. --set eval.fee_bps=2 "
                "(repeatable); nothing is retrained"
            )
        ],
    )
    p.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="the sweep's run folder (e.g. reports/20260101-120000-ab12cd34)"
    )
    p.add_argument("--out", type=Path, default=None, help="write the report files here (default: into RUN_DIR)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tsflash.report import build_report
    from tsflash.sweep.preregister import resolved_arm

    # Only what the user gave is passed, so a report without --set/--out is built exactly as before.
    given = {"overrides": parse_overrides(args.overrides) or None, "out_dir": args.out}
    md, html = build_report(args.run_dir, resolve=resolved_arm, **{k: v for k, v in given.items() if v is not None})
    print(f"report: {md}")
    print(f"        {html}")
    return 0
