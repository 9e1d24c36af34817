"""The profile must describe the step that was timed (issue 13, finding 4): a capture whose
steps run much slower than the timed ones is retaken, and the report says when it could not
be made to agree. Real profiler, real steps: the steps below are slow only while torch's
profiler runs, or only in the first capture, as a cold profiler made BERT's gelu 6x slower."""

from __future__ import annotations

import time

import torch

from batchscope.profiler.capture import PROFILE_GAP_RATIO, capture_agreeing, profile_gap

FAST_S, SLOW_S = 0.002, 0.03
CPU = torch.device("cpu")


def _work(seconds: float) -> None:
    torch.ones(8).add_(1)  # one op to profile; the rest of the step is time, not ops
    time.sleep(seconds)


def test_a_first_capture_slowed_by_the_profiler_is_retaken() -> None:
    calls = {"n": 0}

    def step() -> None:  # the first capture's steps (1 warm-up + 3) are slow
        calls["n"] += 1
        _work(SLOW_S if calls["n"] <= 4 else FAST_S)

    capture = capture_agreeing(step, lambda: None, CPU, latency_s=FAST_S)
    assert profile_gap(capture, FAST_S) <= PROFILE_GAP_RATIO
    assert capture.note.startswith("profile retaken 1x")


def test_a_profile_that_never_agrees_is_said() -> None:
    def step() -> None:  # slow whenever the profiler runs
        _work(SLOW_S if torch.autograd._profiler_enabled() else FAST_S)

    capture = capture_agreeing(step, lambda: None, CPU, latency_s=FAST_S)
    assert capture.note.startswith("the profile disagrees with the timing")
    assert "3 captures" in capture.note


def test_an_agreeing_profile_is_taken_once() -> None:
    calls = {"n": 0}

    def step() -> None:
        calls["n"] += 1
        _work(FAST_S)

    capture = capture_agreeing(step, lambda: None, CPU, latency_s=FAST_S)
    assert capture.note == "" and calls["n"] == 4  # one warm-up step and three profiled
