"""The benchmarks behind `tsflash bench`: what they share, the
timer, the ceilings and the JSON writer (`common`); the bf16-vs-float64 precision oracle the
sweep runs too (`precision`); the attention crossover across N (`attention`); the training
step, its MFU and its profile (`trainstep`); and the FP8 oracle (`fp8`). Each runs on CPU at
tiny sizes (the tests) and on CUDA (the figures); torch is loaded on first use of a name."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "time_call": "common",
    "write_json": "common",
    "environment": "common",
    "format_table": "common",
    "matmul_ceiling": "common",
    "copy_ceiling": "common",
    "bench_precision": "precision",
    "relative_errors": "precision",
    "float64_reference_copy": "precision",
    "PRECISION_COLUMNS": "precision",
    "bench_attention": "attention",
    "crossover": "attention",
    "attention_table": "attention",
    "plot_attention": "attention",
    "bench_train": "trainstep",
    "measure_train_step": "trainstep",
    "train_table": "trainstep",
    "bench_precision_fp8": "fp8",
    "native_fp8_probe": "fp8",
    "Fp8Settings": "fp8",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
