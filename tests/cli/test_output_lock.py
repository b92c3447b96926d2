"""One output, one run at a time (issue 21): while a run holds an output (``io.output_lock``, taken by
``check_outputs``, ``check_report_dir``, the bundle check and ``predict --out``), a second run onto it
is refused by name, naming the process that holds it, before it does any work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploykit.errors import ResourceError
from deploykit.io import atomic_path, check_outputs, output_lock, output_scope
from tests.fuzz.harness import invoke_checked

HOLDER = textwrap.dedent(
    """
    import sys
    from deploykit.io import output_lock
    with output_lock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes the pipe
    """
)


@pytest.fixture
def held() -> Iterator[object]:
    """Hold paths from another process, as a first run does while it writes; yields hold(path) -> pid."""
    holders: list[subprocess.Popen[str]] = []

    def hold(path: Path) -> int:
        process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        holders.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        return process.pid

    yield hold
    for process in holders:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("command", "held_path"),
    [
        (["run", "{dynamic}", "--save", "{tmp}/o.npz"], "{tmp}/o.npz"),
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "{tmp}/m.onnx"], "{tmp}/m.onnx"),
        (["quantize", "{classifier}", "--fp16", "-o", "{tmp}/q.onnx"], "{tmp}/q.onnx"),
        (["bench", "{dynamic}", "-b", "ort", "--iterations", "2", "--report", "{tmp}/r"], "{tmp}/r"),
        (["predict", "{classifier}", "{tmp}/photos", "--out", "{tmp}/rows"], "{tmp}/rows"),
    ],
    ids=["run-save", "convert-darknet", "quantize", "bench-report", "predict-out"],
)
def test_a_second_run_onto_a_held_output_is_refused(tiny, tmp_path, held, command, held_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.jpg").write_bytes(tiny["image"].read_bytes())
    names = {**tiny, "tmp": tmp_path}
    target = Path(held_path.format(**names))
    pid = held(target)
    result = invoke_checked(
        [part.format(**names) for part in command], reads=[tiny["classifier"], tiny["dynamic"]], writes=[target]
    )
    assert result.exit_code == 1, result.output
    assert f"'{target}' | another deploykit run (process {pid}) is writing this" in result.stderr
    assert not target.exists()


def test_the_lock_ends_with_its_run_and_is_reentrant_in_one(tmp_path, held):
    target = tmp_path / "out.json"
    with output_scope():
        check_outputs({"--json": target})
        with atomic_path(target) as temporary:  # the same run writes what it claimed
            temporary.write_text("{}")
    assert target.read_text() == "{}"
    pid = held(target)  # released: another process can take it now
    with pytest.raises(ResourceError, match=rf"another deploykit run \(process {pid}\) is writing this file now"):
        with output_lock(target):
            pass


def test_no_lock_file_outlives_its_run_and_a_waiter_takes_the_new_one(tmp_path):
    """Sweep 21c: every output ever written left a deploykit-out-*.lock in TMPDIR."""
    from deploykit.io import _lock_path

    target = tmp_path / "out.onnx"
    with output_lock(target):
        assert _lock_path(target).is_file()
        stale = open(_lock_path(target), "a+")  # a waiter that opened the file while it was held
    assert not _lock_path(target).exists()
    try:
        with output_lock(target):  # the file the waiter holds is gone: the lock is a new file, taken once
            assert _lock_path(target).is_file()
            assert not os.path.samestat(os.fstat(stale.fileno()), _lock_path(target).stat())
    finally:
        stale.close()
    assert not _lock_path(target).exists()
