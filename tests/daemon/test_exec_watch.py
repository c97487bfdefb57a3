"""The decisions after every other thread of a process went (pure)."""

from __future__ import annotations

from parlschedd.daemon.exec_watch import EXEC_RUN_NS, ExecWatch, carried, original_after_exec

A, B, C = frozenset({0}), frozenset({1}), frozenset({0, 1})


def test_the_verdict_waits_for_the_main_tid_to_run() -> None:
    watch = ExecWatch(run_ns=5_000, counted=42.0, went={})
    assert watch.verdict(42.0, 5_000 + EXEC_RUN_NS - 1) is None  # has not run enough to tell
    assert watch.verdict(42.5, 5_000) is False  # its counter moved: the same thread, even before it ran much
    assert watch.verdict(42.0, 5_000 + EXEC_RUN_NS) is True  # ran 10 ms and its counter never moved


def test_an_interval_the_pmu_did_not_count_tells_nothing() -> None:
    """NaN (multiplexed off the PMU) compared unequal to everything: the verdict was
    "the same thread" at once, and an exec went unseen."""
    nan = float("nan")
    watch = ExecWatch(run_ns=5_000, counted=42.0, went={})
    assert watch.verdict(nan, 5_000 + EXEC_RUN_NS) is None
    begun_on_nan = ExecWatch(run_ns=5_000, counted=nan, went={})
    assert begun_on_nan.verdict(42.0, 6_000) is None  # the first read that counts is the baseline
    assert begun_on_nan.verdict(42.0, 6_000 + EXEC_RUN_NS - 1) is None
    assert begun_on_nan.verdict(42.0, 6_000 + EXEC_RUN_NS) is True


def test_the_original_is_that_of_the_thread_that_carried_the_mask() -> None:
    went = {11: (C, A), 12: (B, B)}
    assert original_after_exec(went, B, fallback=C) == B
    assert original_after_exec(went, A, fallback=B) == C
    assert original_after_exec(went, C, fallback=B) is None  # no thread that went had it: someone else's


def test_several_threads_with_that_mask_and_different_originals_get_the_fallback() -> None:
    assert original_after_exec({11: (C, A), 12: (A, A)}, A, fallback=B) == B
    assert original_after_exec({11: (C, A), 12: (C, A)}, A, fallback=B) == C  # the same original: no doubt


def test_carried_is_any_mask_last_set_on_a_thread_that_went() -> None:
    went = {11: (C, A)}
    assert carried(went, A) and not carried(went, B) and not carried({}, A)
