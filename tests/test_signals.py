"""``deploykit.signals.DeferredSignals``: handlers only record a signal while the block runs, are back
afterwards, and the first signal held is handed to its handler (with no frame) once the block ends."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from deploykit.signals import TERMINATING, DeferredSignals


@pytest.fixture
def calls():
    """A Python handler of SIGINT that records each call's (signal, frame); the previous handler after."""
    received: list[tuple[int, object]] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    yield received
    signal.signal(signal.SIGINT, previous)


def _send(signum: int) -> None:
    os.kill(os.getpid(), signum)
    sum(range(100_000))  # bytecode enough for a handler to have run, were it not deferred


def test_a_signal_in_the_block_waits_for_its_end(calls):
    handler = signal.getsignal(signal.SIGINT)
    with DeferredSignals() as deferred:
        _send(signal.SIGINT)
        _send(signal.SIGINT)
        assert calls == [] and deferred.held == [signal.SIGINT, signal.SIGINT]
    assert calls == [(signal.SIGINT, None)]  # the first one, once; no frame
    assert signal.getsignal(signal.SIGINT) is handler and deferred.held == []


def test_without_deliver_on_exit_the_caller_delivers(calls):
    with DeferredSignals(deliver_on_exit=False) as deferred:
        _send(signal.SIGINT)
    assert calls == [] and deferred.held == [signal.SIGINT]
    deferred.deliver()
    deferred.deliver()  # nothing left
    assert calls == [(signal.SIGINT, None)]


def test_nested_blocks_deliver_once_at_the_outer_end(calls):
    with DeferredSignals() as outer:
        with DeferredSignals():
            _send(signal.SIGINT)
        assert calls == [] and outer.held == [signal.SIGINT]
    assert calls == [(signal.SIGINT, None)]


def test_a_handler_set_in_the_block_is_kept(calls):
    mine: list[int] = []

    def own(signum: int, frame: object) -> None:
        mine.append(signum)

    with DeferredSignals():
        _send(signal.SIGINT)  # held
        signal.signal(signal.SIGINT, own)  # a module that sets its own handler keeps it
    assert signal.getsignal(signal.SIGINT) is own
    assert calls == [(signal.SIGINT, None)] and mine == []  # the held one goes where it was meant to


def test_default_and_ignored_dispositions_are_left_alone():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with DeferredSignals(TERMINATING):
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            _send(signal.SIGTERM)  # ignored by the kernel, as ever
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_outside_the_main_thread_nothing_changes(calls):
    seen = []

    def body() -> None:
        with DeferredSignals() as deferred:
            seen.append((signal.getsignal(signal.SIGINT), deferred.held))

    handler = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [(handler, [])]
