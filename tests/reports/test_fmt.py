"""The one formatter module: units, significant digits and the missing-value dash."""

from __future__ import annotations

import pytest

from batchscope.reports import fmt

FORMATTERS = [fmt.si, fmt.flops, fmt.nbytes, fmt.seconds, fmt.pct, fmt.signed_pct, fmt.ratio,
              fmt.number, lambda v: fmt.rate(v, "token")]


@pytest.mark.parametrize("formatter", FORMATTERS)
def test_every_formatter_shows_missing_as_a_dash(formatter) -> None:
    assert formatter(None) == fmt.MISSING == "–"


def test_bytes_are_decimal() -> None:
    assert fmt.nbytes(494_600_000) == "494.6 MB"  # 494.6e6 / 1e6
    assert fmt.nbytes(1_500) == "1.5 kB"
    assert fmt.nbytes(256) == "256 B"
    assert fmt.nbytes(2**30) == "1.1 GB"  # 1,073,741,824 / 1e9: a GiB is not a GB


def test_flops_and_rates_use_si_prefixes() -> None:
    assert fmt.flops(251_970_000) == "252 MFLOP"
    assert fmt.flops(25_860) == "25.9 kFLOP"
    assert fmt.si(1.23e11, "FLOP/s") == "123 GFLOP/s"
    assert fmt.rate(4_127_185.0, "sample") == "4.13 M samples/s"


def test_seconds_keep_three_or_four_digits() -> None:
    assert fmt.seconds(125.4) == "125 s"
    assert fmt.seconds(2.346) == "2.35 s"
    assert fmt.seconds(0.0615) == "61.5 ms"
    assert fmt.seconds(855e-9) == "855 ns"
    assert fmt.seconds(147e-9) == "147 ns"
    assert fmt.seconds(9.4e-6) == "9.4 µs"
    assert fmt.seconds(0.0) == "0 ns"


def test_scales_give_one_unit_for_a_column_or_an_axis() -> None:
    assert fmt.byte_scale(109.3e6) == (1e6, "MB")
    assert fmt.byte_scale(999.0) == (1.0, "B")
    assert fmt.time_scale(0.231) == (1e-3, "ms")
    assert fmt.time_scale(147e-9) == (1e-9, "ns")
    assert fmt.time_scale(3.0) == (1.0, "s")


def test_shares_and_factors() -> None:
    assert fmt.pct(0.781) == "78%" and fmt.pct(0.0712, 1) == "7.1%"
    assert fmt.signed_pct(-0.2) == "−20.0%"
    assert fmt.ratio(16.7) == "16.7×" and fmt.ratio(132.8) == "133×"
    assert fmt.ratio(0.0031) == "0.0031×" and fmt.ratio(0.97) == "0.97×"  # never "0.0×"
    assert fmt.number(1143.7) == "1,144" and fmt.number(17.66) == "17.7"
