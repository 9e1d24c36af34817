"""The serving simulator on cases small enough to work out by hand (times in a comment)."""

from __future__ import annotations

import pytest

from batchscope.serving.requests import Request
from batchscope.serving.simulator import Policy, simulate

TEN_MS = 0.010


def constant(rows: int, context: int) -> float:
    return TEN_MS


def per_row(rows: int, context: int) -> float:
    return 0.010 + 0.005 * rows  # 15 ms for one row, 20 ms for two


@pytest.mark.parametrize("policy", list(Policy))
def test_one_request(policy):
    # Three tokens at 10 ms a step: first at 10 ms, last at 30 ms; TPOT (30-10)/2 = 10 ms.
    sim = simulate([Request(0.0, 4, 3)], policy, 8, constant)
    (s,) = sim.served
    assert (s.admitted_s, s.first_token_s, s.finished_s) == pytest.approx((0.0, 0.01, 0.03))
    assert s.ttft_s == pytest.approx(0.01)
    assert s.tpot_s == pytest.approx(0.01)
    assert s.e2e_s == pytest.approx(0.03)
    assert sim.steps == 3 and sim.mean_batch == 1


def test_two_lengths_static_holds_the_finished_row():
    # A (2 tokens) and B (4 tokens) start together; every step has 2 rows: 20 ms.
    # A: first 0.02, done 0.04. B: first 0.02, done at step 4 = 0.08; TPOT (0.08-0.02)/3.
    a, b = simulate([Request(0.0, 1, 2), Request(0.0, 1, 4)], Policy.STATIC, 2, per_row).served
    assert (a.first_token_s, a.finished_s) == pytest.approx((0.02, 0.04))
    assert (b.first_token_s, b.finished_s) == pytest.approx((0.02, 0.08))
    assert b.tpot_s == pytest.approx(0.02)


def test_two_lengths_continuous_drops_the_finished_row():
    # Steps 1-2 have both rows (20 ms): A done at 0.04. Then B alone (15 ms): 0.055, 0.07.
    sim = simulate([Request(0.0, 1, 2), Request(0.0, 1, 4)], Policy.CONTINUOUS, 2, per_row)
    a, b = sim.served
    assert a.finished_s == pytest.approx(0.04)
    assert b.finished_s == pytest.approx(0.07)
    assert b.tpot_s == pytest.approx(0.05 / 3)
    assert sim.step_rows == [2, 2, 1, 1]


def test_static_arrival_waits_for_the_whole_batch():
    # A (4 tokens) starts alone at 0; B arrives at 5 ms. Static: B waits for A's batch to
    # end at 0.04, its first token at 0.05: TTFT 45 ms. Continuous: B joins before step 2
    # (at 0.01), its first token at 0.02: TTFT 15 ms.
    stream = [Request(0.0, 1, 4), Request(0.005, 1, 1)]
    static_b = simulate(stream, Policy.STATIC, 2, constant).served[1]
    continuous_b = simulate(stream, Policy.CONTINUOUS, 2, constant).served[1]
    assert static_b.ttft_s == pytest.approx(0.045)
    assert continuous_b.ttft_s == pytest.approx(0.015)


def test_kv_capacity_admits_what_fits_and_rejects_what_never_can():
    # Each reserves 10 + 10 = 20 tokens; 30 fit one at a time. A runs 0-0.10, B 0.10-0.20.
    # C needs 45 > 30: rejected, never served.
    stream = [Request(0.0, 10, 10), Request(0.0, 10, 10), Request(0.0, 40, 5)]
    a, b, c = simulate(stream, Policy.CONTINUOUS, 4, constant, kv_capacity_tokens=30).served
    assert a.finished_s == pytest.approx(0.10)
    assert b.admitted_s == pytest.approx(0.10) and b.finished_s == pytest.approx(0.20)
    assert c.rejected and c.finished_s is None


def test_step_time_sees_the_longest_context_in_the_batch():
    seen = []

    def record(rows: int, context: int) -> float:
        seen.append((rows, context))
        return TEN_MS

    # Prompts 5 and 9: the first step attends over 9 cached tokens, then 10; A (2 tokens)
    # leaves after step 2, and B alone holds 11.
    simulate([Request(0.0, 5, 2), Request(0.0, 9, 3)], Policy.CONTINUOUS, 2, record)
    assert seen == [(2, 9), (2, 10), (1, 11)]


def test_prefill_is_charged_before_the_next_step():
    # 1 ms per prompt token: 4 ms of prefill, then steps of 10 ms: first token at 0.014.
    (s,) = simulate([Request(0.0, 4, 2)], Policy.CONTINUOUS, 1, constant,
                    prefill_s=lambda p: 0.001 * p).served
    assert s.first_token_s == pytest.approx(0.014)
    assert s.finished_s == pytest.approx(0.024)


def test_idle_server_waits_for_the_next_arrival():
    # Nothing runs until 1 s; then two steps.
    (s,) = simulate([Request(1.0, 1, 2)], Policy.STATIC, 4, constant).served
    assert s.admitted_s == pytest.approx(1.0) and s.finished_s == pytest.approx(1.02)


def test_cap_of_one_serialises():
    stream = [Request(0.0, 1, 3), Request(0.0, 1, 3)]
    for policy in Policy:
        a, b = simulate(stream, policy, 1, constant).served
        assert a.finished_s == pytest.approx(0.03) and b.finished_s == pytest.approx(0.06)


def test_bad_cap_is_refused():
    with pytest.raises(ValueError):
        simulate([Request(0.0, 1, 1)], Policy.STATIC, 0, constant)
