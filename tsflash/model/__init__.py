"""The causal transformer (`transformer`), the one place that chooses, runs and proves its fused
attention kernel (`attention`), a cell's model made fast before its first step (`fastpath`), the
FLOPs rule behind every throughput figure (`flops`), and, torch-free so that a config is checked
without torch, the model's settings, names and shape rule (`spec`) and its rotary base (`rotary`)."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "CausalTransformer": "transformer", "MODEL_FILE_FORMAT": "transformer", "masked_cross_entropy": "transformer",
    "ModelConfig": "spec", "ModelSettings": "spec", "check_shape": "spec",
    "sdpa": "attention", "AttentionKernelError": "attention", "observe_kernels": "attention",
    "prepare": "fastpath", "flops_per_token": "flops", "rotary_base": "rotary",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
