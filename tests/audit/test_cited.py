"""The A/B tests' statistics of audit/cited.py, against figures worked by hand."""

from __future__ import annotations

import math

from audit.cited import MIN_SAMPLE, ArmCited, Cited, two_means, two_proportions


def test_two_proportions_is_the_pooled_z_test() -> None:
    # 60/100 against 45/100: pooled 0.525, se = sqrt(.525 * .475 * .02) = 0.070622, z = 2.124.
    compared = two_proportions(60, 100, 45, 100)
    assert compared.difference is not None and math.isclose(compared.difference, -0.15)
    assert compared.p_value is not None and math.isclose(compared.p_value, 0.03367, rel_tol=1e-3)
    assert compared.significant and compared.verdict.startswith("candidate significantly lower")
    assert not two_proportions(50, 100, 45, 100).significant  # p = 0.48


def test_below_the_minimum_there_is_no_verdict_but_not_enough_data() -> None:
    small = two_proportions(0, MIN_SAMPLE - 1, MIN_SAMPLE - 1, MIN_SAMPLE - 1)
    assert (small.p_value, small.verdict, small.significant) == \
        (None, "not enough data yet", False)
    few = ArmCited("control", Cited(10, 10), calls=MIN_SAMPLE - 1)
    many = ArmCited("candidate", Cited(100, 0), calls=100)
    assert not two_means(few, many).enough


def test_two_means_is_welchs_z_test_of_cited_per_call() -> None:
    # Control: 40 calls citing 2, 20 citing 1 (mean 5/3, variance 20/9 * ... by hand below).
    control = ArmCited("control", Cited(300, 100), calls=60, cited_calls=60,
                       cited_squares=40 * 4 + 20 * 1)
    candidate = ArmCited("candidate", Cited(60, 45), calls=60, cited_calls=45,
                         cited_squares=45)
    var_a = (180 - 60 * (100 / 60) ** 2) / 59
    var_b = (45 - 60 * 0.75 ** 2) / 59
    z = (0.75 - 100 / 60) / math.sqrt(var_a / 60 + var_b / 60)
    compared = two_means(control, candidate)
    assert compared.p_value is not None
    assert math.isclose(compared.p_value, math.erfc(abs(z) / math.sqrt(2)))
    assert compared.significant and compared.difference is not None and compared.difference < 0
    # No spread at all: equal means are no difference, unequal ones a certain one.
    flat = ArmCited("x", Cited(60, 60), calls=60, cited_calls=60, cited_squares=60)
    assert two_means(flat, flat).p_value == 1.0
    assert two_means(flat, ArmCited("y", Cited(60, 0), calls=60)).p_value == 0.0
