"""Experiment config: presets load, overrides are checked by name and type, cross-field rules."""

from __future__ import annotations

import pytest

from tsflash.config import ExperimentConfig, config_from_dict, load_config
from tsflash.errors import UserError


def test_presets_load_and_round_trip():
    default = load_config("default")
    cpu = load_config("cpu")
    assert default.lengths == [512, 4096, 32768] and default.model.d_model == 256
    assert cpu.model.d_model < default.model.d_model and cpu.splits.n_folds == 2
    assert config_from_dict(default.to_dict()).hash() == default.hash()
    assert default.purge == default.labels.horizon  # purge = -1 means "the horizon"


def test_overrides_apply_and_toml_dates_become_strings():
    cfg = load_config("default", {"train": {"steps": 7}, "data": {"start": __import__("datetime").date(2021, 1, 2)}})
    assert cfg.train.steps == 7 and cfg.data.start == "2021-01-02"
    assert cfg.hash() != load_config("default").hash()


@pytest.mark.parametrize(
    "overrides, pattern",
    [
        ({"train": {"stepz": 3}}, r"unknown config key 'train.stepz' \(did you mean 'train.steps'\?\); known keys here: .*steps"),
        ({"trian": {"steps": 3}}, r"unknown config key 'trian.steps' \(did you mean 'train.steps'\?\); known keys here: data,"),
        ({"train": {"zzz": 3}}, r"unknown config key 'train.zzz'; known keys here: betas,"),  # nothing near: no guess
        ({"train": {"steps": "many"}}, r"config key train.steps: expected int, got 'many'"),
        ({"train": 5}, r"config key train: expected a table, got 5"),
        ({"lengths": [512, 100]}, r"lengths: every length must be a power of two >= 2, got 100"),
        ({"train": {"tokens_per_step": 1000}}, r"train.tokens_per_step=1000 must be a multiple of every context length"),
        ({"splits": {"purge": 3}}, r"splits.purge=3 must be >= labels.horizon=15 .*look into the test block"),
        ({"data": {"start": "2025-01-01", "end": "2024-01-01"}}, r"data range: end 2024-01-01 is before start 2025-01-01"),
        ({"selection": {"cscv_blocks": 7}}, r"selection.cscv_blocks must be even and >= 2, got 7"),
    ],
)
def test_bad_config_is_one_clear_error(overrides, pattern):
    with pytest.raises(UserError, match=pattern):
        load_config("default", overrides)


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(UserError, match=r"unknown preset 'turbo'; known presets: .*cpu.*default"):
        load_config("turbo")
    # the protocol preset became the default: its old name is an unknown preset, not an alias
    with pytest.raises(UserError) as exc:
        load_config("protocol")
    assert str(exc.value) == "unknown preset 'protocol'; known presets: btc-1s, cpu, default, first-edition"


def test_a_purge_of_at_least_the_horizon_is_accepted():
    assert load_config("default", {"splits": {"purge": 20}}).purge == 20
    assert isinstance(ExperimentConfig().purge, int)


# Each field's own rule, named by the user's key, checked before any rule between fields.
# fmt: off
FIELD_CASES = [
    ({"data": {"max_gap_bars": -1}}, "data.max_gap_bars must be >= 0, got -1"),
    ({"labels": {"horizon": 0}}, "labels.horizon must be >= 1, got 0"),
    ({"labels": {"flat_fraction": 1.0}}, "labels.flat_fraction must be in (0, 1), got 1.0"),
    ({"splits": {"n_folds": 0}}, "splits.n_folds must be >= 1, got 0"),
    ({"splits": {"test_days": 0}}, "splits.test_days must be >= 1, got 0"),
    ({"splits": {"train_days": -3}}, "splits.train_days must be >= 0, got -3"),
    ({"splits": {"purge": -2}}, "splits.purge must be >= -1 (-1 = labels.horizon), got -2"),
    ({"splits": {"embargo": -1}}, "splits.embargo must be >= 0, got -1"),
    ({"splits": {"val_fraction": 1.0}}, "splits.val_fraction must be in [0, 1), got 1.0"),
    ({"model": {"d_model": -1}}, "model.d_model must be >= 1, got -1"),
    ({"model": {"n_layers": 0}}, "model.n_layers must be >= 1, got 0"),
    ({"model": {"n_heads": 0}}, "model.n_heads must be >= 1, got 0"),
    ({"model": {"mlp_ratio": 0}}, "model.mlp_ratio must be >= 1, got 0"),
    ({"model": {"dropout": 1.0}}, "model.dropout must be in [0, 1), got 1.0"),
    ({"train": {"steps": 0}}, "train.steps must be >= 1, got 0"),
    ({"train": {"tokens_per_step": 0}}, "train.tokens_per_step must be >= 1, got 0"),
    ({"train": {"lr": -1}}, "train.lr must be > 0, got -1.0"),
    ({"train": {"lr": 0}}, "train.lr must be > 0, got 0.0"),
    ({"train": {"lr": float("nan")}}, "train.lr must be > 0, got nan"),
    ({"train": {"min_lr_ratio": 1.5}}, "train.min_lr_ratio must be in [0, 1], got 1.5"),
    ({"train": {"warmup_steps": -1}}, "train.warmup_steps must be >= 0, got -1"),
    ({"train": {"weight_decay": -0.1}}, "train.weight_decay must be >= 0, got -0.1"),
    ({"train": {"betas": [0.9, 1.0]}}, "train.betas[1] must be in [0, 1), got 1.0"),
    ({"train": {"grad_clip": -1}}, "train.grad_clip must be >= 0 (0 = no clipping), got -1.0"),
    ({"train": {"loss_warmup_fraction": 1}}, "train.loss_warmup_fraction must be in [0, 1), got 1.0"),
    ({"train": {"seeds": [0, -1]}}, "train.seeds[1] must be >= 0, got -1"),
    ({"train": {"seeds": []}}, "train.seeds must be a non-empty list of distinct integers >= 0, got []"),
    ({"train": {"seeds": [3, 3]}}, "train.seeds must be a non-empty list of distinct integers >= 0, got [3, 3]"),
    ({"eval": {"fee_bps": -1}}, "eval.fee_bps must be >= 0, got -1.0"),
    ({"eval": {"baseline_lags": 0}}, "eval.baseline_lags must be >= 1, got 0"),
    ({"eval": {"batch_tokens": 0}}, "eval.batch_tokens must be >= 1, got 0"),
    ({"selection": {"min_dsr": 1.0}}, "selection.min_dsr must be in (0, 1), got 1.0"),
    ({"selection": {"max_pbo": 0}}, "selection.max_pbo must be in (0, 1], got 0.0"),
    # rules between fields, and the fields that are not numbers
    ({"lengths": []}, "lengths must be a non-empty list of distinct powers of two, got []"),
    ({"lengths": [512, 512]}, "lengths must be a non-empty list of distinct powers of two, got [512, 512]"),
    ({"data": {"symbol": "BTC/USDT"}}, "data.symbol must be letters and digits only (e.g. BTCUSDT), got 'BTC/USDT'"),
    ({"data": {"interval": "7m"}}, "data.interval must be one of 1s, 1m, 3m, 5m, 15m, 30m, 1h, 2h, 4h, 6h, 8h, 12h, 1d, 3d, got '7m'"),
    ({"data": {"start": "2024-13-01"}}, "data.start must be a date YYYY-MM-DD, got '2024-13-01'"),
    ({"splits": {"scheme": "kfold"}}, "splits.scheme must be 'expanding' or 'rolling', got 'kfold'"),
    ({"splits": {"scheme": "rolling"}}, "splits.train_days must be >= 1 when splits.scheme is 'rolling', got 0"),
    ({"model": {"attention_backend": "turbo"}}, "model.attention_backend must be one of auto, cudnn, flash, efficient, math, got 'turbo'"),
    ({"model": {"residual": "fp16"}}, "model.residual must be one of param, compute, got 'fp16'"),
    ({"model": {"norm": "batchnorm"}}, "model.norm must be one of rmsnorm, layernorm, got 'batchnorm'"),
    ({"model": {"d_model": 250}}, "model.d_model=250 must be divisible by model.n_heads=4"),
    ({"model": {"d_model": 12, "n_heads": 4}}, "model.d_model / model.n_heads must be even (rotary positions), got 12/4"),
    ({"eval": {"batch_tokens": 1024}}, "eval.batch_tokens must be >= the longest context length 32768, got 1024"),
    ({"selection": {"cscv_blocks": 0}}, "selection.cscv_blocks must be even and >= 2, got 0"),
    ({"splits": {"test_days": 400}},
     "the data range data.start..data.end = 2021-01-01..2025-06-30 (1642 days) is too short for splits.n_folds=5 test blocks "
     "of splits.test_days=400 days, the purge (15 bars) and 1 training bar, a validation tail of splits.val_days=30 "
     "days and its purge: it needs at least 2031 days"),
]
# fmt: on


@pytest.mark.parametrize("overrides, message", FIELD_CASES, ids=[m.split(" ")[0] for _, m in FIELD_CASES])
def test_each_rule_names_the_users_key(overrides, message):
    with pytest.raises(UserError) as exc:
        load_config("default", overrides)
    assert str(exc.value) == message


def test_the_field_rule_comes_before_the_rules_between_fields():
    """A negative d_model is reported as negative, not as "not divisible by n_heads"."""
    with pytest.raises(UserError, match=r"^model.d_model must be >= 1, got -4$"):
        load_config("default", {"model": {"d_model": -4}})


def test_the_published_config_still_validates():
    import json
    from pathlib import Path

    published = Path(__file__).resolve().parent.parent / "reports" / "h200-btcusdt-1m" / "config.json"
    cfg = config_from_dict(json.loads(published.read_text()))
    assert cfg.lengths == [512, 4096, 32768, 131072]


def test_the_known_attention_backends_are_the_attention_modules():
    from tsflash.model import attention, spec

    assert attention.BACKENDS is spec.ATTENTION_BACKENDS and attention.FUSED_BACKENDS is spec.FUSED_BACKENDS


def test_importing_the_config_loads_neither_torch_nor_scikit_learn():
    """The data command line and the report check configs without torch; the command line's
    parsing imports this module, and scikit-learn alone would cost it most of a second."""
    import subprocess
    import sys

    code = "import sys, tsflash.config; print([m for m in ('torch', 'sklearn', 'polars') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_preset_model_table_is_the_model_config_less_what_the_data_fixes():
    """ModelConfig inherits ModelSettings: a field added to the model is a preset key (`norm` was
    missing from the preset once), and the engine's ModelConfig(n_features, **settings) takes them all."""
    import dataclasses
    import json
    from pathlib import Path

    from tsflash.config import ModelSettings, added_since
    from tsflash.model.spec import ModelConfig

    settings = [f.name for f in dataclasses.fields(ModelSettings)]
    assert [f.name for f in dataclasses.fields(ModelConfig)] == [*settings, "n_features", "n_classes"]
    cfg = load_config("default", {"model": {"norm": "layernorm", "d_model": 64}})
    built = ModelConfig(n_features=5, **dataclasses.asdict(cfg.model))
    assert built.norm == "layernorm" and dataclasses.asdict(built) == {**dataclasses.asdict(cfg.model),
                                                                        "n_features": 5, "n_classes": 3}
    # a model field the published config.json lacks is added later at its default, so that run keeps its hash
    published = json.loads((Path(__file__).resolve().parent.parent / "reports" / "h200-btcusdt-1m" / "config.json").read_text())
    for name in set(settings) - set(published["model"]):
        assert added_since(0)[f"model.{name}"] == getattr(ModelSettings(), name), name
    assert "norm" not in load_config("default").to_dict()["model"] and cfg.to_dict()["model"]["norm"] == "layernorm"


@pytest.mark.parametrize("interval", ["1m", "1h", "1d"])
@pytest.mark.parametrize("scheme, train_days", [("expanding", 0), ("rolling", 3)])
def test_the_range_rule_is_the_splitters_rule(interval, scheme, train_days):
    """The shortest data range the config accepts is the shortest WalkForward can split: the
    config's message (in the user's keys) stands for the splitter's (n_splits, test_size in bars)."""
    import datetime

    from tsflash.dataset.splits import WalkForward
    from tsflash.intervals import INTERVAL_US, US_PER_DAY, bars_per_day

    per_day = bars_per_day(INTERVAL_US[interval])
    splits = {"n_folds": 2, "test_days": 2, "scheme": scheme, "train_days": train_days, "val_days": 0}  # no tail: the splitter's rule

    def config_accepts(days: int) -> bool:
        end = (datetime.date(2024, 1, 1) + datetime.timedelta(days=days - 1)).isoformat()
        data = {"interval": interval, "start": "2024-01-01", "end": end}
        try:
            load_config("default", {"lengths": [32], "splits": splits, "data": data})
        except UserError as exc:
            assert str(exc).startswith("the data range data.start..data.end = 2024-01-01..")
            return False
        return True

    def splitter_accepts(days: int) -> bool:
        cv = WalkForward(2, 2 * per_day, None if scheme == "expanding" else train_days * per_day, purge=15)
        try:
            return len(list(cv.split(days * US_PER_DAY // INTERVAL_US[interval]))) == 2
        except UserError as exc:
            assert str(exc).startswith("Too many splits")
            return False

    shortest = next(d for d in range(1, 100) if config_accepts(d))
    assert splitter_accepts(shortest) and not splitter_accepts(shortest - 1)


# ---- issue 17: validation tail, early stopping, rotary cover, far context --------------------------------


@pytest.mark.parametrize("overrides, message", [
    ({"splits": {"val_days": -1}}, "splits.val_days must be >= 0 (0 = no validation tail), got -1"),
    ({"splits": {"val_fraction": 0.2}},
     "splits.val_fraction is retired: give the validation tail as splits.val_days, got splits.val_fraction=0.2"),
    ({"train": {"eval_every": 0}},
     "train.eval_every must be >= 1 when splits.val_days > 0 (the validation loss is measured every eval_every steps "
     "and at the last step), got 0"),
    ({"train": {"patience": -1}}, "train.patience must be >= 0 (0 = never stop early), got -1"),
    ({"eval": {"context_cuts": [512, 500]}}, "eval.context_cuts: every length must be a power of two >= 2, got 500"),
    ({"eval": {"context_cuts": [512, 512]}}, "eval.context_cuts must be distinct, got [512, 512]"),
    ({"model": {"rope_base": 0.5}}, "model.rope_base must be 0 (auto) or > 1, got 0.5"),
    ({"model": {"rope_base": 10000.0}, "lengths": [512, 131072]},
     "rotary positions do not cover N=131072 (lengths): the slowest wavelength at model.rope_base=10000 (base 1e+04, "
     "head size 64) is 47,117 bars < 4 x N; set model.rope_base >= 1.3e+05"),
    ({"model": {"d_model": 8, "n_heads": 4}},
     "rotary positions do not cover N=32768 (lengths): the slowest wavelength at model.rope_base=0 (auto, base "
     "1e+04, head size 2) is 6 bars < 4 x N; use a head size model.d_model / model.n_heads >= 4"),
    ({"splits": {"val_days": 800}},
     "the data range data.start..data.end = 2021-01-01..2025-06-30 (1642 days) is too short for splits.n_folds=5 test "
     "blocks of splits.test_days=182 days, the purge (15 bars) and 1 training bar, a validation tail of "
     "splits.val_days=800 days and its purge: it needs at least 1711 days"),
])
def test_protocol_rules_name_the_users_key(overrides, message):
    with pytest.raises(UserError) as exc:
        load_config("default", overrides)
    assert str(exc.value) == message


def test_the_default_is_the_fair_test_protocol():
    """Issue 17: validated stopping, three seeds, far-context scoring, the horizon-matched rule."""
    protocol = load_config("default")
    assert protocol.splits.val_days == 30 and len(protocol.train.seeds) >= 3 and protocol.eval.context_cuts == [512, 4096]
    assert protocol.train.eval_every >= 1 and protocol.train.patience >= 1 and protocol.model.rope_base == 0.0
    # the maximum leaves room for the stopping rule: patience evaluations fit several times over
    assert protocol.train.steps >= 3 * protocol.train.patience * protocol.train.eval_every
    assert protocol.eval.strategy == "horizon" and protocol.eval.entry_threshold == -1.0
    assert all(cut < max(protocol.lengths) for cut in protocol.eval.context_cuts)
    # without a tail, eval_every and patience are unused: turning the tail off is one key
    assert load_config("default", {"splits": {"val_days": 0}}).train.patience == protocol.train.patience


def test_the_cpu_preset_keeps_the_protocol_at_small_size():
    """tsflash/presets/cpu.toml over the default (as `tsflash sweep` lays it on a machine without CUDA):
    stopping that can act within its few steps, the same seeds, cuts shorter than its longest N."""
    from tsflash.sweep.plan import SweepOptions, resolve_config

    default = load_config("default")
    cfg, preset, note = resolve_config(SweepOptions(lengths=[512, 4096, 32768]), "cpu")
    assert preset == "cpu" and cfg.name == "default+cpu" and "tsflash/presets/cpu.toml applied" in note
    assert cfg.model.d_model < default.model.d_model and cfg.splits.n_folds == 2 and cfg.splits.test_days == 30
    tr = cfg.train
    assert 0 < cfg.splits.val_days <= 365 // 4 and tr.seeds == default.train.seeds
    assert 1 <= tr.eval_every < tr.steps and tr.patience >= 1 and tr.patience * tr.eval_every < tr.steps
    assert tr.warmup_steps < tr.eval_every * tr.patience
    assert cfg.eval.context_cuts and all(cut < max(cfg.lengths) for cut in cfg.eval.context_cuts)
    assert (cfg.eval.strategy, cfg.labels.horizon, cfg.model.rope_base) == (
        default.eval.strategy, default.labels.horizon, default.model.rope_base)
    # it shrinks sizes only: over the first edition, still a fixed budget, one seed, no cuts
    first, _, _ = resolve_config(SweepOptions(lengths=[512, 4096, 32768], config="first-edition"), "cpu")
    assert (first.splits.val_days, first.train.seeds, first.eval.context_cuts, first.eval.strategy) == (0, [0], [], "one-bar")
    assert (first.model.d_model, first.train.steps) == (cfg.model.d_model, tr.steps)


def test_the_first_edition_preset_is_the_published_config():
    """tsflash/presets/first-edition.toml resolves to reports/h200-btcusdt-1m/config.json in every field
    it sets but the name (the run ran as "default"): with that name, the same config hash."""
    import json
    import tomllib
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    published = json.loads((repo / "reports" / "h200-btcusdt-1m" / "config.json").read_text())
    preset = tomllib.loads((repo / "tsflash" / "presets" / "first-edition.toml").read_text())
    first = json.loads(json.dumps(load_config("first-edition").to_dict()))  # tuples as JSON lists
    assert first["name"] == "first-edition" and published["name"] == "default"
    compared = 0
    for key, value in preset.items():
        if key == "name":
            continue
        if not isinstance(value, dict):
            assert first[key] == published[key], key
            compared += 1
            continue
        for name in value:
            # a key the published config lacks is one added later, at the value an older config means
            assert first[key].get(name) == published[key].get(name), f"{key}.{name}"
            compared += 1
    assert compared >= 25
    assert load_config("first-edition", {"name": "default"}).hash() == config_from_dict(published).hash() == "7ce41c55"
    cfg = load_config("first-edition")
    assert (cfg.train.steps, cfg.train.seeds, cfg.splits.val_days, cfg.train.patience) == (200, [0], 0, 0)
    assert (cfg.eval.strategy, cfg.eval.context_cuts) == ("one-bar", [])


def test_fields_added_later_leave_older_configs_unchanged():
    """An older config.json lacks the new keys: it loads with their defaults and keeps its hash;
    a config using them writes them."""
    import json
    from pathlib import Path

    from tsflash.config import added_since

    published = Path(__file__).resolve().parent.parent / "reports" / "h200-btcusdt-1m" / "config.json"
    raw = json.loads(published.read_text())
    cfg = config_from_dict(raw)
    assert json.loads(json.dumps(cfg.to_dict())) == raw and cfg.splits.val_days == 0 and cfg.eval.context_cuts == []
    protocol = load_config("default").to_dict()
    assert protocol["splits"]["val_days"] == 30 and protocol["eval"]["context_cuts"] == [512, 4096]
    assert "rope_base" not in protocol["model"]  # auto, its default
    assert protocol["eval"]["strategy"] == "horizon"  # not the value an older config means: written
    assert "residual" not in protocol["model"]  # float32, as every published run trained
    assert "norm" not in protocol["model"]  # rmsnorm, as every published run trained
    assert set(added_since(0)) == {"splits.val_days", "train.eval_every", "train.patience", "model.rope_base",
                                "model.residual", "model.norm", "eval.context_cuts", "eval.strategy",
                                "eval.entry_threshold", "model.patch", "train.ema_decay", "train.schedule",
                                "train.decay_fraction", "train.short_fraction", "train.short_length", "train.restarts",
                                "train.restart_screen", "train.keep_from",
                                "eval.seed_inference", "eval.probe"}


def test_seed_inference_is_fold_or_crossed():
    assert load_config("default").eval.seed_inference == "fold"  # the published runs' test
    with pytest.raises(UserError, match=r"eval.seed_inference must be one of fold, crossed, got 'seed'"):
        load_config("default", {"eval": {"seed_inference": "seed"}})


def test_data_symbol_is_an_upper_case_spot_pair():
    """One rule for symbols everywhere (`tsflash.data.store.check_pair`): `--set data.symbol=...`
    is refused as `--symbol` is, and a lower-case pair names its upper-case form."""
    from tsflash.config import config_from_dict, load_config, validate

    def with_symbol(symbol):
        d = load_config("default").to_dict()
        d["data"]["symbol"] = symbol
        return config_from_dict(d)

    with pytest.raises(UserError, match=r"^data.symbol must be upper case, got 'ethusdt' \(did you mean 'ETHUSDT'\?\)$"):
        validate(with_symbol("ethusdt"))
    with pytest.raises(UserError, match=r"^data.symbol must be a Binance spot pair, .* got 'eth'$"):
        validate(with_symbol("eth"))
    validate(with_symbol("ETHBTC"))


# ---- issue 29: the training recipe ------------------------------------------------------------------


@pytest.mark.parametrize("overrides, message", [
    ({"train": {"ema_decay": 1.0}}, "train.ema_decay must be in [0, 1) (0 = no weight average), got 1.0"),
    ({"train": {"ema_decay": -0.1}}, "train.ema_decay must be in [0, 1) (0 = no weight average), got -0.1"),
    ({"train": {"schedule": "linear"}}, "train.schedule must be 'cosine' or 'wsd', got 'linear'"),
    ({"train": {"schedule": "wsd", "decay_fraction": 0}}, "train.decay_fraction must be in (0, 1], got 0.0"),
    ({"train": {"schedule": "wsd", "decay_fraction": 1.5}}, "train.decay_fraction must be in (0, 1], got 1.5"),
    ({"train": {"decay_fraction": 0.3}},
     "train.decay_fraction=0.3 is used by train.schedule='wsd' only (the cosine schedule decays over all of train.steps)"),
    ({"train": {"short_fraction": 1.0}}, "train.short_fraction must be in [0, 1), got 1.0"),
    ({"train": {"short_fraction": 0.3}},
     "train.short_fraction=0.3 of the batch of 32 windows at N=4096 (train.tokens_per_step=131072) is 9.6 windows: it "
     "must be a whole number >= 1 at every N > train.short_length"),
    ({"train": {"short_fraction": 0.25, "short_length": 500}},
     "train.short_length: every length must be a power of two >= 2, got 500"),
    ({"train": {"short_length": 1024}}, "train.short_length=1024 is used with train.short_fraction > 0 only"),
])
def test_recipe_values_are_refused_in_one_line(overrides, message):
    with pytest.raises(UserError) as exc:
        load_config("default", overrides)
    assert str(exc.value) == message


def test_the_recipe_leaves_every_published_hash_and_run_key_unchanged():
    """At their defaults the recipe's fields are not written: every preset and published run keeps
    its config hash and run key; a recipe is written and is another run."""
    import json
    from pathlib import Path

    from tsflash.sweep.plan import run_hash

    repo = Path(__file__).resolve().parent.parent
    for config in sorted(repo.glob("reports/*/config.json")):
        raw = json.loads(config.read_text())
        cfg = config_from_dict(raw)
        assert json.loads(json.dumps(cfg.to_dict())) == raw, config
    default = load_config("default")
    assert not {"ema_decay", "schedule", "decay_fraction", "short_fraction", "short_length"} & set(default.to_dict()["train"])
    recipe = load_config("default", {"train": {"schedule": "wsd", "ema_decay": 0.98}})
    assert recipe.to_dict()["train"]["schedule"] == "wsd" and recipe.to_dict()["train"]["ema_decay"] == 0.98
    assert recipe.hash() != default.hash() and run_hash(recipe) != run_hash(default)
    assert config_from_dict(recipe.to_dict()).hash() == recipe.hash()


def test_the_recipe_in_one_line():
    from tsflash.config import recipe_words

    assert recipe_words({}) == ("warm-up, then cosine decay to 0.1 x lr at the last step; the raw weights are "
                                "validated, kept and scored")
    words = recipe_words(load_config("default", {"train": {"schedule": "wsd", "ema_decay": 0.98}}).to_dict()["train"])
    assert words.startswith("warm-up, stable, then a linear decay to 0.1 x lr over 20% of the steps")
    assert words.endswith("an exponential moving average of the weights (decay 0.98, about 50 steps) is validated, "
                          "kept and scored")
    mixed = load_config("default", {"train": {"short_fraction": 0.25}}).to_dict()["train"]
    assert recipe_words(mixed).endswith("; 25% of each longer-N batch's tokens drawn as 512-bar windows, same loss")
