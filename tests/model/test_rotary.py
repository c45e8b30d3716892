"""The rotary base and its cover rule, without torch (the tables are tested in test_model)."""

from __future__ import annotations

import math

import pytest

from tsflash.model.rotary import ROTARY_AUTO_LONGEST, rotary_base, rotary_base_for, rotary_covers, rotary_wavelength


@pytest.mark.parametrize("head_dim", [4, 16, 64])
@pytest.mark.parametrize("n", [512, 32768, ROTARY_AUTO_LONGEST])
def test_the_base_for_n_is_the_smallest_two_digit_base_that_covers_it(head_dim, n):
    base = rotary_base_for(head_dim, n)
    step = 10 ** (math.floor(math.log10(base)) - 1)
    assert rotary_covers(head_dim, base, n) and not rotary_covers(head_dim, base - step, n)
    assert rotary_wavelength(head_dim, base) >= 4 * n


def test_zero_means_the_automatic_base_and_a_head_of_two_is_never_covered():
    assert rotary_base(64, 0.0) == rotary_base_for(64, ROTARY_AUTO_LONGEST) and rotary_base(64, 500.0) == 500.0
    assert rotary_base_for(2) == 10000.0 and not rotary_covers(2, 1e12, 2)  # one pair turns 1 rad per bar
