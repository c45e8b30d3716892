"""The precision oracle: the bf16 fused attention kernel against float64, for attention outputs
and for the model's decisions (the share of positions whose predicted class flips). `tsflash
bench precision` runs it, and the sweep runs it once per run folder (`tsflash.sweep.run`),
importing this module and what it needs only; the FP8 oracle (`tsflash.bench.fp8`) measures
the same way. On CPU (tiny sizes, for tests) and on CUDA; out of memory at one N is a row.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from tsflash.bench.common import check_arguments, environment
from tsflash.device import free_memory, is_oom
from tsflash.model import attention as attn

log = logging.getLogger(__name__)


def relative_errors(out: torch.Tensor, ref: torch.Tensor) -> dict:
    err = out.double() - ref
    return {
        "max_rel": float(err.abs().max() / ref.abs().max()),  # max|err| / max|ref|
        "fro_rel": float(err.norm() / ref.norm()),  # ||err|| / ||ref||
    }


def bench_precision(
    lengths: list[int],
    device: torch.device,
    model_path: Path | None = None,
    n_features: int = 16,
    heads: int = 4,
    head_dim: int = 64,
    backend: str = "auto",
    batch: int = 1,
    seed: int = 0,
) -> dict:  # long: one argument a line and the method in its docstring; one straight pass
    """bf16 fused kernel vs float64, for attention outputs and for the model's decisions.

    Attention: q, k, v ~ N(0, 1) of shape (batch, heads, N, head_dim); the chosen fused backend on
    bf16 copies vs `reference_attention` on the float64 originals (same device).
    Decisions: the model (loaded, or freshly initialised with `n_features` inputs) on x ~ N(0, 1)
    of shape (batch, N, F): bf16 autocast + fused kernel vs a float64 copy of the model whose
    attention is the exact float64 reference; flip fraction = share of positions whose argmax
    class differs.
    """
    from tsflash.model.transformer import CausalTransformer, ModelConfig

    lengths = check_arguments(
        "precision",
        lengths,
        {"n_features": (1, n_features), "heads": (1, heads), "head_dim": (1, head_dim), "batch": (1, batch)},
    )
    if model_path is not None:
        model = CausalTransformer.load(model_path, map_location=device)
    else:
        torch.manual_seed(seed)
        model = CausalTransformer(ModelConfig(n_features=n_features, attention_backend=backend)).to(device)
    model.eval()
    reference_model = float64_reference_copy(model)
    kernel = attn.resolve_backend(backend, device, torch.bfloat16, head_dim)
    rows = []
    for n in lengths:
        row: dict = {"n": n, "backend": kernel}
        g = torch.Generator(device="cpu").manual_seed(seed + n)
        try:
            q, k, v = (
                torch.randn(batch, heads, n, head_dim, generator=g, dtype=torch.float64).to(device) for _ in range(3)
            )
            with torch.no_grad():
                out = attn.sdpa(q.bfloat16(), k.bfloat16(), v.bfloat16(), kernel)
                row.update(
                    {f"attn_{k_}": v_ for k_, v_ in relative_errors(out, attn.reference_attention(q, k, v)).items()}
                )
            del q, k, v, out
            x = torch.randn(batch, n, model.config.n_features, generator=g).to(device)
            # bf16 on every device (not `device.autocast`): the oracle measures bf16 rounding, on CPU too
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
                fast, _ = model(x)  # (B, N, 3)
            with torch.no_grad():
                exact, _ = reference_model(x.double())  # (B, N, 3) float64
            row["model_backend"] = model.attention_backend_used
            row["flip_fraction"] = float((fast.argmax(-1) != exact.argmax(-1)).double().mean())
            row["logit_max_abs_err"] = float((fast.double() - exact).abs().max())
            row["status"] = "ok"
        except Exception as exc:  # OOM at the largest N is a result, not a crash
            if not is_oom(exc):
                raise
            row["status"] = "oom"
        free_memory(device)
        log.info("precision N=%d: %s", n, row)
        rows.append(row)
    return {
        "kind": "precision",
        "environment": environment(device),
        "settings": {
            "heads": heads,
            "head_dim": head_dim,
            "batch": batch,
            "backend": backend,
            "seed": seed,
            "model": str(model_path) if model_path else "fresh",
            "n_params": model.n_params(),
        },
        "auto_choice": attn.auto_report(),
        "rows": rows,
    }


def float64_reference_copy(model):
    """A float64 copy of `model` whose attention is the exact chunked float64 reference."""
    import copy

    ref = copy.deepcopy(model).double()
    for block in ref.blocks:
        block.attn.backend_name = attn.REFERENCE
    return ref


PRECISION_COLUMNS = [
    ("n", "N", ""),
    ("backend", "kernel", ""),
    ("attn_max_rel", "max|err|/max|ref|", ".2e"),
    ("attn_fro_rel", "||err||/||ref||", ".2e"),
    ("flip_fraction", "decision flips", ".4%"),
    ("logit_max_abs_err", "max|dlogit|", ".2e"),
    ("status", "status", ""),
]
