"""The sweep's plan: options, the resolved config, the run key and the run folder, before any work.

`plan_sweep(SweepOptions(...))` validates what the user asked for and resolves, cheaply (no data,
no training, nothing written): the config (preset file, then the CPU preset when it applies, then
the command's values, then --set overrides), the devices (one worker each), the run key, the run
folder, and a shared --storage (reached once, so that a server that is down is one line before
anything starts).

Same command, same run: the RUN KEY names what makes two invocations the same run (config, data
source, trials per N, device type). Without --out, the newest unfinished run folder under
`runs/` (git-ignored; `reports/` holds only published runs) with the same key is resumed; a
complete one is left alone and a new folder `runs/<YYYYMMDD-HHMMSS>-<run hash>` is made.

Fees are not part of the run: they are applied at scoring time from the saved per-bar positions
and gross returns (tsflash.scoring.daily), so `eval.fee_bps` is left out of the run key and of the
folder's hash. Two sweeps differing only by fee are the same run and reuse every cell; a run is
scored at the fee in its own config.json, and `tsflash report RUN` re-scores it at another fee.
Run folders made before this rule carry a key that included the fee; --out naming any folder
is accepted when its own config.json (of any config version) is this run's config, fee aside, and
its run.json names the same data, trials and device type (`folder_run_key`), so published runs
stay resumable under their recorded key.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from tsflash.config import (
    PRESETS_DIR,
    REDUCED_PRESET,
    ExperimentConfig,
    load_config,
    merge_overrides,
    read_run_config,
    reduced_note,
)
from tsflash.data.synthetic import parse_source
from tsflash.device import parse_devices, resolve_device
from tsflash.errors import UserError
from tsflash.identity import digest
from tsflash.runfolder import DEFAULT_RUNS_ROOT, RunFolder, find_unfinished_run
from tsflash.sweep.ledger import check_storage

PRESETS = ("auto", "full", "cpu")
CPU_PRESET = PRESETS_DIR / "cpu.toml"


SLICE_BY = ("fold", "cell")  # SweepOptions.slice_by


@dataclass
class SweepOptions:
    """What the user asked for (the CLI's arguments, validated by `plan_sweep`)."""

    lengths: list[int] | None = None  # None = the config's lengths
    config: str = "default"  # preset name (tsflash/presets/) or a .toml path
    data: str = "data"  # bar store root, or "synthetic:random-walk[:SEED]"
    start: str | None = None  # overrides data.start (YYYY-MM-DD)
    end: str | None = None  # overrides data.end (inclusive)
    out: Path | None = None  # run folder; None = find the unfinished run or make a new one
    device: str = "auto"  # auto | cpu | cuda | cuda:K
    # One worker per entry (tsflash.device.parse_devices: "cuda:0,cuda:1", "all", "cpu,cpu");
    # None = one worker on `device`.
    devices: list[str] | None = None
    seed: int | None = None  # overrides train.seeds with [seed]
    storage: str | None = None  # optuna storage URL; None = SQLite in the run folder
    artifacts: str | None = None  # artifact store: a folder or s3://bucket; None = <run folder>/artifacts
    trials: int = 1  # trials per N; > 1 searches tsflash.sweep.ledger.SEARCH_SPACE_DOC
    preset: str = "auto"  # auto | full | cpu
    overrides: dict = field(default_factory=dict)  # nested config overrides (--set), applied last
    runs_root: Path = DEFAULT_RUNS_ROOT  # where new run folders go (and unfinished ones are looked for)
    command: str = ""  # the command line, for the report
    precision: bool = True  # run the precision oracle at each N
    # Seconds after which no new cell is started (the run stops cleanly and the same command
    # resumes it): for machines with a per-session time limit. None = no limit.
    time_budget: float | None = None
    # Where a slice may end: "fold" (a run folder carried to the next slice without its per-bar
    # cells/*/*.npz files loses no trained cell) or "cell" (more of the budget trains; for a run
    # folder kept whole until the next slice).
    slice_by: str = "fold"
    # A screen on data it will later be judged on (a recipe chosen on BTC's validation tails): the
    # log shows each cell's validation loss instead of its test scores, and no report is written.
    validation_only: bool = False


@dataclass
class SweepPlan:
    """A resolved sweep: config, device, run folder; built cheaply before any training."""

    options: SweepOptions
    cfg: ExperimentConfig  # on resume, scored at the fee of the folder's config.json
    device: str  # "cpu", "cuda", "cuda:K"
    preset: str  # the preset actually applied: "full" | "cpu"
    preset_note: str  # "" or the line that opens a reduced run's output (`reduced_note`)
    run_key: str
    run_dir: Path
    resumed: bool
    storage: str
    study_name: str
    fee_note: str = ""  # "" or why this invocation scores at the run's fee, not the one it asked for
    devices: list[str] = field(default_factory=list)  # one worker each; [device] when empty

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.run_dir)

    def __post_init__(self):
        self.devices = list(self.devices) or [self.device]

    @property
    def shared(self) -> bool:
        """Several workers may share the study (a --storage URL) rather than one private SQLite file."""
        return self.options.storage is not None


def _check_date(value: str, flag: str) -> str:
    try:
        dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag}: expected a date YYYY-MM-DD, got {value!r}") from None
    return value


def resolve_config(opts: SweepOptions, device: str) -> tuple[ExperimentConfig, str, str]:
    """The config for this sweep: preset file, then the CPU preset when it applies, then the
    command's lengths/range/seed, then --set overrides. Returns (cfg, preset applied, banner)."""
    if opts.preset not in PRESETS:
        raise UserError(f"--preset must be one of {', '.join(PRESETS)}, got {opts.preset!r}")
    on_cuda = device.startswith("cuda")
    preset = opts.preset if opts.preset != "auto" else ("full" if on_cuda else REDUCED_PRESET)
    overrides: dict = {}
    if preset == REDUCED_PRESET:
        cpu = tomllib.loads(CPU_PRESET.read_text(encoding="utf-8"))
        overrides = {k: v for k, v in cpu.items() if k not in ("name", "description")}
    cli: dict = {}
    if opts.lengths is not None:
        cli["lengths"] = list(opts.lengths)
    if opts.start is not None:
        cli.setdefault("data", {})["start"] = _check_date(opts.start, "--start")
    if opts.end is not None:
        cli.setdefault("data", {})["end"] = _check_date(opts.end, "--end")
    if opts.seed is not None:
        cli.setdefault("train", {})["seeds"] = [int(opts.seed)]
    given = merge_overrides(cli, opts.overrides or {})
    try:
        cfg = load_config(opts.config, merge_overrides(overrides, given))
    except UserError as exc:
        raise UserError(f"{exc}{_reduced_hint(str(exc), overrides, given)}") from None
    if preset != REDUCED_PRESET:
        return cfg, preset, ""
    cfg.name = f"{cfg.name}+cpu"
    return cfg, preset, reduced_note(cfg.to_dict(), "no CUDA device" if not on_cuda else "--preset cpu")


def _reduced_hint(message: str, reduced: dict, given: dict) -> str:
    """Where a config error names a key the reduced CPU preset set (and the command did not), say so:
    a user who never gave train.steps=12 learns where it came from and how to keep the config's own.
    A key is named as a whole word ("data.start..data.end = ..." names both, "train.steps_x" not steps)."""
    named = [
        f"{section}.{key}={value}"
        for section, keys in reduced.items()
        if isinstance(keys, dict)
        for key, value in keys.items()
        if re.search(rf"(?<!\w)(?<!\w\.){re.escape(f'{section}.{key}')}(?!\w)", message)
        and key not in given.get(section, {})
    ]
    if not named:
        return ""
    return (
        f" ({', '.join(named)}: the reduced CPU preset's, {CPU_PRESET.name}; give a value that fits it, "
        "or --preset full for the config's own)"
    )


def nesting_unmeasured(cfg: ExperimentConfig) -> str | None:
    """Why this config's report cannot run the nesting check (tsflash.report.diagnostics.nesting), or None: it
    scores each longer N with its context cut to the shortest N, so eval.context_cuts must hold it."""
    lengths = sorted(cfg.lengths)
    if len(lengths) < 2 or lengths[0] in cfg.eval.context_cuts:
        return None
    cuts = sorted({*cfg.eval.context_cuts, lengths[0]})
    return (
        f"the report's nesting check needs the shortest length in eval.context_cuts: N={lengths[0]} is not in "
        f"{cfg.eval.context_cuts}, so it will say 'not measured' (add --set 'eval.context_cuts={cuts}')"
    )


# Keys that change only how saved forecasts are scored, never what is trained: not part of a run.
SCORING_KEYS = ("fee_bps", "strategy", "entry_threshold")


def _fee_free(cfg: ExperimentConfig) -> dict:
    """The config as a dict without the scoring keys of `eval` (applied at scoring time)."""
    d = cfg.to_dict()
    d["eval"] = {k: v for k, v in d["eval"].items() if k not in SCORING_KEYS}
    return d


def run_hash(cfg: ExperimentConfig) -> str:
    """8 hex digits of the config without the fee: the tail of a new run folder's name."""
    return digest(_fee_free(cfg), 8)


def make_run_key(cfg: ExperimentConfig, data: str, trials: int, device: str) -> str:
    """What makes two invocations "the same run": config (fee aside), data source, trials, device type."""
    return digest({"config": _fee_free(cfg), "data": data, "trials": trials, "device": device.split(":")[0]}, 12)


def folder_run_key(folder: RunFolder, cfg: ExperimentConfig, data: str, trials: int, device: str) -> str | None:
    """The run key recorded in `folder` if it holds this run (config fee aside, data, trials, device
    type), else None. A folder made while the fee was part of the key is matched by its config."""
    meta = folder.read_run()
    if meta.get("run_key") == make_run_key(cfg, data, trials, device):
        return meta["run_key"]
    if not folder.config_json.exists():
        return None
    same = (
        run_hash(read_run_config(folder.root)) == run_hash(cfg)
        and meta.get("data") == data
        and meta.get("trials_per_length") == trials
        and str(meta.get("device", "")).split(":")[0] == device.split(":")[0]
    )
    return meta.get("run_key") if same else None


def _with_run_fee(cfg: ExperimentConfig, folder: RunFolder) -> tuple[ExperimentConfig, str]:
    """A resumed run is scored at the fee of its own config.json, whatever this command says."""
    if not folder.config_json.exists():
        return cfg, ""
    fee = read_run_config(folder.root).eval.fee_bps
    if fee == cfg.eval.fee_bps:
        return cfg, ""
    note = (
        f"this run is scored at eval.fee_bps={fee:g} (its config.json), not {cfg.eval.fee_bps:g}: fees are "
        f"applied at scoring time; `tsflash report {folder.root} --set eval.fee_bps={cfg.eval.fee_bps:g}` "
        "re-scores its cells at that fee without training"
    )
    return replace(cfg, eval=replace(cfg.eval, fee_bps=fee)), note


def plan_sweep(opts: SweepOptions) -> SweepPlan:
    """Validate the options and resolve config, device and run folder (no training, no data)."""
    if opts.trials < 1:
        raise UserError(f"--trials must be >= 1 (trials per context length), got {opts.trials}")
    if opts.slice_by not in SLICE_BY:
        raise UserError(
            f"--slice-by must be one of {', '.join(SLICE_BY)} (where a --time-budget slice may end), "
            f"got {opts.slice_by!r}"
        )
    if parse_source(opts.data) is None and not Path(opts.data).is_dir():
        raise UserError(
            f"--data: bar store folder not found: {opts.data} (create it with `tsflash data import FOLDER` "
            "or `tsflash data fetch`, or use --data synthetic:random-walk)"
        )
    if opts.start and opts.end and _check_date(opts.end, "--end") < _check_date(opts.start, "--start"):
        raise UserError(f"--end {opts.end} is before --start {opts.start}")
    if opts.devices:
        if opts.device not in ("auto", None):
            raise UserError(
                f"--device {opts.device} and --devices {','.join(opts.devices)}: give one of them "
                "(--devices cuda:0 is one GPU)"
            )
        devices = parse_devices(",".join(opts.devices))
        device = devices[0]
    else:
        device = str(resolve_device(opts.device))
        devices = [device]
    cfg, preset, note = resolve_config(opts, device)
    run_key = make_run_key(cfg, opts.data, opts.trials, device)
    study_name = f"tsflash-{run_key}"
    if opts.out is not None:
        run_dir = Path(opts.out)
        if run_dir.exists() and not run_dir.is_dir():
            raise UserError(f"--out {run_dir} is a file: give a run folder (new, or one to resume)")
        folder = RunFolder(run_dir)
        resumed = folder.exists()
        if resumed:
            meta = folder.read_run()
            recorded = folder_run_key(folder, cfg, opts.data, opts.trials, device)
            if recorded is None:
                raise UserError(
                    f"--out {run_dir} holds a run of another configuration (run key {meta.get('run_key')}, "
                    f"this command {run_key}); choose another --out"
                )
            run_key = recorded
            study_name = meta.get("study_name", f"tsflash-{run_key}")
    else:
        found = find_unfinished_run(opts.runs_root, run_hash(cfg), run_key)
        resumed = found is not None
        if found is not None:
            run_dir = found
            study_name = RunFolder(found).read_run().get("study_name", study_name)
        else:
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            run_dir = Path(opts.runs_root) / f"{stamp}-{run_hash(cfg)}"
    cfg, fee_note = _with_run_fee(cfg, RunFolder(run_dir))
    # a shared storage is checked now: an unreachable server is one line, with nothing written
    storage = check_storage(opts.storage) if opts.storage else RunFolder(run_dir).sqlite_url()
    return SweepPlan(
        opts, cfg, device, preset, note, run_key, run_dir, resumed, storage, study_name, fee_note, devices=devices
    )
