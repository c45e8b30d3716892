"""The causal transformer (`transformer`), the one place that chooses, runs and proves its fused
attention kernel (`attention`), a cell's model made fast before its first step (`fastpath`), and
the FLOPs rule behind every throughput figure (`flops`)."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "CausalTransformer": "transformer", "ModelConfig": "transformer", "MODEL_FILE_FORMAT": "transformer",
    "masked_cross_entropy": "transformer",
    "sdpa": "attention", "AttentionKernelError": "attention", "observe_kernels": "attention",
    "prepare": "fastpath", "flops_per_token": "flops",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
