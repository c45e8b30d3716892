"""The studies' own machinery beside the package: the device scripts, the plan's bookkeeping
(`python -m lab.plan`), edition collation and the scripts that wrote `reports/`.

Not installed with tsflash; run from the repository root (`python -m lab.plan ...`, `python lab/x.py`).
Imports go one way: lab imports tsflash, never the reverse (tests/test_layers.py).
"""
