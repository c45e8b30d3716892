"""Causal transformer over per-bar features (to be completed by the model issue)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelConfig:
    n_features: int  # per-bar input features F
    n_classes: int = 3  # down / flat / up
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0  # residual/MLP dropout only: attention dropout would force SDPA's MATH path on CPU
    attention_backend: str = "auto"  # auto | cudnn | flash | efficient | math
    rope_base: float = 10000.0
