"""The README's Python snippets run as written: every ```python block, in order, in one namespace.

`tsflash.run_sweep` is the one call that would train for minutes: here it is checked the way the
sweep checks it first (`plan_sweep` on the same keywords: every option and the whole config,
nothing written) and answers with the published second edition's run folder, so the lines after
it (`result.folder`, `.report`, `.results[...]`) run against a real finished run."""

from __future__ import annotations

import re

import pytest

import tsflash
from tsflash import api
from tsflash.errors import UserError
from tests.conftest import REPO

PUBLISHED = REPO / "reports" / "h200-btcusdt-1m-second-edition"


def readme_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), flags=re.S | re.M)


def test_the_readme_has_python_snippets():
    blocks = readme_blocks()
    assert len(blocks) >= 2 and any("run_sweep" in b for b in blocks) and any("model_inputs" in b for b in blocks)


def test_the_readme_python_runs_as_written(monkeypatch, tmp_path, capsys):
    from tsflash.sweep.plan import plan_sweep

    planned = []

    def checked_run_sweep(lengths=None, **options):
        planned.append(plan_sweep(api.sweep_options(lengths, **options)))
        return api.SweepResult.of(PUBLISHED)

    monkeypatch.setattr(tsflash, "run_sweep", checked_run_sweep, raising=False)
    monkeypatch.chdir(tmp_path)  # a plan resolves data/ and runs/ here; nothing may be written
    (tmp_path / "data").mkdir()  # the store of a fresh clone: there, still empty
    namespace: dict = {}
    for block in readme_blocks():
        exec(compile(block, "README.md", "exec"), namespace)
    assert planned and planned[0].cfg.lengths == [512, 4096, 32768]
    assert [p.name for p in tmp_path.iterdir()] == ["data"] and not any((tmp_path / "data").iterdir())
    printed = capsys.readouterr().out
    assert "torch.Size([1, 512, 3])" in printed and "flash" in printed
    assert namespace["result"].complete and namespace["result"].report.exists()


def test_run_sweep_options_match_the_cli(tmp_path):
    opts = api.sweep_options("512,4096", data="synthetic:random-walk", set={"train.steps": 3}, symbol="ethusdt",
                             seed=3, out=tmp_path / "r", time_budget=60)
    assert opts.lengths == [512, 4096] and opts.overrides == {"train": {"steps": 3}, "data": {"symbol": "ETHUSDT"}}
    assert opts.seed == 3 and opts.time_budget == 60 and opts.out == tmp_path / "r"
    assert opts.command.startswith("tsflash.run_sweep(lengths=[512, 4096], data='synthetic:random-walk'")
    assert api.sweep_options(set=["train.steps=3", "model.d_model=16"]).overrides == {
        "train": {"steps": 3}, "model": {"d_model": 16}}
    with pytest.raises(UserError, match="Binance spot pair"):
        api.sweep_options(symbol="eth")
