"""When `assay run` gives up on a batch: nothing finished for the stall time while tasks raised errors."""

from __future__ import annotations

from assay.workers.embedded import StallWatch


def test_an_error_before_the_first_poll_counts():
    # The first task can fail before the run first looks at its batch: the run must still stop.
    watch = StallWatch(3.0, started_at=100.0)
    error_at = 100.5
    assert watch.idle_seconds(0, now=101.0, last_error_at=error_at) is None
    assert watch.idle_seconds(0, now=103.0, last_error_at=error_at) is None
    assert watch.idle_seconds(0, now=103.5, last_error_at=error_at) == 3.5


def test_only_an_error_since_the_last_progress_counts():
    watch = StallWatch(3.0, started_at=100.0)
    assert watch.idle_seconds(0, now=101.0, last_error_at=100.5) is None
    assert watch.idle_seconds(2, now=102.0, last_error_at=100.5) is None  # progress: the clock restarts
    assert watch.idle_seconds(2, now=110.0, last_error_at=100.5) is None  # idle, but no error since
    assert watch.idle_seconds(2, now=111.0, last_error_at=110.5) == 9.0


def test_a_quiet_wait_is_not_a_stall():
    # Waiting out a provider outage raises no error: however long, the run goes on.
    watch = StallWatch(3.0, started_at=100.0)
    assert watch.idle_seconds(0, now=500.0, last_error_at=0.0) is None


def test_a_resumed_batch_first_count_is_not_progress():
    # A batch seen first with some scores done has not progressed by being seen.
    watch = StallWatch(3.0, started_at=100.0)
    assert watch.idle_seconds(40, now=100.2, last_error_at=100.1) is None
    assert watch.idle_seconds(40, now=104.0, last_error_at=100.1) == 4.0
