"""`tsflash report RUN_DIR`: rebuild a sweep's report from its saved results (no training)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="rebuild report.md/report.html of a sweep run folder from its saved results",
        description="Rebuild report.md, report.html, results.json, fold_metrics.parquet, daily_returns.parquet "
        "and figures/ of a `tsflash sweep` run folder from the results it saved; nothing is trained.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the sweep's run folder (e.g. reports/20260101-120000-ab12cd34)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tsflash.report import build_report

    md, html = build_report(args.run_dir)
    print(f"report: {md}")
    print(f"        {html}")
    return 0
