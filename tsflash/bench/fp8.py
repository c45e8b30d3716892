"""FP8 attention precision oracle, with and without incoherent processing (random Hadamard).

The bf16 oracle (`tsflash.bench.precision.bench_precision`) measures the fused kernel against float64. Here
q, k, v are first quantised to an 8-bit float, as FlashAttention-3 does on Hopper, then measured
the same way: against the float64 reference attention, and down to the model's up/flat/down
decisions.

Formats (`FORMATS`)
    bf16   no quantisation: the bf16 oracle's own path, the control row
    e4m3   torch.float8_e4m3fn: 3 mantissa bits, max finite 448 (FA3's choice for q, k, v)
    e5m2   torch.float8_e5m2: 2 mantissa bits, max finite 57344 (more range, less precision)

Per-block scaling
    One scale per block of `block` = 64 consecutive tokens x the whole head_dim, per (batch,
    head), for q, k and v alike (FA3 keeps one scalar per tile). The block is multiplied by
    scale = 2^floor(log2(fmax / amax)), so that its largest magnitude lands in (fmax/2, fmax],
    rounded to the format (nearest, ties to even; float64 inputs go through float32 first), and
    dequantised as value / scale into bf16 for the fused kernel the bf16 oracle uses. The scale
    is amax-based as in FA3, rounded down to a power of two: for a floating-point format that
    costs nothing (relative precision does not depend on the scale), and it makes dequantisation
    into bf16 exact (an exponent shift of a significand of at most 4 bits), so the measured error
    is the FP8 rounding alone. An all-zero block has scale 1; with N < block the whole sequence
    is one block. Blocks along the tokens, per (batch, head), e.g. N = 256::

        tokens   0 .. 63 | 64 .. 127 | 128 .. 191 | 192 .. 255
        scale      s0    |    s1     |     s2     |     s3        (x head_dim channels each)

    What this emulation leaves out: a real FP8 kernel also rounds the softmax probabilities P
    to e4m3 before P v, and applies the scales to its float32 accumulators; here the kernel keeps
    P in its own precision. The errors below are therefore those of quantised q, k, v alone, a
    lower bound for an FP8 kernel.

Modes (`MODES`)
    naive        quantise q, k, v as they are.
    rotated      q <- q R and k <- k R before quantisation, with R = H diag(s) / sqrt(hd): H the
                 Sylvester-Hadamard matrix of size head_dim (a power of two), s random signs
                 (seeded). R is orthogonal, so (q R)(k R)^T = q k^T in exact arithmetic; the
                 rotation spreads an outlier channel's energy over all head_dim channels, so the
                 rounding error of the q.k sum is no longer dominated by one large product.
    rotated_qkv  also v <- v R, and the output multiplied by R^T (optional, for the record).
    v is not rotated by default: it enters the output linearly (out = P v), and in a
    floating-point format the relative rounding error of an element does not depend on its
    magnitude, so an orthogonal rotation of v leaves the expected Frobenius error of P v the
    same while costing one more head_dim x head_dim product on the output. `rotated_qkv`
    measures that claim (on CPU: the same Frobenius error to within noise).

Inputs (`INPUTS`)
    gaussian  q, k, v ~ N(0, 1), float64, shape (batch, heads, N, head_dim)
    outliers  the same with `outlier_channels` = 4 head channels (the same ones in q, k and v,
              as the outlier features of trained transformers are) scaled by factors uniform in
              `outlier_scale` = (10, 50) (the FA3 paper's own test adds large values to a sparse
              set of entries instead)
    model     the model's own q, k, v (after rotary positions), every layer, captured from the
              float64 reference model on the model inputs x; stacked as (layers*batch, heads, N, hd)

Measures, per (N, input, format, mode), against `attention.reference_attention` (float64):
    {mode}_max_rel = max|err| / max|ref| and {mode}_fro_rel = ||err|| / ||ref||
    (`tsflash.bench.precision.relative_errors`); on the model rows the decision flips, counted as in
    `bench_precision`: the model under bf16 autocast whose attention runs the FP8 path vs the
    float64 model with exact attention, {mode}_flips = positions whose argmax class differs
    ({mode}_flip_fraction of all positions). rotation_helped = rotated_fro_rel < naive_fro_rel,
    rotation_gain = naive_fro_rel / rotated_fro_rel.
Model inputs x: real (normalised) features when given (their last N rows), else x ~ N(0, 1).
`native_fp8_probe` asks torch whether it runs attention on float8 tensors at all.
"""

from __future__ import annotations

import logging
import math
import os
import re
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from tsflash.bench.common import environment, format_table, time_call
from tsflash.bench.precision import float64_reference_copy, relative_errors
from tsflash.device import free_memory, is_oom
from tsflash.errors import UserError
from tsflash.model import attention as attn
from tsflash.model.attention import sdpa as fused_sdpa  # bound at import: `attention_override` swaps the module's name
from tsflash.report import markdown

if TYPE_CHECKING:  # at run time _prepare_run imports it, where it is used
    from tsflash.model.transformer import CausalTransformer

log = logging.getLogger(__name__)

FORMATS = {"bf16": None, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MODES = ("naive", "rotated", "rotated_qkv")
INPUTS = ("gaussian", "outliers", "model")
DEFAULT_BLOCK = 64  # tokens per scale (x head_dim, per batch and head)


# ---- checks ------------------------------------------------------------------------------------------


def _check_choice(values, known, what: str) -> list[str]:
    values = list(values)
    bad = [v for v in values if v not in known]
    if bad or not values:
        raise UserError(f"{what} must be a non-empty subset of {', '.join(known)}, got {values!r}")
    return values


def parse_formats(text: str, flag: str = "--formats") -> list[str]:
    """'bf16,e4m3,e5m2' -> ['bf16', 'e4m3', 'e5m2'] (order kept, duplicates dropped)."""
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    return _check_choice(names, tuple(FORMATS), flag)


def check_power_of_two(head_dim: int) -> int:
    if head_dim < 1 or head_dim & (head_dim - 1):
        raise UserError(f"the Hadamard rotation needs head_dim a power of two, got head_dim={head_dim}")
    return head_dim


# ---- quantisation ------------------------------------------------------------------------------------


def _format(fmt: str) -> torch.dtype | None:
    if fmt not in FORMATS:
        raise UserError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return FORMATS[fmt]


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """(..., N, d) -> (..., N / b, b, d) with b = min(block, N)."""
    n, d = x.shape[-2:]
    b = min(block, n)
    if b < 1 or n % b:
        raise UserError(f"the quantisation block must be >= 1 and divide N, got block={block}, N={n}")
    return x.reshape(*x.shape[:-2], n // b, b, d)


def quantise(x: torch.Tensor, fmt: str, block: int = DEFAULT_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block FP8 quantisation of x (..., N, d) (see the module doc).

    Returns (x8 of shape (..., N, d) in the format's dtype, scale of shape (..., N / block) float32,
    a power of two); x ~= x8 / scale block by block.
    """
    dtype = _format(fmt)
    if dtype is None:
        raise UserError(f"quantise needs an 8-bit format (e4m3 or e5m2), got {fmt!r}")
    fmax = torch.finfo(dtype).max
    xb = _blocks(x, block)  # (..., nb, b, d)
    amax = xb.abs().amax(dim=(-2, -1)).double()  # (..., nb)
    exp = torch.floor(torch.log2(fmax / amax)).clamp(-126, 127)
    exp = torch.where(amax > 0, exp, torch.zeros_like(exp))
    exp = exp - (amax * torch.exp2(exp) > fmax).double()  # guard a log2 rounded up
    scale = torch.exp2(exp).float()  # (..., nb) exact powers of two
    scaled = xb.float() if x.dtype != torch.float64 else xb
    scaled = (scaled * scale.to(scaled.dtype)[..., None, None]).float()  # exact: power-of-two scale
    return scaled.to(dtype).reshape(x.shape), scale


def dequantise(x8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """x8 (..., N, d), scale (..., N / b) -> x8 / scale in `dtype`, (..., N, d); exact for bf16 and wider."""
    block = x8.shape[-2] // scale.shape[-1]
    xb = _blocks(x8, block).float() / scale[..., None, None]  # (..., nb, b, d)
    return xb.reshape(x8.shape).to(dtype)


def fake_quantise(x: torch.Tensor, fmt: str, block: int = DEFAULT_BLOCK) -> torch.Tensor:
    """x rounded through `fmt` (per-block scaled), returned in bf16 for the fused kernel."""
    if _format(fmt) is None:
        return x.to(torch.bfloat16)
    return dequantise(*quantise(x, fmt, block))


# ---- rotation ----------------------------------------------------------------------------------------


def random_hadamard(head_dim: int, seed: int = 0) -> torch.Tensor:
    """R = H diag(s) / sqrt(head_dim), float64 (head_dim, head_dim): orthogonal, R R^T = I.

    H is the Sylvester-Hadamard matrix ([[1, 1], [1, -1]] Kronecker powers), s random +-1 signs
    from a CPU generator seeded with `seed`.
    """
    check_power_of_two(head_dim)
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < head_dim:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)  # (2m, 2m)
    g = torch.Generator(device="cpu").manual_seed(seed)
    signs = torch.randint(0, 2, (head_dim,), generator=g, dtype=torch.float64) * 2 - 1  # (hd,)
    return h * signs / math.sqrt(head_dim)  # columns scaled: H @ diag(s)


def fp8_attention(
    q, k, v, fmt: str, mode: str, kernel: str, block: int = DEFAULT_BLOCK, rotation: torch.Tensor | None = None
) -> torch.Tensor:
    """Causal attention with q, k, v rounded through `fmt`, run by the fused `kernel` in bf16.

    q, k, v: (B, H, N, hd), any float dtype -> (B, H, N, hd) bf16. `rotation` (hd, hd) is needed
    for the rotated modes (see the module doc).
    """
    _check_choice([mode], MODES, "mode")
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    with torch.autocast(q.device.type, enabled=False):  # the rotation must not run in bf16
        q, k, v = (t.to(compute) for t in (q, k, v))  # (B, H, N, hd)
        if mode != "naive":
            if rotation is None:
                raise UserError(f"mode {mode!r} needs a rotation matrix (random_hadamard)")
            r = rotation.to(q.device, compute)  # (hd, hd)
            q, k = q @ r, k @ r
            v = v @ r if mode == "rotated_qkv" else v
        qq, kq, vq = (fake_quantise(t, fmt, block) for t in (q, k, v))
        out = fused_sdpa(qq, kq, vq, kernel)  # (B, H, N, hd) bf16
        if mode == "rotated_qkv":
            out = (out.to(compute) @ r.T).to(torch.bfloat16)
    return out


# ---- the model's attention: capture and substitute ---------------------------------------------------


@contextmanager
def attention_override(fn):
    """Inside the block, the model's attention (`tsflash.model.attention.sdpa`) is fn(q, k, v, backend, dropout_p=0.0).

    Resolve the model's kernel (`attention.resolve_backend`) before entering: auto's numerical
    check calls the same name and would otherwise check `fn`.
    """
    saved = attn.sdpa
    attn.sdpa = fn
    try:
        yield
    finally:
        attn.sdpa = saved


def capture_attention(model, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """One no-grad forward of `model` on x (B, N, F); returns (logits (B, N, C), (q, k, v, out)).

    q, k, v, out: every layer's attention inputs (after rotary positions) and output, stacked as
    (layers*B, H, N, hd) in the model's dtype, each in the memory layout the kernel saw
    ((B, N, H, hd) rows: the same float64 reference gives the same bits).
    """
    captured = []

    def record(q, k, v, backend, dropout_p=0.0):
        out = fused_sdpa(q, k, v, backend, dropout_p)
        captured.append((q, k, v, out))
        return out

    with torch.no_grad(), attention_override(record):
        logits, _ = model(x)

    def stack(tensors):  # (layers*B, H, N, hd) views of (layers*B, N, H, hd) memory
        return torch.cat([t.transpose(1, 2) for t in tensors]).transpose(1, 2)

    return logits, tuple(stack(t) for t in zip(*captured, strict=True))


def decision_flips(model, x, exact_logits, fmt: str, mode: str, block: int, rotation) -> dict:
    """Flips of the model's argmax decisions under bf16 autocast with FP8 attention vs `exact_logits`."""

    def fp8(q, k, v, backend, dropout_p=0.0):
        return fp8_attention(q, k, v, fmt, mode, backend, block, rotation)

    with torch.no_grad(), torch.autocast(x.device.type, dtype=torch.bfloat16), attention_override(fp8):
        fast, _ = model(x)  # (B, N, C)
    flips = fast.argmax(-1) != exact_logits.argmax(-1)  # (B, N)
    return {
        "flips": int(flips.sum()),
        "flip_fraction": float(flips.double().mean()),
        "logit_max_abs_err": float((fast.double() - exact_logits).abs().max()),
    }


# ---- the bench ---------------------------------------------------------------------------------------


def synthetic_qkv(
    kind: str,
    shape: tuple[int, int, int, int],
    generator: torch.Generator,
    outlier_channels: int = 4,
    outlier_scale: tuple[float, float] = (10.0, 50.0),
):
    """q, k, v float64 (B, H, N, hd) on the CPU for input kind 'gaussian' or 'outliers'.

    From the same generator state, 'outliers' gives the 'gaussian' q, k, v with the outlier
    channels scaled (the bench re-seeds per kind, so the two rows differ only by the outliers).
    """
    q, k, v = (torch.randn(*shape, generator=generator, dtype=torch.float64) for _ in range(3))
    if kind == "outliers":
        hd = shape[-1]
        if not 1 <= outlier_channels <= hd:
            raise UserError(f"outlier_channels must be in [1, head_dim={hd}], got {outlier_channels}")
        lo, hi = outlier_scale
        channels = torch.randperm(hd, generator=generator)[:outlier_channels]
        factors = lo + (hi - lo) * torch.rand(outlier_channels, generator=generator, dtype=torch.float64)
        for t in (q, k, v):
            t[..., channels] *= factors  # the same outlier channels in q, k and v
    return q, k, v


def attention_errors(q, k, v, ref, formats, modes, kernel: str, block: int, rotation) -> dict:
    """{(format, mode): {"max_rel", "fro_rel"}} of `fp8_attention` on q, k, v vs the float64 `ref`."""
    errors = {}
    with torch.no_grad():
        for fmt in formats:
            for mode in modes:
                out = fp8_attention(q, k, v, fmt, mode, kernel, block, rotation)
                errors[fmt, mode] = relative_errors(out, ref)
    return errors


def _rows(n: int, kind: str, errors: dict, flips: dict | None) -> list[dict]:
    """One row per format: {mode}_{measure} columns, and whether the rotation helped."""
    rows: dict[str, dict] = {}
    for (fmt, mode), measures in errors.items():
        row = rows.setdefault(fmt, {"n": n, "input": kind, "format": fmt, "status": "ok"})
        row.update({f"{mode}_{key}": value for key, value in measures.items()})
        row.update({f"{mode}_{key}": value for key, value in (flips or {}).get((fmt, mode), {}).items()})
    for row in rows.values():
        if "naive_fro_rel" in row and "rotated_fro_rel" in row:
            row["rotation_helped"] = row["rotated_fro_rel"] < row["naive_fro_rel"]
            row["rotation_gain"] = row["naive_fro_rel"] / row["rotated_fro_rel"] if row["rotated_fro_rel"] else None
    return list(rows.values())


@dataclass
class Fp8Settings:
    """What `bench_precision_fp8` measures; the defaults are the published run's."""

    formats: tuple[str, ...] = tuple(FORMATS)  # bf16 = the bf16 oracle's path, the control row
    modes: tuple[str, ...] = ("naive", "rotated")  # add "rotated_qkv" to also rotate v
    inputs: tuple[str, ...] = INPUTS
    block: int = DEFAULT_BLOCK  # tokens per scale (x head_dim, per batch and head); a power of two
    heads: int = 4  # synthetic q, k, v: (batch, heads, N, head_dim)
    head_dim: int = 64
    batch: int = 1  # also the batch of gaussian model inputs
    backend: str = "auto"  # fused kernel of the synthetic rows and of a fresh model
    seed: int = 0  # synthetic inputs (seed + N), rotation signs, a fresh model's weights
    outlier_channels: int = 4  # channels scaled in the "outliers" input ...
    outlier_scale: tuple[float, float] = (10.0, 50.0)  # ... by factors uniform in this range

    def validate(self) -> Fp8Settings:
        self.formats = tuple(_check_choice(self.formats, tuple(FORMATS), "formats"))
        self.modes = tuple(_check_choice(self.modes, MODES, "modes"))
        self.inputs = tuple(_check_choice(self.inputs, INPUTS, "inputs"))
        b = self.block
        if isinstance(b, bool) or not isinstance(b, int) or b < 1 or b & (b - 1):
            raise UserError(f"block must be a power of two >= 1 (it must divide every N), got block={b!r}")
        if self.modes != ("naive",) and self.inputs != ("model",):
            check_power_of_two(self.head_dim)
        return self


@dataclass
class _Run:
    """The bench's fixed objects: the model, its float64 twin, the kernels, the rotations."""

    model: CausalTransformer
    reference_model: torch.nn.Module
    kernel: str  # for the synthetic rows
    model_kernel: str  # the model's own, resolved before any attention_override (auto's check uses that name)
    rotation: torch.Tensor | None  # (head_dim, head_dim)
    model_rotation: torch.Tensor | None  # (model head_dim, model head_dim)


def _length_rows(n: int, x: torch.Tensor, s: Fp8Settings, run: _Run) -> list[dict]:
    """Every (input, format) row at one N; model inputs x (B, N, F)."""
    rows = []
    for kind in (k for k in s.inputs if k != "model"):
        g = torch.Generator(device="cpu").manual_seed(s.seed + n)
        shape = (s.batch, s.heads, n, s.head_dim)
        q, k, v = (t.to(x.device) for t in synthetic_qkv(kind, shape, g, s.outlier_channels, s.outlier_scale))
        ref = attn.reference_attention(q, k, v)  # (B, H, N, hd) float64
        rows += _rows(
            n, kind, attention_errors(q, k, v, ref, s.formats, s.modes, run.kernel, s.block, run.rotation), None
        )
        del q, k, v, ref
    if "model" in s.inputs:
        exact, (q, k, v, ref) = capture_attention(run.reference_model, x.double())  # float64, (L*B, H, N, hd)
        errors = attention_errors(q, k, v, ref, s.formats, s.modes, run.model_kernel, s.block, run.model_rotation)
        del q, k, v, ref
        flips = {
            (f, m): decision_flips(run.model, x, exact, f, m, s.block, run.model_rotation)
            for f in s.formats
            for m in s.modes
        }
        rows += _rows(n, "model", errors, flips)
    return rows


def _model_inputs(features, n: int, batch: int, n_features: int, seed: int, device) -> torch.Tensor | None:
    """(batch, N, F) model inputs: the last N rows of `features` (batch 1), or N(0, 1); None if too short."""
    if features is None:
        g = torch.Generator(device="cpu").manual_seed(seed + n + 1)
        return torch.randn(batch, n, n_features, generator=g).to(device)
    if len(features) < n:
        return None
    return features[-n:].float()[None].to(device)  # (1, N, F)


def _prepare_run(model, device, s: Fp8Settings, n_features: int) -> tuple[_Run, str]:
    """The model (a CausalTransformer, a checkpoint path, or None for a fresh seeded one) and the rest."""
    from tsflash.model.transformer import CausalTransformer, ModelConfig

    if model is None:
        torch.manual_seed(s.seed)
        model, name = CausalTransformer(ModelConfig(n_features=n_features, attention_backend=s.backend)), "fresh"
    elif isinstance(model, (str, os.PathLike)):
        model, name = CausalTransformer.load(model, map_location=device), str(model)
    else:
        name = "given"
    model = model.to(device).eval()
    hd = model.config.head_dim
    rotate = s.modes != ("naive",)
    run = _Run(
        model=model,
        reference_model=float64_reference_copy(model),
        kernel=attn.resolve_backend(s.backend, device, torch.bfloat16, s.head_dim),
        model_kernel=attn.resolve_backend(model.config.attention_backend, device, torch.bfloat16, hd),
        rotation=random_hadamard(s.head_dim, s.seed) if rotate and s.inputs != ("model",) else None,
        model_rotation=random_hadamard(hd, s.seed) if rotate and "model" in s.inputs else None,
    )
    return run, name


def bench_precision_fp8(
    lengths: list[int],
    device: torch.device,
    settings: Fp8Settings | None = None,
    model=None,
    features: torch.Tensor | None = None,
    n_features: int = 16,
    record_errors: bool = False,
) -> dict:
    """FP8 (and bf16) attention vs float64, naive and rotated, for outputs and decisions (module doc).

    `model`: a CausalTransformer, a checkpoint path (`CausalTransformer.load`), or None for a
    fresh seeded model with `n_features` inputs. `features` (T, F): real, normalised model inputs;
    x = their last N rows (a length above T is recorded as status "skipped"); default
    x ~ N(0, 1) of shape (batch, N, F). Out of memory at one N is recorded as status "oom" and
    the next N runs; with `record_errors` any other failure at one N is recorded as status
    "error" with its first line (for unattended runs) instead of raised.
    Returns {"kind", "environment", "settings", "auto_choice", "rows"}; rows as in the module doc.
    """
    s = (settings or Fp8Settings()).validate()
    run, name = _prepare_run(model, device, s, n_features)  # a rotation needs the model's head_dim a power of two
    config = run.model.config
    if features is not None and (features.dim() != 2 or features.shape[1] != config.n_features):
        raise UserError(
            f"features must have shape (T, n_features={config.n_features}) for the model, got {tuple(features.shape)}"
        )
    rows = []
    for n in lengths:
        try:
            x = _model_inputs(features, n, s.batch, config.n_features, s.seed, device)
            if x is None:
                assert features is not None  # only too few feature rows give no inputs
                rows.append({"n": n, "status": "skipped", "error": f"features have {len(features)} rows < N={n}"})
                continue
            rows += _length_rows(n, x, s, run)
        except Exception as exc:  # OOM at the largest N is a result, not a crash
            if not (is_oom(exc) or record_errors):
                raise
            status = "oom" if is_oom(exc) else "error"
            rows.append({"n": n, "status": status, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
        x = None
        free_memory(device)
        log.info("fp8 precision N=%d done", n)
    return {
        "kind": "precision-fp8",
        "environment": environment(device),
        "settings": asdict(s)
        | {
            "kernel": run.kernel,
            "model_kernel": run.model_kernel,
            "model": name,
            "n_params": run.model.n_params(),
            "model_head_dim": config.head_dim,
            "model_inputs": "gaussian" if features is None else "features (last N rows)",
            "scale": f"per {s.block} tokens x head_dim per (batch, head); power of two, amax -> (fmax/2, fmax]",
        },
        "auto_choice": attn.auto_report(),
        "rows": rows,
    }


# ---- native FP8 attention ----------------------------------------------------------------------------


def _attempt(call) -> dict:
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
        return {"status": "ok"}
    except Exception as exc:  # the exception text is the finding
        return {"status": "unsupported", "error": f"{type(exc).__name__}: {exc}"[:2000]}


def native_fp8_probe(
    device: torch.device, n: int = 32768, heads: int = 4, head_dim: int = 64, batch: int = 1, min_time: float = 0.2
) -> dict:
    """Can this torch run causal attention on float8 q, k, v directly? Time it vs bf16 if so.

    Tries `attention.sdpa` with each fused backend forced (and MATH), for e4m3 and e5m2, and
    torch's experimental `_scaled_dot_product_attention_quantized` (per-head descales) where it
    exists. Records each attempt's exact exception text; `reason` is one line. When one runs on
    CUDA, `timing` holds its forward time and the bf16 cuDNN forward time at the same shape.
    """
    shape = (batch, heads, n, head_dim)
    q, k, v = (torch.randn(*shape, device=device, dtype=torch.bfloat16) for _ in range(3))
    backends = (attn.FUSED_BACKENDS if device.type == "cuda" else ("flash",)) + ("math",)
    calls: dict[str, Callable[..., torch.Tensor] | None] = {}  # called with no arguments
    for fmt in ("e4m3", "e5m2"):
        q8, k8, v8 = (t.to(FORMATS[fmt]) for t in (q, k, v))
        for b in backends:
            calls[f"sdpa {b} {fmt}"] = lambda b=b, q8=q8, k8=k8, v8=v8: fused_sdpa(q8, k8, v8, b)
    fa3 = _activate_fa3()  # torch's low-precision SDPA runs only on a registered FA3 implementation
    try:
        from torch.nn.attention.experimental._scaled_dot_product_attention_quantized import (
            _scaled_dot_product_attention_quantized as quantized,
        )

        ones = torch.ones(batch, heads, device=device)
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        calls["experimental quantized e4m3"] = lambda: quantized(
            q8, k8, v8, is_causal=True, q_descale=ones, k_descale=ones, v_descale=ones
        )
    except ImportError as exc:
        calls["experimental quantized e4m3"] = None
        quantized_missing = f"{type(exc).__name__}: {exc}"
    attempts: dict[str, Any] = {}
    for name, call in calls.items():
        attempts[name] = _attempt(call) if call is not None else {"status": "absent", "error": quantized_missing}
    ok = [name for name, a in attempts.items() if a["status"] == "ok"]
    # one line: the first fused backend's refusal (cuDNN on CUDA), PyTorch's own words where it gave them
    first, why = next(iter(attempts.items()))
    found = re.search(r"dropout_p [\d.]+: (.*?) -- refusing", why["error"])
    why = (found.group(1) if found else why["error"].splitlines()[0])[:240]
    if fa3.get("activated"):
        torch.nn.attention.restore_flash_attention_impl()
    result: dict[str, Any]  # numbers, lists, the attempts' and FA3's dicts
    result = {
        "n": n,
        "shape": list(shape),
        "torch": torch.__version__,
        "fa3": fa3,
        "attempts": attempts,
        "runs": ok,
        "reason": None if ok else f"no call accepted float8 q, k, v (e.g. {first}: {why})",
    }
    if ok and device.type == "cuda":
        fp8_s = time_call(calls[ok[0]], device, min_time)
        bf16_s = time_call(lambda: fused_sdpa(q, k, v, "cudnn"), device, min_time)
        result["timing"] = {
            "fp8_call": ok[0],
            "fp8_fwd_s": fp8_s,
            "bf16_cudnn_fwd_s": bf16_s,
            "speedup": bf16_s / fp8_s,
        }
    return result


def _activate_fa3() -> dict:
    """Try to activate torch's FA3 flash-attention implementation (needed by its FP8 SDPA path);
    which implementations are registered, and the exact error if FA3 cannot be activated."""
    import torch.nn.attention as nn_attention

    if not hasattr(nn_attention, "activate_flash_attention_impl"):
        return {"activated": False, "error": f"torch {torch.__version__} has no activate_flash_attention_impl"}
    out: dict[str, Any] = {"registered": nn_attention.list_flash_attention_impls()}
    try:
        nn_attention.activate_flash_attention_impl("FA3")
        out["activated"] = True
    except Exception as exc:  # a diagnostic: record why, never fail the bench
        out.update(activated=False, error=f"{type(exc).__name__}: {exc}")
    return out


# ---- tables -------------------------------------------------------------------------------------------


def table_columns(result: dict) -> list[tuple[str, str, str]]:
    """(key, header, format spec) per column for `fp8_table` / `markdown_table`."""
    modes = result["settings"]["modes"]
    columns = [("n", "N", ""), ("input", "input", ""), ("format", "format", "")]
    for m in modes:
        columns += [(f"{m}_max_rel", f"{m} max", ".2e"), (f"{m}_fro_rel", f"{m} fro", ".2e")]
    if "naive" in modes and "rotated" in modes:
        columns.append(("helped", "rotation helped", ""))
    columns += [(f"{m}_flip_fraction", f"{m} flips", ".3%") for m in modes]
    return columns + [("status", "status", "")]


def _display_rows(result: dict) -> list[dict]:
    rows = []
    for r in result["rows"]:
        r = dict(r)
        if "rotation_helped" in r:
            gain = f" ({r['rotation_gain']:.2f}x)" if r.get("rotation_gain") else ""
            r["helped"] = ("yes" if r["rotation_helped"] else "no") + gain
        rows.append(r)
    return rows


def fp8_table(result: dict) -> str:
    """Plain-text table of a `bench_precision_fp8` result (the CLI's output)."""
    return format_table(_display_rows(result), table_columns(result))


def markdown_table(result: dict) -> str:
    """The same table in Markdown (for the README); '-' where a value does not apply."""
    columns = table_columns(result)
    rows = [[markdown.format_cell(r.get(k), s) for k, _, s in columns] for r in _display_rows(result)]
    return markdown.markdown_table([h for _, h, _ in columns], rows)
