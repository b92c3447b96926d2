"""A resident bench worker (``deploykit.workers.ResidentWorker`` running ``deploykit.bench.worker``): one
process measures a configuration round after round on the session it opened, and fails like a one-job
worker does — a death, an overrun, a job for another configuration — without hanging its parent."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import psutil
import pytest

from deploykit.bench.config import BenchConfig
from deploykit.bench.runner import measure_resident
from deploykit.inputs import make_inputs
from deploykit.model import read_interface
from deploykit.workers import ResidentWorker, kill_workers, read_arrays, write_arrays


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.assets.tiny import build_all

    return build_all(tmp_path_factory.mktemp("resident"))["classifier"]


@pytest.fixture
def inputs(model: Path, tmp_path: Path) -> Path:
    path = tmp_path / "inputs.npz"
    write_arrays(path, make_inputs(read_interface(model).inputs, seed=1))
    return path


CONFIG = BenchConfig("onnxruntime", "cpu", threads=1, warmup=1, iterations=9, duration_s=0.05)


def test_one_process_measures_round_after_round_on_the_session_it_opened(model: Path, inputs: Path, tmp_path: Path):
    with ResidentWorker("deploykit.bench.worker", "ort") as worker:
        pid = worker._process.pid
        rows = [measure_resident(worker, model, CONFIG, inputs, tmp_path / f"out-{n}.npz", 120) for n in range(3)]
        assert all(row.ok for row in rows), [row.error for row in rows]
        assert all(row.latency is not None and row.latency.count >= 9 for row in rows)
        # one process and one load for the three rounds: each row reports the same load
        assert len({row.load_ms for row in rows}) == 1
        assert psutil.Process(pid).is_running()
        # each round's first outputs are written where its job asked, and they are the model's
        first, last = read_arrays(tmp_path / "out-0.npz"), read_arrays(tmp_path / "out-2.npz")
        assert first.keys() == last.keys() and all(np.array_equal(first[k], last[k]) for k in first)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_job_for_another_configuration_is_refused_not_measured(model: Path, inputs: Path, tmp_path: Path):
    with ResidentWorker("deploykit.bench.worker", "ort") as worker:
        assert measure_resident(worker, model, CONFIG, inputs, tmp_path / "a.npz", 120).ok
        other = BenchConfig("onnxruntime", "cpu", threads=2, warmup=1, iterations=9, duration_s=0.05)
        row = measure_resident(worker, model, other, inputs, tmp_path / "b.npz", 120)
        assert not row.ok and "another model or configuration" in (row.error or "")
        # a shorter or longer round of the same configuration is the same configuration
        longer = BenchConfig("onnxruntime", "cpu", threads=1, warmup=2, iterations=20, duration_s=0.1)
        assert measure_resident(worker, model, longer, inputs, tmp_path / "c.npz", 120).ok


def test_a_worker_that_dies_costs_its_row_and_is_not_asked_again(model: Path, inputs: Path, tmp_path: Path):
    with ResidentWorker("deploykit.bench.worker", "ort") as worker:
        assert measure_resident(worker, model, CONFIG, inputs, tmp_path / "a.npz", 120).ok
        os.kill(worker._process.pid, signal.SIGKILL)
        row = measure_resident(worker, model, CONFIG, inputs, tmp_path / "b.npz", 120)
        assert not row.ok and "killed by signal SIGKILL" in (row.error or "")
        again = measure_resident(worker, model, CONFIG, inputs, tmp_path / "c.npz", 120)
        assert again.error == row.error


def test_a_round_over_its_time_limit_kills_the_worker(model: Path, inputs: Path, tmp_path: Path):
    slow = BenchConfig("onnxruntime", "cpu", threads=1, warmup=1, iterations=None, duration_s=30.0)
    with ResidentWorker("deploykit.bench.worker", "ort") as worker:
        pid = worker._process.pid
        job = {"model": str(model), "config": slow.to_dict(), "inputs": str(inputs), "outputs": str(tmp_path / "a.npz")}
        outcome = worker.ask(job, 1.0)
        assert outcome.result is None and "did not answer within 1 s and was killed" in (outcome.error or "")
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_an_interrupted_command_kills_its_resident_workers(model: Path, inputs: Path, tmp_path: Path):
    worker = ResidentWorker("deploykit.bench.worker", "ort")
    try:
        assert measure_resident(worker, model, CONFIG, inputs, tmp_path / "a.npz", 120).ok
        pid = worker._process.pid
        kill_workers()  # what Ctrl-C does before the command exits
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        worker.close()
