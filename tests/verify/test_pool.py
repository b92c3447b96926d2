"""WorkerPool: a signal that lands on a pool thread still interrupts the main thread's wait, and an
interruption skips the jobs that had not started and waits for the ones that had."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest

from deploykit.verify.pool import WorkerPool


class _Interrupted(Exception):
    pass


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """SIGUSR1 sets the event (so the job can end) and raises _Interrupted in the main thread."""
    event = threading.Event()

    def handler(signum: int, frame: object) -> None:
        event.set()
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)
    yield event
    signal.signal(signal.SIGUSR1, previous)


def test_a_signal_delivered_to_a_pool_thread_interrupts_the_main_threads_wait(released):
    go = threading.Event()
    outcome: dict[str, bool] = {}

    def signalled_job() -> None:
        go.wait(timeout=60)
        time.sleep(0.1)  # let the main thread settle into its wait: the case that hung
        # The kernel may deliver a process signal to any thread; send it to this one on purpose.
        # A main thread blocked in a lock wait without a timeout (Future.result()) would not run
        # the handler until this job ended, so the event would not be set within the minute.
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        outcome["released"] = released.wait(timeout=60)

    with pytest.raises(_Interrupted), WorkerPool(isolate=False, jobs=1) as pool:
        future = pool.submit(signalled_job)
        go.set()
        pool.results([future])
    assert outcome == {"released": True}


def test_an_interruption_skips_queued_jobs_and_waits_for_the_running_one():
    outcome: dict[str, bool] = {}
    started = threading.Event()

    def running_job(pool: WorkerPool) -> None:
        started.set()
        deadline = time.monotonic() + 60
        while not pool.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        outcome["saw the pool close"] = pool.closed

    def queued_job() -> None:
        outcome["queued job ran"] = True

    with pytest.raises(_Interrupted), WorkerPool(isolate=False, jobs=2) as pool:
        pool.submit(running_job, pool)
        pool.submit(queued_job)
        assert started.wait(timeout=60)
        raise _Interrupted
    assert outcome == {"saw the pool close": True}


def test_results_come_back_in_submission_order_and_a_job_error_is_raised():
    with WorkerPool(isolate=True, jobs=3) as pool:
        assert pool.results([pool.submit(pow, 2, n) for n in (3, 1, 2)]) == [8, 2, 4]
    with pytest.raises(ZeroDivisionError), WorkerPool(isolate=True, jobs=2) as pool:
        pool.results([pool.submit(divmod, 1, 0)])
