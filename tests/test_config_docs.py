"""docs/config.md is the text `tsflash.config_docs` generates from the config's field comments."""

from __future__ import annotations

import dataclasses
import re

from tests.conftest import REPO
from tsflash import config_docs
from tsflash.config import ExperimentConfig


def test_the_committed_page_is_the_generated_text():
    page = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    assert page == config_docs.render(), "regenerate it: python -m tsflash.config_docs docs/config.md"


def test_every_key_has_a_row_with_a_meaning():
    cfg = ExperimentConfig()
    text = config_docs.render()
    sections = {"": cfg} | {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                            if dataclasses.is_dataclass(getattr(cfg, f.name))}
    for section, obj in sections.items():
        block = text.split(f"## [{section}]\n")[1].split("\n## ")[0] if section else text
        comments = config_docs.field_comments(type(obj))
        for f in dataclasses.fields(obj):
            if dataclasses.is_dataclass(getattr(obj, f.name)):
                continue
            assert comments[f.name], f"{section}.{f.name}: a comment on the field says what it means"
            assert re.search(rf"^\| `{f.name}` \| `[^`]*` \|", block, re.M), f"{section}.{f.name}"


def test_every_sentence_has_at_most_40_words():
    text = re.sub(r"<!--.*?-->", "", config_docs.render(), flags=re.S)
    for line in text.splitlines():
        for cell in re.split(r"(?<!\\)\|", line):
            for sentence in re.split(r"(?<=[.?!])\s+(?=[A-Z\"`])", cell):
                assert len(sentence.split()) <= 40, sentence


def test_a_field_comment_is_its_block_above_and_its_line_end():
    @dataclasses.dataclass
    class Example:
        a: int = 1  # the end of a's line
        # b's block,
        # two lines
        b: int = 2

        c: int = 3

    assert config_docs.field_comments(Example) == {"a": "the end of a's line", "b": "b's block, two lines", "c": ""}


def test_the_command_writes_the_page(tmp_path, capsys):
    out = tmp_path / "config.md"
    assert config_docs.main([str(out)]) == 0 and out.read_text(encoding="utf-8") == config_docs.render()
    assert config_docs.main([]) == 2 and "usage: python -m tsflash.config_docs PATH" in capsys.readouterr().err
