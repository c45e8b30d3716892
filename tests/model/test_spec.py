"""The model's settings without torch: the shape rule, the names, and the one rule the config,
the model and `tsflash bench train` share."""

from __future__ import annotations

import argparse

import pytest

from tsflash.config import load_config
from tsflash.errors import UserError
from tsflash.model.spec import ModelConfig, check_choice, check_shape


@pytest.mark.parametrize("d_model, n_heads, head_dim", [(256, 4, 64), (8, 4, 2), (6, 3, 2), (2, 1, 2)])
def test_a_shape_that_divides_into_even_heads_gives_the_head_size(d_model, n_heads, head_dim):
    assert check_shape(d_model, n_heads) == head_dim


@pytest.mark.parametrize("d_model, n_heads, message", [
    (30, 4, "d_model=30 must be divisible by n_heads=4"),
    (12, 4, "d_model / n_heads must be even (rotary positions), got 12/4"),
    (3, 1, "d_model / n_heads must be even (rotary positions), got 3/1"),
])
def test_the_shape_rule_says_which_part_fails(d_model, n_heads, message):
    with pytest.raises(UserError) as exc:
        check_shape(d_model, n_heads)
    assert str(exc.value) == message


def test_the_config_the_model_and_the_bench_apply_the_one_rule_in_their_words():
    from tsflash.commands.bench import run_train

    said = []
    for check in (lambda: load_config("default", {"model": {"d_model": 30}}),
                  lambda: ModelConfig(n_features=3, d_model=30).validate(),
                  lambda: run_train(argparse.Namespace(d_model=30, heads=4))):
        with pytest.raises(UserError) as exc:
            check()
        said.append(str(exc.value))
    assert said == ["model.d_model=30 must be divisible by model.n_heads=4", "d_model=30 must be divisible by n_heads=4",
                    "--d-model=30 must be divisible by --heads=4"]


def test_a_name_outside_its_choices_names_the_users_key():
    bad = ModelConfig(n_features=3, norm="batch")
    with pytest.raises(UserError, match=r"^model.norm must be one of rmsnorm, layernorm, got 'batch'$"):
        bad.check("model.")
    with pytest.raises(UserError, match=r"^norm must be one of rmsnorm, layernorm, got 'batch'$"):
        bad.validate()
    assert check_choice("flash", ("auto", "flash"), "model.attention_backend") == "flash"
