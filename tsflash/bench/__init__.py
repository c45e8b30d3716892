"""Benchmarks (split by the layout work)."""
