"""``deploykit.io.file_lock``: the one lock between processes (cache entries, converter environments,
emulated targets, outputs). A holder in another process makes a waiter wait and a non-waiter fail at
once; the lock file and its folder are made when missing and left in place."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploykit.io import file_lock
from tests.assets.paths import REPO

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from deploykit.io import file_lock
    with file_lock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes the pipe
        time.sleep(0.5)  # a waiter that did not wait would look now, before the mark
        Path(sys.argv[2]).write_text("released")
    """
)
WAITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from deploykit.io import file_lock
    try:
        with file_lock(sys.argv[1], wait=False):
            print("free", flush=True)
    except BlockingIOError:
        print("held elsewhere", flush=True)
    with file_lock(sys.argv[1]):
        mark = Path(sys.argv[2])
        print(mark.read_text() if mark.exists() else "still held", flush=True)
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``tmp_path/locks/x.lock`` until its stdin closes; it then writes ``released``."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "locks" / "x.lock"), str(tmp_path / "released")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    yield process
    if process.stdin is not None and not process.stdin.closed:
        process.stdin.close()
    process.wait(timeout=60)


def test_a_waiter_gets_the_lock_only_once_its_holder_released_it(tmp_path, holder):
    waiter = subprocess.Popen(
        [sys.executable, "-c", WAITER, str(tmp_path / "locks" / "x.lock"), str(tmp_path / "released")],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert waiter.stdout is not None and waiter.stdout.readline().strip() == "held elsewhere"
    holder.stdin.close()
    assert waiter.stdout.readline().strip() == "released", "the waiter waited for the holder"
    assert waiter.wait(timeout=60) == 0


def test_without_waiting_a_held_lock_fails_at_once_and_a_free_one_is_taken(tmp_path, holder):
    lock_file = tmp_path / "locks" / "x.lock"
    with pytest.raises(BlockingIOError), file_lock(lock_file, wait=False):
        pytest.fail("took a lock another process holds")
    holder.stdin.close()
    holder.wait(timeout=60)
    with file_lock(lock_file, wait=False) as handle:
        assert not handle.closed


def test_the_lock_file_and_its_folder_are_made_and_kept(tmp_path):
    lock_file = tmp_path / "new" / "folder" / "x.lock"
    with file_lock(lock_file):
        assert lock_file.is_file()
    assert lock_file.is_file(), "left in place: a process waiting on it must not lock a file no one else opens"
    with file_lock(lock_file), pytest.raises(BlockingIOError), file_lock(lock_file, wait=False):
        pytest.fail("a second open of the lock file in this process is a second holder, refused")
