"""The README reads as a product page and its snippets run as written.

Its shape: at most 120 lines; every prose sentence (outside code blocks and tables) at most 40 words,
as in every file of docs/; its set-up commands are the ones `.ci/run` runs; every relative link names
a committed file.

Its Python snippets: every ```python block, in order, in one namespace. `tsflash.run_sweep` is the one
call that trains (a tiny sweep, about a minute on 2 CPU cores): here it is checked the way the sweep
checks it first (`plan_sweep` on the same keywords: every option and the whole config, nothing
written) and answers with the published second edition's run folder, so the lines after it
(`result.complete`, `.report`, `.results[...]`) run against a real finished run."""

from __future__ import annotations

import re

import pytest

import tsflash
from tests.conftest import REPO
from tsflash import api
from tsflash.errors import UserError

PUBLISHED = REPO / "reports" / "h200-btcusdt-1m-second-edition"
README = REPO / "README.md"
MAX_LINES, MAX_WORDS = 120, 40


def readme_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


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
    assert planned and planned[0].cfg.lengths == [64, 256] and planned[0].cfg.train.seeds == [0]
    assert [p.name for p in tmp_path.iterdir()] == ["data"] and not any((tmp_path / "data").iterdir())
    printed = capsys.readouterr().out
    assert "torch.Size([1, 512, 3])" in printed and "flash" in printed
    assert namespace["result"].complete and namespace["result"].report.exists()


def test_run_sweep_options_match_the_cli(tmp_path):
    from tsflash.sweep.plan import plan_sweep

    opts = api.sweep_options("512,4096", data="synthetic:random-walk", set={"train.steps": 3}, symbol="ethusdt",
                             seed=3, out=tmp_path / "r", time_budget=60, slice_by="cell")
    assert opts.lengths == [512, 4096] and opts.overrides == {"train": {"steps": 3}, "data": {"symbol": "ETHUSDT"}}
    assert opts.seed == 3 and opts.time_budget == 60 and opts.slice_by == "cell" and opts.out == tmp_path / "r"
    assert opts.command.startswith("tsflash.run_sweep(lengths=[512, 4096], data='synthetic:random-walk'")
    assert api.sweep_options(set=["train.steps=3", "model.d_model=16"]).overrides == {
        "train": {"steps": 3}, "model": {"d_model": 16}}
    with pytest.raises(UserError, match="Binance spot pair"):
        api.sweep_options(symbol="eth")
    with pytest.raises(UserError, match=r"--slice-by must be one of fold, cell \(where a --time-budget slice may end\), got 'seed'"):
        plan_sweep(api.sweep_options(data="synthetic:random-walk", slice_by="seed"))


def prose(text: str) -> list[str]:
    """The README's prose paragraphs and list items, outside code blocks, tables and headings, with
    each link reduced to its text."""
    parts, current, fenced = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        starts_item = line.startswith("- ")
        if fenced or line.startswith(("|", "#")) or not line.strip() or starts_item:
            if current:
                parts.append(" ".join(current))
            current = [line[2:]] if starts_item else []
            continue
        current.append(line.strip())
    return [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", p) for p in parts if p]


def sentences(paragraph: str) -> list[str]:
    """A paragraph split after '.', '!' or '?' (and any closing bold, quote or parenthesis) and a space;
    decimals ("0.089") and "e.g." or "i.e." do not end a sentence."""
    ends = r"(?<!e\.g\.)(?<!i\.e\.)(?:(?<=[.!?])|(?<=[.!?]\*\*)|(?<=[.!?][\"')]))\s+"
    return [s for s in re.split(ends, paragraph) if s.strip()]


def test_sentences_split_where_a_reader_would():
    assert sentences("No better (p 0.089). Trading: no. `tsflash runs` lists them, e.g. today.") == [
        "No better (p 0.089).", "Trading: no.", "`tsflash runs` lists them, e.g. today."]
    assert sentences("**Does it help?** tsflash asks. (Yes.) Done.") == ["**Does it help?**", "tsflash asks.", "(Yes.)",
                                                                         "Done."]
    assert prose("a\nb\n\n```bash\nx. Y\n```\n| t. U |\n- one [link](x.md)\n- two") == ["a b", "one link", "two"]


def test_the_readme_has_at_most_120_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines, more than {MAX_LINES}: move detail to docs/"


def test_every_readme_sentence_has_at_most_40_words():
    long = [(len(s.split()), s) for p in prose(README.read_text()) for s in sentences(p) if len(s.split()) > MAX_WORDS]
    assert not long, f"sentences over {MAX_WORDS} words: {long}"


@pytest.mark.parametrize("doc", sorted(p.name for p in (REPO / "docs").glob("*.md")))
def test_every_docs_sentence_has_at_most_40_words(doc):
    """docs/ is written for a reader in a hurry too: the detail the README leaves out, in sentences as short."""
    text = (REPO / "docs" / doc).read_text()
    long = [(len(s.split()), s) for p in prose(text) for s in sentences(p) if len(s.split()) > MAX_WORDS]
    assert not long, f"docs/{doc}: sentences over {MAX_WORDS} words: {long}"


def test_the_readme_set_up_commands_are_the_ones_ci_runs():
    """.ci/run installs and tests exactly as the README's "Set up" section says (its install steps are the
    main command's steps before `tsflash sweep`)."""
    setup = README.read_text().split("## Set up\n", 1)[1].split("\n## ", 1)[0]
    install, test = re.findall(r"^```bash\n(.*?)\n```", setup, flags=re.S | re.M)
    assert install == ('python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]" torch==2.13.0 '
                       "&& tsflash sweep --lengths 512,4096,32768")
    assert test == ". .venv/bin/activate && python -m pytest -q"
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    steps = install.split(" && ")[:-1] + test.split(" && ")[1:]
    assert steps == ["python3 -m venv .venv", ". .venv/bin/activate", 'pip install -e ".[dev]" torch==2.13.0',
                     "python -m pytest -q"]
    at = [ci.index(step) for step in steps]
    assert at == sorted(at), f".ci/run runs the README's steps out of order: {dict(zip(steps, at, strict=True))}"


def test_every_relative_link_of_the_readme_names_a_committed_file():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    missing = [link for link in links if not link.startswith("http") and not (REPO / link).exists()]
    assert links and not missing, missing
