"""tsflash: does a longer context help a causal transformer forecast BTC direction?

Public API (see README):
    CausalTransformer, ModelConfig   -- the model (tsflash.model.transformer)
    load_bars                        -- bars from the canonical store (tsflash.data.store)
    load_config                      -- experiment presets (tsflash.config)
"""

__version__ = "0.1.0"

__all__ = ["CausalTransformer", "ModelConfig", "load_bars", "load_config", "__version__"]


def __getattr__(name):  # lazy: `import tsflash` must not import torch for the data CLI
    if name in ("CausalTransformer", "ModelConfig"):
        from tsflash.model import transformer as model

        return getattr(model, name)
    if name == "load_bars":
        from tsflash.data.store import load_bars

        return load_bars
    if name == "load_config":
        from tsflash.config import load_config

        return load_config
    raise AttributeError(f"module 'tsflash' has no attribute {name!r}")
