"""Outputs are validated before the work, never written onto an input, all or nothing, with plain-write
modes, and no temporary file survives SIGINT, SIGTERM or SIGHUP (issue 12)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from deploykit.errors import OutputError
from deploykit.io import atomic_path, check_outputs
from tests.assets.paths import REPO
from tests.assets.signals import default_signals
from tests.fuzz.harness import copy_assets, invoke_checked, temporary_leftovers

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.mark.parametrize(
    "command",
    [
        ["run", "{dynamic}", "--save", "/proc/o.npz"],
        ["convert", "darknet", "{cfg}", "{weights}", "-o", "/proc/x.onnx"],
        ["convert", "torch", "{factory}:tiny_cnn", "-i", "x:1x3x8x8", "-o", "/proc/x.onnx"],
    ],
    ids=["run-save", "convert-darknet", "convert-torch"],
)
def test_unwritable_output_is_a_message(tiny, command):
    args = [part.format(**tiny) for part in command]
    result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"], tiny["dynamic"]])
    assert result.exit_code == 2
    assert "directory '/proc' is not writable" in result.stderr


SETPRIV = shutil.which("setpriv")


def _deploykit_as(args: list[object], *, unprivileged: bool) -> subprocess.CompletedProcess[str]:
    """The real command line; as root it runs as 'nobody' (root may write anywhere)."""
    command = [str(Path(sys.executable).with_name("deploykit")), *map(str, args)]
    if unprivileged:
        command = [str(SETPRIV), "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture
def shared_dir(tiny):
    """A directory 'nobody' can read (pytest's tmp_path is private to root) holding the model."""
    directory = Path(tempfile.mkdtemp(prefix="deploykit-hostile-"))
    directory.chmod(0o755)
    shutil.copy2(tiny["dynamic"], directory / "m.onnx")
    (directory / "m.onnx").chmod(0o644)
    yield directory
    shutil.rmtree(directory)


@pytest.mark.skipif(IS_ROOT and SETPRIV is None, reason="root may write anywhere, and setpriv is missing")
def test_read_only_directory(shared_dir):
    locked = shared_dir / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    result = _deploykit_as(["run", shared_dir / "m.onnx", "--save", locked / "o.npz"], unprivileged=IS_ROOT)
    assert result.returncode == 2, result.stderr
    assert f"directory '{locked}' is not writable (Permission denied)" in result.stderr
    assert "Traceback" not in result.stderr and not list(locked.iterdir())


@pytest.mark.skipif(IS_ROOT and SETPRIV is None, reason="root may replace any file, and setpriv is missing")
def test_read_only_existing_output(shared_dir):
    out = shared_dir / "o.npz"
    out.write_bytes(b"keep")
    out.chmod(0o444)
    result = _deploykit_as(["run", shared_dir / "m.onnx", "--save", out], unprivileged=IS_ROOT)
    assert result.returncode == 2, result.stderr
    assert f"--output '{out}' | exists and is read-only; deploykit does not replace protected files." in result.stderr
    assert out.read_bytes() == b"keep"


def test_device_file_is_never_replaced(tiny):
    result = invoke_checked(["run", tiny["dynamic"], "--save", "/dev/null"])
    assert result.exit_code == 2 and "is not a regular file" in result.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize(
    "command, target",
    [
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "{weights}"], "weights"),
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "{cfg}"], "cfg"),
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "x.onnx", "--labels", "{labels}", "--report", "{labels}"],
         "labels"),
        (["convert", "torch", "{factory}:tiny_cnn", "-i", "x:1x3x8x8", "-w", "{state_dict}", "-o", "{state_dict}"],
         "state_dict"),
        (["run", "{dynamic}", "--save", "{dynamic}"], "dynamic"),
        (["run", "{dynamic}", "-i", "{npz}", "--save", "{npz}"], "npz"),
        (["predict", "{classifier}", "{image}", "--draw", "{image}"], "image"),
        (["report", "merge", "{npz}", "-o", "{npz}"], "npz"),
    ],
    ids=["dn-weights", "dn-cfg", "dn-report-labels", "torch-weights", "run", "run-npz", "predict-draw",
         "report-merge"],
)  # fmt: skip
def test_output_onto_an_input_is_refused(tiny, tmp_path, monkeypatch, command, target):
    assets = copy_assets(tiny, tmp_path, *[n for n in tiny if n not in ("factory",)])
    assets["factory"] = tiny["factory"]
    monkeypatch.chdir(tmp_path)
    args = [part.format(**assets) for part in command]
    result = invoke_checked(args, reads=list(assets.values()), watch=[tmp_path])
    assert result.exit_code == 2, result.output
    assert "is the file this command reads" in result.stderr and "would destroy the input" in result.stderr


def test_output_through_a_symlink_to_the_input(tiny, tmp_path):
    assets = copy_assets(tiny, tmp_path, "dynamic")
    link = tmp_path / "link.npz"
    link.symlink_to(assets["dynamic"])
    result = invoke_checked(["run", assets["dynamic"], "--save", link], reads=[assets["dynamic"]])
    assert result.exit_code == 2 and "is the file this command reads" in result.stderr


def test_hard_link_to_an_input_is_refused(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    os.link(model, tmp_path / "hard.onnx")
    with pytest.raises(OutputError, match=r"is the file this command reads \(model\)"):
        check_outputs({"--save": tmp_path / "hard.onnx"}, inputs={"model": model})


def test_two_outputs_on_one_path(tiny, tmp_path):
    out = tmp_path / "same.json"
    result = invoke_checked(["predict", tiny["classifier"], tiny["image"], "-o", out, "--draw", out], writes=[out])
    assert result.exit_code == 2


@pytest.mark.parametrize("kind", ["darknet", "torch"])
def test_failed_command_leaves_no_output(tiny, tmp_path, kind):
    out = tmp_path / "x.onnx"
    source = [tiny["cfg"], tiny["weights"]] if kind == "darknet" else [f"{tiny['factory']}:tiny_cnn", "-i", "x:1x3x8x8"]
    args = ["convert", kind, *source, "-o", out, "--report", tmp_path / "nodir" / "r.json"]
    result = invoke_checked(args, writes=[out], watch=[tmp_path])
    assert result.exit_code == 2 and "nodir' does not exist" in result.stderr
    assert f"'deploykit convert {kind} --report FILE' is deprecated; use --report FOLDER" in result.stderr
    assert not out.exists()
    out.write_bytes(b"an existing model")
    result = invoke_checked(args, writes=[out], watch=[tmp_path])
    assert result.exit_code == 2 and out.read_bytes() == b"an existing model"


def test_convert_writes_model_and_report_together(tiny, tmp_path):
    out, report = tmp_path / "x.onnx", tmp_path / "report"
    result = invoke_checked(
        ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--report", report],
        reads=[tiny["cfg"], tiny["weights"]],
        watch=[tmp_path, report],
    )
    assert result.exit_code == 0, result.output
    assert out.is_file() and '"written": true' in (report / "report.json").read_text()
    assert "deprecated" not in result.stderr


def test_umask_is_honoured(tiny, tmp_path):
    old = os.umask(0o027)
    try:
        out = tmp_path / "o.npz"
        assert invoke_checked(["run", tiny["dynamic"], "--save", out]).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
        out.chmod(0o604)  # replacing a file keeps its mode, as open(path, "w") would
        assert invoke_checked(["run", tiny["dynamic"], "--save", out]).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o604
        converted = tmp_path / "x.onnx"
        assert invoke_checked(["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", converted]).exit_code == 0
        assert stat.S_IMODE(converted.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_atomic_path_leaves_target_untouched_on_error(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_text("new")
        raise RuntimeError("boom")
    assert target.read_text() == "old" and not temporary_leftovers([tmp_path])


# How long a process that was told to stop may take before the test calls it hung.
HANG_S = 180

_SCRATCH_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from deploykit.io import atomic_path, scratch_dir
    target = sys.argv[1]
    with scratch_dir(target) as scratch, atomic_path(target) as temporary:
        (scratch / "big.bin").write_bytes(b"x" * 100000)
        temporary.write_bytes(b"partial")
        print("ready", flush=True)
        time.sleep(60)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_signals_remove_temporary_files(tmp_path, signum):
    target = tmp_path / "out.onnx"
    process = subprocess.Popen(
        [sys.executable, "-c", _SCRATCH_SCRIPT, str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_signals,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
    assert temporary_leftovers([tmp_path]), "the script should hold temporary files now"
    process.send_signal(signum)
    # a bound against a hang, not a speed: on a loaded 2-core machine the cleanup may wait for a core
    process.wait(timeout=HANG_S)
    assert process.returncode == -signum, process.stderr.read() if process.stderr else ""
    assert not temporary_leftovers([tmp_path]) and not target.exists()


def test_ignored_sighup_keeps_working_files(tmp_path):
    """Under nohup (SIGHUP ignored) the work goes on, so its files must stay."""
    script = "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n" + _SCRATCH_SCRIPT
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "o")], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
        process.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1)
        assert temporary_leftovers([tmp_path])
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)
    assert not temporary_leftovers([tmp_path])


def test_dash_is_not_a_file_name(tiny, tmp_path, monkeypatch):
    """``--json -`` is stdout (one JSON line per frame), never a file named '-'."""
    monkeypatch.chdir(tmp_path)
    result = invoke_checked(["predict", tiny["classifier"], tiny["image"], "--json", "-"], watch=[tmp_path])
    assert result.exit_code == 0 and json.loads(result.stdout.splitlines()[0])["name"] == tiny["image"].name
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("keep", [False, True], ids=["refused", "keep-on-mismatch"])
def test_failed_verification_writes_neither_model_nor_report(tiny, tmp_path, monkeypatch, keep):
    """A candidate backend that crashes fails the check: nothing is written (unless asked)."""
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the verification worker must import the plug-in to crash in it
    out, report = tmp_path / "x.onnx", tmp_path / "r.json"
    report.write_text("an older report")
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--report", report,
            "--verify-backends", "crasher", *(["--keep-on-mismatch"] if keep else [])]  # fmt: skip
    # --keep-on-mismatch asks for the outputs of a failed check: only then may they be written.
    writes = [] if keep else [out, report]
    result = invoke_checked(args, reads=[tiny["cfg"], tiny["weights"]], writes=writes, watch=[tmp_path])
    assert result.exit_code == 1
    assert "killed by signal SIGABRT" in result.output, result.output  # the crash, not a plug-in that failed to load
    assert "'deploykit convert darknet --report FILE' is deprecated" in result.stderr  # the 0.1 form, still written
    if keep:
        assert out.is_file() and '"written": true' in report.read_text()
        assert f"report written to {report}" in result.stdout
    else:
        assert not out.exists() and report.read_text() == "an older report"
        assert "report written" not in result.stdout


def test_a_path_of_kilobytes_is_shown_cut_in_an_output_message(tiny, tmp_path):
    """Sweep 21b: an output path of 4.5 KB was echoed whole into the message (inputs were already cut)."""
    long_path = tmp_path.joinpath(*["x" * 300] * 15, "o.npz")
    result = invoke_checked(["run", tiny["dynamic"], "--save", long_path], reads=[tiny["dynamic"]])
    assert result.exit_code == 2
    assert "characters)…" in result.stderr and len(result.stderr) < 1000, result.stderr


def test_standard_output_on_dev_full_is_named_as_such(tiny):
    """Sweep 21b: 'error: OSError | No space left on device while writing standard output' named the class."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "deploykit.cli.main", "run", str(tiny["dynamic"])],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("error: standard output | No space left on device"), done.stderr


def test_a_deleted_current_directory_is_said_as_such(tiny, tmp_path):
    """Sweep 21b: in a deleted folder, 'run ../m.onnx' said "cannot be parsed as ONNX ... truncated"."""
    shutil.copy2(tiny["dynamic"], tmp_path / "m.onnx")
    deploykit = Path(sys.executable).with_name("deploykit")
    script = f"mkdir gone && cd gone && rmdir ../gone && exec {deploykit} run ../m.onnx"
    done = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith("error: current directory | no longer exists"), done.stderr
