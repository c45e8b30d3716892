"""The rotary base and how far it covers: which base a model uses and its slowest wavelength.

Pair i of a head's channels turns by base^(-2i/head_dim) radians per bar, so the slowest pair
repeats after 2 pi base^((head_dim - 2)/head_dim) bars. The cover rule: that wavelength is at least
ROTARY_COVER times every context length N, so that no two positions within a window look alike to
the slowest pair (the old fixed base 10000 gave about 47,000 bars at head size 64: positions
aliased within N = 131072). The automatic base (`rope_base = 0`) covers N = ROTARY_AUTO_LONGEST,
the same for every N.

Plain maths, no torch: a config is checked without it. The tables a forward reads (cos, sin per
position) are tensors, and are built in `tsflash.model.transformer.rotary_tables`.
"""

from __future__ import annotations

import math

ROTARY_AUTO_LONGEST = 131072  # the longest context the automatic base covers
ROTARY_COVER = 4  # slowest wavelength >= ROTARY_COVER x N


def rotary_wavelength(head_dim: int, base: float) -> float:
    """Slowest rotary wavelength in bars: pair i turns by base^(-2i/head_dim) per bar, and the
    slowest pair (i = head_dim/2 - 1) repeats after 2 pi base^((head_dim - 2)/head_dim) bars."""
    return 2 * math.pi * base ** ((head_dim - 2) / head_dim)


def rotary_base_for(head_dim: int, longest: int = ROTARY_AUTO_LONGEST) -> float:
    """The smallest base, rounded up to 2 significant digits, whose slowest wavelength is at least
    ROTARY_COVER * longest bars. A head size of 2 has one pair, which turns 1 rad per bar whatever
    the base: no base covers anything, and 10000 is returned (the config rule then says so)."""
    if head_dim <= 2:
        return 10000.0
    exact = (ROTARY_COVER * longest / (2 * math.pi)) ** (head_dim / (head_dim - 2))
    step = 10 ** (math.floor(math.log10(exact)) - 1)
    return float(math.ceil(exact / step) * step)


def rotary_base(head_dim: int, rope_base: float) -> float:
    """The base a model uses: `rope_base`, or the automatic one when it is 0."""
    return float(rope_base) if rope_base else rotary_base_for(head_dim)


def rotary_covers(head_dim: int, base: float, n: int) -> bool:
    """The cover rule: the slowest wavelength at this head size and base is >= ROTARY_COVER * n."""
    return rotary_wavelength(head_dim, base) >= ROTARY_COVER * n
