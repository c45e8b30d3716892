"""The notebook API: `tsflash.run_sweep(...)` runs (or resumes) a sweep with the CLI's options as
keyword arguments and returns its run folder and results as a `SweepResult`. The same checks
as `tsflash sweep` (`tsflash.sweep.plan.plan_sweep`): a bad value raises `tsflash.errors.UserError`
with the CLI's one-line message, before anything is written.

    import tsflash
    res = tsflash.run_sweep(lengths=[512, 4096], data="synthetic:random-walk", set={"train.steps": 3})
    res.folder, res.results["verdict_sentence"], res.report
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tsflash import runfolder
from tsflash.config import merge_overrides, parse_lengths, parse_overrides
from tsflash.data.store import check_pair


@dataclass
class SweepResult:
    """A sweep's run folder; `results` (results.json) and `report` (report.md) once it finished.
    A damaged JSON file of the folder raises `tsflash.runfolder.DamagedFile` naming it."""

    folder: Path
    complete: bool
    results: dict | None
    questions: dict | None
    report: Path | None

    @classmethod
    def of(cls, folder: Path) -> SweepResult:
        def read(name: str) -> dict | None:
            path = folder / name
            return runfolder.read_json(path) if path.exists() else None

        run = read("run.json") or {}
        report = folder / "report.md"
        return cls(
            folder=folder,
            complete=run.get("status") == "complete",
            results=read("results.json"),
            questions=read("questions.json"),
            report=report if report.exists() else None,
        )


def _overrides(items: Mapping | Sequence[str] | None) -> dict:
    """{"train.steps": 3} or ["train.steps=3"] (the CLI's --set) -> the nested override table."""
    if items is None:
        return {}
    if isinstance(items, Mapping):
        out: dict = {}
        for key, value in items.items():
            *parents, leaf = str(key).split(".")
            node = out
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return out
    return parse_overrides(list(items))


def sweep_options(
    lengths: Sequence[int] | str | None = None,
    *,
    data: str = "data",
    config: str = "default",
    preset: str = "auto",
    set: Mapping | Sequence[str] | None = None,
    symbol: str | None = None,
    start: str | None = None,
    end: str | None = None,
    out: str | Path | None = None,
    seed: int | None = None,
    time_budget: float | None = None,
    slice_by: str = "fold",
    device: str = "auto",
    devices: Sequence[str] | None = None,
    trials: int = 1,
    precision: bool = True,
):
    """The `tsflash.sweep.plan.SweepOptions` of `run_sweep`'s keywords (checked by `plan_sweep`)."""
    from tsflash.sweep.plan import SweepOptions

    if isinstance(lengths, str):
        lengths = parse_lengths(lengths)
    overrides = _overrides(set)
    if symbol is not None:
        overrides = merge_overrides({"data": {"symbol": check_pair(symbol, "symbol")}}, overrides)
    given = {
        "lengths": lengths,
        "data": data,
        "config": config,
        "preset": preset,
        "set": set,
        "symbol": symbol,
        "start": start,
        "end": end,
        "out": out,
        "seed": seed,
        "time_budget": time_budget,
        "slice_by": slice_by,
        "device": device,
        "devices": devices,
        "trials": trials,
        "precision": precision,
    }
    defaults = sweep_options.__kwdefaults__ or {}
    shown = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None and v != defaults.get(k))
    return SweepOptions(
        lengths=None if lengths is None else list(lengths),
        config=config,
        data=data,
        start=start,
        end=end,
        out=None if out is None else Path(out),
        device=device,
        devices=None if devices is None else list(devices),
        seed=seed,
        trials=trials,
        preset=preset,
        overrides=overrides,
        command=f"tsflash.run_sweep({shown})",
        precision=precision,
        time_budget=time_budget,
        slice_by=slice_by,
    )


def run_sweep(lengths: Sequence[int] | str | None = None, **options) -> SweepResult:
    """`tsflash sweep` from Python; each keyword is the CLI option of the same name (`set` is
    --set, as a {"key": value} dict or a list of "key=value" strings; see `sweep_options`).
    Resumes like the CLI; returns the run folder and, once finished, its results and report."""
    from tsflash.sweep.plan import plan_sweep
    from tsflash.sweep.run import run_sweep as run_plan

    return SweepResult.of(Path(run_plan(plan_sweep(sweep_options(lengths, **options)))))
