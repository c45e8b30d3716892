"""What a model is, without torch: its settings, the names they may take, and the shape rule.

`ModelSettings` holds the hyperparameters a preset's `[model]` table sets (`tsflash.config`
uses it as that table); `ModelConfig` is those settings plus what the data fixes (the number
of input features and of classes), the config a checkpoint stores and `CausalTransformer`
builds. One inherits the other, so a field added to the model is a preset key too.

The names (attention backends, norms, residual dtypes), the shape rule (`check_shape`) and the
patch rule (`check_patch`) live here rather than beside the torch code, so that a config is
checked without loading torch; `tsflash.model.attention` and `tsflash.model.transformer` import
them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tsflash.errors import UserError
from tsflash.model.rotary import rotary_base

ATTENTION_BACKENDS = ("auto", "cudnn", "flash", "efficient", "math")  # model.attention_backend
FUSED_BACKENDS = ("cudnn", "flash", "efficient")  # auto's candidates, in the order tried
NORMS = ("rmsnorm", "layernorm")  # model.norm: pre-norm, no bias
RESIDUAL_DTYPES = ("param", "compute")  # model.residual: the parameters' dtype, or autocast's


def check_choice(value, choices: tuple[str, ...], key: str) -> str:
    """`value` if it is one of `choices`; else a UserError naming `key` (the user's word for it)."""
    if value not in choices:
        raise UserError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_shape(d_model: int, n_heads: int, names: tuple[str, str] = ("d_model", "n_heads")) -> int:
    """The model's shape rule: n_heads divides d_model, and the head size is even (rotary positions
    turn pairs of channels). `names` are the user's words for the two (config keys or flags).
    Returns the head size."""
    d_name, h_name = names
    if d_model % n_heads:
        raise UserError(f"{d_name}={d_model} must be divisible by {h_name}={n_heads}")
    if (d_model // n_heads) % 2:
        raise UserError(f"{d_name} / {h_name} must be even (rotary positions), got {d_model}/{n_heads}")
    return d_model // n_heads


def check_patch(patch, n: int | None = None, names: tuple[str, str] = ("patch", "n")) -> int | None:
    """The patch rule: `patch` (bars per token) is a power of two >= 1, and a context of n bars
    (when given) is an even number >= 2 of whole tokens (the eval windows stride by half a window
    of tokens; for powers of two, n / patch >= 2 says it all). `names` are the user's words for
    the two. Returns the number of tokens, n / patch (None without n)."""
    p_name, n_name = names
    if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1 or patch & (patch - 1):
        raise UserError(f"{p_name} must be a power of two >= 1 (1 = a token per bar), got {patch!r}")
    if n is None:
        return None
    if n % patch or n // patch < 2 or (n // patch) % 2:
        raise UserError(f"{p_name}={patch} must divide {n_name}={n} into an even number >= 2 of tokens, "
                        f"got {n} / {patch} = {n / patch:g} tokens")
    return n // patch


@dataclass
class ModelSettings:
    """The model's hyperparameters: every field of `ModelConfig` but those the data fixes."""

    d_model: int = 256  # width of the residual stream
    n_layers: int = 4  # transformer blocks
    n_heads: int = 4  # attention heads; d_model / n_heads is the head size, even for rotary positions
    mlp_ratio: int = 4  # the MLP's hidden width is mlp_ratio * d_model
    dropout: float = 0.0  # residual/MLP dropout only: attention dropout would force SDPA's MATH path on CPU
    attention_backend: str = "auto"  # the fused SDPA kernel every attention call is forced onto; auto: timed per shape
    # Rotary base; 0 = auto: the smallest (2-digit) base whose slowest wavelength is at least
    # 4 x 131072 bars at this head size (tsflash.model.rotary.rotary_base_for), the same for every N.
    rope_base: float = 0.0
    norm: str = "rmsnorm"  # the pre-norm before attention and MLP, without bias
    # The residual stream's dtype: "param" keeps it in the parameters' (float32 under bf16 autocast,
    # the published runs'); "compute" in autocast's (bf16 on CUDA): half the bytes for the norms and
    # residual adds, other numerics.
    residual: str = "param"
    # Bars per token: 1 = a token per bar (the published architecture); P > 1 = patch tokens
    # (PatchTST's, Nie et al. 2023). The P x F features of P consecutive bars, flattened and
    # projected to d_model, enter as one token, and only the bar ending a patch is scored.
    patch: int = 1

    def check(self, prefix: str = "") -> ModelSettings:
        """The rules of the names and of the shape; `prefix` starts each key in the messages
        ("model." for a preset's table)."""
        check_choice(self.attention_backend, ATTENTION_BACKENDS, f"{prefix}attention_backend")
        check_choice(self.residual, RESIDUAL_DTYPES, f"{prefix}residual")
        check_choice(self.norm, NORMS, f"{prefix}norm")
        check_shape(self.d_model, self.n_heads, (f"{prefix}d_model", f"{prefix}n_heads"))
        check_patch(self.patch, names=(f"{prefix}patch", "N"))
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def rotary_base(self) -> float:
        """The rotary base in use (rope_base, or the automatic one)."""
        return rotary_base(self.head_dim, self.rope_base)


@dataclass(kw_only=True)
class ModelConfig(ModelSettings):
    """The settings and what the data fixes: what `CausalTransformer` builds and a checkpoint stores."""

    n_features: int  # per-bar input features F
    n_classes: int = 3  # down / flat / up

    def validate(self) -> ModelConfig:
        if self.n_features < 1:
            raise UserError(f"model n_features must be >= 1, got {self.n_features}")
        self.check()
        if not 0.0 <= self.dropout < 1.0:
            raise UserError(f"model dropout must be in [0, 1), got {self.dropout}")
        return self
