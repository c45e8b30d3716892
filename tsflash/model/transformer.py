"""Causal transformer over per-bar features: (B, T, F) -> up/flat/down logits (B, T, 3).

input projection -> n_layers x [pre-norm attention (rotary, causal SDPA) + pre-norm MLP] -> norm ->
3-class head. Positions are rotary (parameter-free), so the parameter count does not depend on the
context length: the same config trains at N = 512 and at N = 131072. The rotary base is the same
for every N and by default covers N = 131072 (slowest wavelength >= 4 x 131072 bars;
`tsflash.model.rotary`). Attention always runs through `tsflash.model.attention.sdpa`, which
forces one fused kernel and raises instead of falling back. `ModelConfig` is torch-free, in
`tsflash.model.spec`; it is re-exported here.

Patch tokens (``patch`` = P > 1, PatchTST's): the bars enter P at a time, the P x F features of
a patch flattened bar by bar ((B, T, F) reshaped to (B, T/P, P*F)) and projected to d_model by
one linear map; attention, rotary positions (at token level) and the head are the per-bar
model's. A token sees its own patch and the earlier ones, so its logits are the forecast of the
bar that ENDS its patch, from bars up to and including that bar: (B, T, F) -> (B, T/P, 3), the
bars P-1, 2P-1, ..., T-1 (`patch_ends`); targets stay (B, T), and only the patch ends' are scored.
The input projection has P*F inputs: the parameter count depends on P, never on N.

On CUDA the caller wraps forward in `torch.autocast("cuda", dtype=torch.bfloat16)`; logits and the
loss are returned in float32 either way.

CUDA graphs (torch.compile mode "reduce-overhead"): forward creates and writes no tensor that
outlives it. The rotary tables are non-persistent buffers filled by `reserve_positions` (eagerly:
by `tsflash.model.fastpath.prepare` before compiling, or by the first forward that needs more rows) and
only sliced by forward. They used to be a cache filled inside forward: compiled, its tables were
outputs of a CUDA graph, overwritten by the next replay while the cache still held them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from tsflash import atomic
from tsflash.errors import UserError
from tsflash.model import attention
from tsflash.model.spec import ModelConfig

MODEL_FILE_FORMAT = "tsflash.model/1"  # a saved model (`CausalTransformer.save`); the engine's training
# checkpoint (model, optimizer and training state) is tsflash.engine.TRAINING_CHECKPOINT_FORMAT


def masked_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, denominator: float | None = None) -> torch.Tensor:
    """Mean cross-entropy over the positions whose target is not -1: (B, T, C), (B, T) -> scalar.

    denominator : None, the number of such positions; or a fixed number (the trainer's expected
        count), so that every scored position carries the same weight whatever the batch holds.

    In the logits' dtype (float32 from the model, float64 for a float64 model). An all-ignored
    batch gives 0 with a graph, not NaN, and nothing here waits for the device (no boolean
    indexing, no .item()): the training loop never syncs to compute its loss.
    """
    flat = targets.reshape(-1)  # (B*T,)
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), flat.clamp_min(0), reduction="none")  # (B*T,)
    valid = flat != -1
    total = (losses * valid).sum()
    return total / (valid.sum().clamp_min(1) if denominator is None else denominator)


def patch_ends(T: int, patch: int, device=None) -> torch.Tensor:
    """(T/patch,) int64: the window positions whose bars the tokens of a patch model forecast,
    patch - 1, 2 patch - 1, ..., T - 1 (every position for patch 1)."""
    return torch.arange(patch - 1, T, patch, device=device)


def _norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=1e-6)
    return nn.LayerNorm(config.d_model, bias=False)


def rotary_tables(T: int, head_dim: int, base: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (T, head_dim / 2), float32: position t rotates pair i by t * base^(-2i/hd)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)  # (hd/2,)
    angles = torch.arange(T, device=device, dtype=torch.float32)[:, None] * inv_freq  # (T, hd/2)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, T, H, hd) by position; half-split pairing (x[..., i], x[..., i + hd/2]).
    cos, sin: (T, hd/2), from `rotary_tables`."""
    cos, sin = cos[:, None, :], sin[:, None, :]  # (T, 1, hd/2): the same angle for every head
    x1, x2 = x.float().chunk(2, dim=-1)  # (B, T, H, hd/2) each
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, T, H, hd)
    return out.to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.backend_name = config.attention_backend
        self.backend_used: str | None = None  # set on every forward: the kernel that was forced

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, C // self.n_heads).unbind(2)  # (B, T, H, hd) each
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # The kernels take (B, H, T, hd) with any strides: q, k, v stay (B, T, H, hd) in memory, as
        # they come out of the projection (rotary reads and writes rows in order; the output comes
        # back in q's layout, so the head merge below is a view, not a copy). The head-major layout
        # cost a transposing copy per layer: compiled, the GPU's step at N=512 went from 13.8 to 12.7 ms.
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd) views
        # `auto` decides at this shape unless `tsflash.model.fastpath.prepare` pinned the kernel already
        backend = attention.resolve_backend(self.backend_name, q.device, q.dtype, q.shape[-1], shape=(B, self.n_heads, T))
        y = attention.sdpa(q, k, v, backend)  # (B, H, T, hd)
        self.backend_used = backend
        return self.proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.up = nn.Linear(config.d_model, config.mlp_ratio * config.d_model, bias=False)
        self.down = nn.Linear(config.mlp_ratio * config.d_model, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm1, self.norm2 = _norm(config), _norm(config)
        self.attn = CausalSelfAttention(config)
        self.mlp = MLP(config)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn(self.norm1(x), cos, sin))
        return x + self.drop(self.mlp(self.norm2(x)))


class CausalTransformer(nn.Module):
    """Per-position direction classifier. Position t sees bars 0..t only (causal attention).

    forward(x (B, T, F), targets (B, T) long with -1 = ignore | None, loss_denominator=None)
        -> (logits (B, T/P, n_classes) float32 (float64 for a float64 model), P = config.patch:
                the bars at `patch_ends(T, P)`, i.e. (B, T, n_classes) for P = 1,
            loss: cross-entropy over the patch ends' targets != -1, divided by their count or
                by loss_denominator (`masked_cross_entropy`) | None)
    T must be a multiple of P. Class indices: 0 = down, 1 = flat, 2 = up.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config.validate()
        self.inp = nn.Linear(config.patch * config.n_features, config.d_model, bias=False)  # a patch's P x F -> d
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = _norm(config)
        self.head = nn.Linear(config.d_model, config.n_classes, bias=True)
        # rotary cos, sin (positions, hd/2) float32 for the longest window so far (`reserve_positions`);
        # not saved: a function of the config
        empty = torch.empty(0, config.head_dim // 2, dtype=torch.float32)
        self.register_buffer("rope_cos", empty, persistent=False)
        self.register_buffer("rope_sin", empty.clone(), persistent=False)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith(("attn.proj.weight", "mlp.down.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @property
    def attention_backend_used(self) -> str | None:
        """The kernel forced in the last forward ("flash", "cudnn", "efficient", "math"); None before."""
        used = {b.attn.backend_used for b in self.blocks}
        assert len(used) == 1, used
        return used.pop()

    def prove_kernel(self, x: torch.Tensor) -> dict:
        """Run one no-grad forward under the profiler; return {"forced", "observed"} for a manifest.

        "observed" lists the SDPA kernels named in the profiler's op trace. Raises
        AttentionKernelError if anything other than the forced kernel ran. Call it inside the same
        autocast context as training so the dtype (and hence the kernel) is the same.
        """
        with torch.no_grad(), attention.observe_kernels() as seen:
            self(x)
        forced = self.attention_backend_used
        report = {"forced": forced, "observed": sorted(seen)}
        if forced != attention.REFERENCE and set(seen) != {forced}:
            raise attention.AttentionKernelError(f"forced attention kernel {forced!r} but the profiler saw {sorted(seen)}")
        return report

    def reserve_positions(self, T: int, device: torch.device | None = None) -> None:
        """Fill the rotary tables for windows of up to T bars on `device` (default: the model's).
        Call it outside compiled code before compiling (tsflash.model.fastpath.prepare does, with the
        cell's N); a forward with a longer window, or on another device, calls it itself."""
        device = self.inp.weight.device if device is None else device
        self.rope_cos, self.rope_sin = rotary_tables(T, self.config.head_dim, self.config.rotary_base, device)

    def rotary(self, T: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of positions 0..T-1 on `device`, (T, hd/2) float32 each: the first T rows of the
        reserved tables (a row does not depend on the table's length). A model cast to float64
        gets its float32 tables back."""
        cos = self.rope_cos
        if cos.shape[0] < T or cos.device != device or cos.dtype != torch.float32:
            reserve = self.reserve_positions
            if torch.compiler.is_compiling():  # traced by torch.compile: fill them eagerly, never inside a graph
                reserve = torch.compiler.disable(reserve)
            reserve(T, device)
        return self.rope_cos[:T], self.rope_sin[:T]  # (T, hd/2) each

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None, loss_denominator: float | None = None):
        B, T, Fdim = x.shape
        P = self.config.patch
        if Fdim != self.config.n_features:
            raise UserError(f"model input must have n_features={self.config.n_features} per bar, got shape {tuple(x.shape)}")
        if T % P:
            raise UserError(f"model input must be whole patches of patch={P} bars, got {T} bars")
        cos, sin = self.rotary(T // P, x.device)  # (T/P, hd/2) each: positions count tokens
        # (B, T/P, P*F): a patch's bars in order, each bar's F features together; a view for P = 1
        h = self.inp(x.reshape(B, T // P, P * Fdim))  # (B, T/P, C) in the compute dtype: bf16 under CUDA autocast
        if self.config.residual == "param":  # float32 even under bf16 autocast (float64 models stay float64)
            h = h.to(self.inp.weight.dtype)
        for block in self.blocks:
            h = block(h, cos, sin)  # (B, T/P, C)
        logits = self.head(self.norm(h))  # (B, T/P, 3)
        logits = logits if logits.dtype == torch.float64 else logits.float()  # float32 unless a float64 model
        if targets is None:
            return logits, None
        if P > 1:
            targets = targets[:, P - 1 :: P]  # (B, T/P): the bars at the patch ends
        return logits, masked_cross_entropy(logits, targets, loss_denominator)

    # ---- checkpoints: config travels with the weights --------------------------------------------

    def save(self, path: str | os.PathLike) -> Path:
        """Atomically write {format, config, state_dict} (tensors and plain types only)."""
        path = Path(path)
        state = {k: v.detach().cpu() for k, v in self.state_dict().items()}
        with atomic.atomic_path(path) as tmp:
            torch.save({"format": MODEL_FILE_FORMAT, "config": dataclasses.asdict(self.config), "state_dict": state}, tmp)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, map_location="cpu", expect_config: ModelConfig | None = None) -> CausalTransformer:
        """Rebuild the model from a checkpoint written by `save` (torch.load with weights_only=True).

        `expect_config`: the config the caller will use; a different stored config is an error
        naming the fields that differ. A state dict that does not fit the stored config is an error too.
        """
        path = Path(path)
        if not path.exists():
            raise UserError(f"model checkpoint not found: {path}")
        try:
            blob = torch.load(path, map_location=map_location, weights_only=True)
        except Exception as exc:  # pickle errors of all kinds: not a checkpoint we can trust
            raise UserError(f"model checkpoint {path} cannot be loaded with weights_only=True: {exc}") from None
        if not isinstance(blob, dict) or blob.get("format") != MODEL_FILE_FORMAT:
            got = blob.get("format") if isinstance(blob, dict) else type(blob).__name__
            raise UserError(f"model checkpoint {path} must have format {MODEL_FILE_FORMAT!r}, got {got!r}")
        known = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(blob["config"]) - known)
        if unknown:
            raise UserError(f"model checkpoint {path} has config keys this ModelConfig lacks: {unknown}")
        config = ModelConfig(**blob["config"])
        if expect_config is not None and expect_config != config:
            diff = {
                f: (getattr(config, f), getattr(expect_config, f))
                for f in sorted(known)
                if getattr(config, f) != getattr(expect_config, f)
            }
            raise UserError(
                f"model checkpoint {path} was saved with a different config; (saved, expected) per field: {diff}"
            )
        model = cls(config)
        own = model.state_dict()
        saved = blob["state_dict"]
        missing = sorted(set(own) - set(saved))
        unexpected = sorted(set(saved) - set(own))
        shapes = [f"{k}: saved {tuple(saved[k].shape)} vs model {tuple(own[k].shape)}" for k in own if k in saved and saved[k].shape != own[k].shape]
        if missing or unexpected or shapes:
            raise UserError(
                f"model checkpoint {path} does not match its config: missing {missing}, "
                f"unexpected {unexpected}, shape mismatches {shapes}"
            )
        model.load_state_dict(saved)
        return model.to(map_location) if isinstance(map_location, (str, torch.device)) else model
