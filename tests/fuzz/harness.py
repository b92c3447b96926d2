"""The promises every CLI command keeps, checked around one real invocation (typer's CliRunner).

- the exit code is 0, 1 (a DeployKitError) or 2 (a usage error), and no traceback is printed;
- every file the command reads is byte-for-byte unchanged (SHA-256);
- a failed command leaves nothing at an output path that did not exist, and an existing one unchanged;
- no temporary file or directory (``.deploykit-*``) is left behind.

``run_cli`` and ``assert_said`` keep the same promises for the real command line in a subprocess (under
``prlimit`` resource limits or in a namespace with a full tmpfs), with a timeout: a hang fails the test.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.io import TEMPORARY_PREFIX
from tests.assets.tiny import build_all

runner = CliRunner()


def sha256(path: Path) -> str | None:
    """The file's digest; None where there is no regular file (or the OS refuses the name)."""
    try:
        if not path.is_file():
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def exists(path: Path) -> bool:
    try:
        return os.path.lexists(path)
    except OSError:
        return False


def temporary_leftovers(directories: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for directory in directories:
        if directory.is_dir():
            found += [p for p in directory.rglob(f"{TEMPORARY_PREFIX}*")]
    return found


def invoke_checked(
    args: Sequence[Any],
    *,
    reads: Iterable[Path] = (),
    writes: Iterable[Path] = (),
    watch: Iterable[Path] = (),
) -> Any:
    """Run ``deploykit ARGS`` and assert the promises; return the click ``Result``.

    Args:
        reads: files the command reads (their hashes must not change).
        writes: output paths (must stay absent/unchanged when the command fails).
        watch: directories where no temporary file may be left.
    """
    reads, writes = [Path(p) for p in reads], [Path(p) for p in writes]
    before_reads = {p: sha256(p) for p in reads}
    before_writes = {p: (exists(p), sha256(p)) for p in writes}
    result = runner.invoke(app, [str(a) for a in args])
    described = f"deploykit {' '.join(map(str, args))}\n--- output ---\n{result.output}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"uncaught {type(result.exception).__name__}:\n{described}\n{trace}")
    assert result.exit_code in (0, 1, 2), described
    assert "Traceback" not in result.output, described
    for path, digest in before_reads.items():
        assert sha256(path) == digest, f"input {path} changed\n{described}"
    if result.exit_code != 0:
        for path, (existed, digest) in before_writes.items():
            if existed:
                assert sha256(path) == digest, f"failed command changed existing output {path}\n{described}"
            else:
                assert not exists(path), f"failed command left output {path}\n{described}"
    leftovers = temporary_leftovers([*watch, *(p.parent for p in writes)])
    assert not leftovers, f"temporary files left: {leftovers}\n{described}"
    log = os.environ.get("DEPLOYKIT_FUZZ_LOG")
    if log:  # one line per invocation: exit code and command, to see what the fuzzer reaches
        with open(log, "a") as handle:
            handle.write(f"{result.exit_code}\t{' '.join(map(str, args))[:300]}\n")
    return result


def usage_said(output: str) -> str:
    """click's usage-error panel as one line of text (the panel draws a box and wraps long messages)."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", output)).strip()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny assets (tests/assets/tiny.py), built once per session in a read-only spirit:
    tests copy what they might damage."""
    return build_all(tmp_path_factory.mktemp("tiny"))


def copy_assets(tiny: dict[str, Path], directory: Path, *names: str) -> dict[str, Path]:
    """Fresh copies of some assets in ``directory`` (for tests that write beside them)."""
    copies = {}
    for name in names:
        copies[name] = directory / tiny[name].name
        shutil.copy2(tiny[name], copies[name])
    return copies


DEPLOYKIT = Path(sys.executable).with_name("deploykit")


def run_cli(
    args: Sequence[Any], *, cwd: Path, prefix: Sequence[str] = (), timeout_s: float = 90
) -> subprocess.CompletedProcess[str]:
    """The real ``deploykit ARGS`` in a subprocess (after ``prefix``: ``prlimit ...``, ``unshare ...``),
    in its own process group; a hang past ``timeout_s`` fails the test and kills the whole group."""
    command = [*prefix, str(DEPLOYKIT), *map(str, args)]
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"hang: {' '.join(command)} ran past {timeout_s} s")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def assert_said(done: subprocess.CompletedProcess[str], names: Iterable[str], *, outputs: Iterable[Path] = ()) -> None:
    """A subprocess run kept the promises: exit 0 (then every output is there), or 1/2 with a message that
    names one of ``names`` (the file or the limit) and no output left; never a traceback, never a signal."""
    described = f"{' '.join(done.args)}\n--- exit {done.returncode} ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
    assert done.returncode in (0, 1, 2), described
    assert "Traceback" not in done.stderr + done.stdout, described
    outputs = list(outputs)
    if done.returncode == 0:
        missing = [p for p in outputs if not exists(p)]
        assert not missing, f"exit 0 without its outputs {missing}\n{described}"
    else:
        names = list(names)
        assert any(name in done.stderr for name in names), f"no message naming any of {names}\n{described}"
        left = [p for p in outputs if exists(p)]
        assert not left, f"a failed command left {left}\n{described}"
    leftovers = temporary_leftovers({p.parent for p in outputs})
    assert not leftovers, f"temporary files left: {leftovers}\n{described}"
