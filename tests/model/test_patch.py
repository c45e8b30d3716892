"""Patch tokens (``model.patch`` = P > 1): P bars enter as one token; causality at every position
of a patch, the parameter count independent of N, the patch embedding as a reshape and a Linear,
and the patch rule refused in one line."""

from __future__ import annotations

import pytest
import torch

from tsflash import CausalTransformer, ModelConfig
from tsflash.config import load_config
from tsflash.errors import UserError
from tsflash.model.transformer import patch_ends

F_IN = 5
SMALL = dict(n_features=F_IN, d_model=32, n_layers=2, n_heads=4)


def patch_model(patch: int, **overrides) -> CausalTransformer:
    torch.manual_seed(0)
    return CausalTransformer(ModelConfig(**{**SMALL, "patch": patch, **overrides})).eval()


def test_logits_are_one_per_patch_forecasting_the_bar_that_ends_it():
    model = patch_model(4)
    logits, loss = model(torch.randn(3, 32, F_IN))
    assert logits.shape == (3, 8, 3) and logits.dtype == torch.float32 and loss is None
    assert patch_ends(32, 4).tolist() == [3, 7, 11, 15, 19, 23, 27, 31]
    assert patch_ends(6, 1).tolist() == list(range(6))


@pytest.mark.parametrize("patch", [2, 4, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_causality_at_every_position_of_a_patch(patch, dtype):
    """Changing the bars after t changes no output at a patch end <= t, for every t (inside a
    patch too: the outputs of its own patch end, after t, may change; none before it), exactly."""
    model = patch_model(patch).to(dtype)
    T = 4 * patch
    x = torch.randn(2, T, F_IN, dtype=dtype)
    base, _ = model(x)  # (2, T/P, 3)
    ends = patch_ends(T, patch)
    for t in range(T):
        y = x.clone()
        y[:, t + 1 :] = torch.randn(2, T - t - 1, F_IN, dtype=dtype) * 100  # a wildly different future
        out, _ = model(y)
        seen = ends <= t  # the outputs at or before t
        assert torch.equal(out[:, seen], base[:, seen]), t
        if t + 1 < T:  # and the future does matter: the first patch ending after t moves
            assert not torch.allclose(out[:, ~seen][:, :1], base[:, ~seen][:, :1]), t


def test_an_output_depends_on_every_bar_of_its_patch():
    """Bar t reaches the output of the patch that holds it (not only the patch end's own bar)."""
    model = patch_model(4)
    x = torch.randn(1, 16, F_IN)
    base, _ = model(x)
    for t in range(16):
        y = x.clone()
        y[:, t] += 1.0
        out, _ = model(y)
        j = t // 4
        assert torch.equal(out[:, :j], base[:, :j]) and not torch.allclose(out[:, j], base[:, j]), t


@pytest.mark.parametrize("patch", [1, 4, 16])
def test_parameter_count_does_not_depend_on_n(patch):
    model = patch_model(patch)
    before = model.n_params()
    for n in (2 * patch, 16 * patch, 128 * patch):
        logits, _ = model(torch.randn(1, n, F_IN))
        assert logits.shape == (1, n // patch, 3) and model.n_params() == before
    # only the input projection grows with P: P*F inputs instead of F
    assert before - patch_model(1).n_params() == (patch - 1) * F_IN * SMALL["d_model"]


def test_the_patch_embedding_is_a_reshape_and_a_linear():
    """The first layer's input equals torch's reshape of (B, T, F) into (B, T/P, P*F) through a
    hand-built Linear with the model's weight, bit for bit."""
    P, B, T = 4, 3, 32
    model = patch_model(P)
    x = torch.randn(B, T, F_IN)
    seen = []
    hook = model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model(x)
    hook.remove()
    linear = torch.nn.Linear(P * F_IN, SMALL["d_model"], bias=False)
    with torch.no_grad():
        linear.weight.copy_(model.inp.weight)
        # hand-written: bar-major patches, concatenating the features of bars jP .. jP+P-1
        hand = torch.cat([x[:, j * P : (j + 1) * P].flatten(1)[:, None] for j in range(T // P)], dim=1)
        assert torch.equal(hand, x.reshape(B, T // P, P * F_IN))
        assert torch.equal(seen[0], linear(hand))


def test_the_loss_scores_only_the_patch_ends_targets():
    model = patch_model(4)
    x = torch.randn(2, 16, F_IN)
    targets = torch.randint(0, 3, (2, 16))
    logits, loss = model(x, targets)
    ends = targets[:, 3::4]
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 3), ends.reshape(-1))
    torch.testing.assert_close(loss, expected)
    other = targets.clone()
    other[:, [0, 1, 2, 4, 9, 14]] = -1  # off the patch ends: not scored
    assert torch.equal(model(x, other)[1], loss)


def test_input_of_partial_patches_is_a_clear_error():
    with pytest.raises(UserError, match=r"^model input must be whole patches of patch=4 bars, got 18 bars"):
        patch_model(4)(torch.randn(1, 18, F_IN))


@pytest.mark.parametrize("overrides, message", [
    ({"model": {"patch": 3}}, "model.patch must be a power of two >= 1 (1 = a token per bar), got 3"),
    ({"model": {"patch": 0}}, "model.patch must be >= 1 (1 = a token per bar), got 0"),
    ({"model": {"patch": 1024}}, "model.patch=1024 must divide lengths N=512 into an even number >= 2 of tokens, "
                                 "got 512 / 1024 = 0.5 tokens"),
    ({"model": {"patch": 512}}, "model.patch=512 must divide lengths N=512 into an even number >= 2 of tokens, "
                                "got 512 / 512 = 1 tokens"),
    ({"model": {"patch": 256}, "lengths": [4096], "eval": {"context_cuts": [256]}},
     "model.patch=256 must divide eval.context_cuts m=256 into an even number >= 2 of tokens, got 256 / 256 = 1 tokens"),
])
def test_a_bad_patch_is_refused_at_config_validation_in_one_line(overrides, message):
    with pytest.raises(UserError) as exc:
        load_config("default", overrides)
    assert str(exc.value) == message and "\n" not in message


def test_a_bad_patch_is_refused_by_the_model_config():
    with pytest.raises(UserError, match=r"^patch must be a power of two >= 1 \(1 = a token per bar\), got 6$"):
        ModelConfig(n_features=3, patch=6).validate()


def test_patch_1_is_the_published_config_and_checkpoint(tmp_path):
    """patch = 1 is left out of a config's dict (added by a migration step: published hashes unchanged); a model
    checkpoint saved before the field existed loads as patch 1; a patch model round-trips."""
    import dataclasses

    assert "patch" not in load_config("default").to_dict()["model"]
    assert load_config("default", {"model": {"patch": 16}}).to_dict()["model"]["patch"] == 16
    model = patch_model(1)
    path = model.save(tmp_path / "m.pt")
    blob = torch.load(path, weights_only=True)
    del blob["config"]["patch"]
    torch.save(blob, path)
    assert CausalTransformer.load(path).config.patch == 1
    patched = patch_model(8)
    again = CausalTransformer.load(patched.save(tmp_path / "p.pt"), expect_config=patched.config)
    x = torch.randn(1, 32, F_IN)
    assert again.config == patched.config and dataclasses.asdict(again.config)["patch"] == 8
    assert torch.equal(again.eval()(x)[0], patched(x)[0])
