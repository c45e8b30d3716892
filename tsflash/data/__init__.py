"""Bars in and out: the canonical Parquet store (`store`), importing Binance archives and Parquet
(`ingest`), fetching them with checksums (`fetch`), a compact lossless transport form
(`transport`), and the controls' synthetic markets (`synthetic`); each store folder's manifest of its files (`_manifest`) and the
on-demand check behind `tsflash data verify` (`_verify`). Torch-free."""

from tsflash._exports import lazy_exports

_EXPORTS = {
    "Bars": "store",
    "load_bars": "store",
    "find_gaps": "store",
    "list_datasets": "store",
    "import_paths": "ingest",
    "fetch": "fetch",
    "pack_store": "transport",
    "unpack": "transport",
    "random_walk_bars": "synthetic",
    "iid_bars": "synthetic",
    "long_memory_bars": "synthetic",
    "regime_bars": "synthetic",
    "synthetic_bars": "synthetic",
    "parse_source": "synthetic",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
