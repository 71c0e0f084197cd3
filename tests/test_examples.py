"""How a documented float is compared with the one a run computes (``tests.examples.same_float``)."""

from __future__ import annotations

from tests.examples import same_float


def test_a_shown_float_holds_to_its_digits_or_to_a_float32_sum_s_rounding() -> None:
    # the same float32 cosines, one BLAS kernel's against another's (OpenBLAS's SkylakeX and Zen sgemv)
    assert same_float(0.8995459079742432, 0.8995458483695984)
    assert same_float(0.003624528646469116, 0.0036245323717594147)  # near 0: rounded at the terms' scale, 1
    assert same_float(-8.30693170428276e-06, -8.306466042995453e-06)
    assert same_float(0.81, 0.8149) and not same_float(0.81, 0.8151)  # to the digits shown
    assert not same_float(0.8995459079742432, 0.8995449)  # a tenth of a digit shown's worth further
    assert not same_float(0.003624528646469116, 0.0036265)
    assert same_float(8.326664924621582, 8.32666) and not same_float(8.326664924621582, 8.3266)  # its size, over 1
