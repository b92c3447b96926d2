"""Writing a bundle folder under careless use: a model whose name the bundle uses for its own files, ``--force``
onto a folder that also holds someone else's file, and the working folder a killed run left behind."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from deploykit.errors import OutputError
from deploykit.io import _scratch_prefix, shown
from deploykit.optimize import OptimizePlan, optimize, read_bundle
from deploykit.optimize.manifest import MANIFEST, REPORT, REPORT_HTML

FAST = ["--no-quantize", "-b", "onnxruntime", "--threads", "1", "--time-budget", "30s"]


def _plan() -> OptimizePlan:
    return OptimizePlan(quantize=False, backends=["onnxruntime"], threads=[1], time_budget="30s")


@pytest.fixture(scope="module")
def bundle(classifier_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bundle, optimized from a model *file named report.json*."""
    folder = tmp_path_factory.mktemp("reserved")
    model = folder / REPORT
    shutil.copy(classifier_path, model)
    result = CliRunner().invoke(app, ["optimize", str(model), "-o", str(folder / "deploy"), *FAST])
    assert result.exit_code == 0, result.output
    return folder / "deploy"


def test_a_model_named_like_a_bundle_file_is_stored_under_a_safe_name(bundle, classifier_path):
    opened = read_bundle(bundle)  # checks every listed file's presence and the model's SHA-256
    assert opened.manifest.model_file == "model.onnx"
    assert (bundle / "model.onnx").read_bytes() == classifier_path.read_bytes()
    assert opened.report().model.path.endswith(REPORT)  # the report, not the model, is report.json
    assert set(opened.manifest.files) == {"model.onnx", REPORT, REPORT_HTML}


@pytest.mark.parametrize("name", [MANIFEST, REPORT_HTML, "Report.JSON", ".hidden.onnx"])
def test_every_reserved_or_hidden_name_is_renamed(name):
    from deploykit.optimize.manifest import bundle_file_name

    assert bundle_file_name(Path("/models") / name) == "model.onnx"
    assert bundle_file_name(Path("/models/yolo.onnx")) == "yolo.onnx"


def test_force_deletes_nothing_the_old_bundle_did_not_write(bundle, classifier_path, tmp_path):
    target = tmp_path / "deploy"
    shutil.copytree(bundle, target)
    (target / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "-o", str(target), "--force", *FAST])
    assert result.exit_code == 1, result.output
    assert "holds 1 file(s) the bundle there did not write (notes.txt)" in result.stderr
    assert "Nothing was changed" in result.stderr
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    (target / "notes.txt").unlink()
    report = optimize(classifier_path, None, _plan(), output=target, force=True)  # a bundle alone is replaced
    assert report.best is not None and read_bundle(target).manifest.model_file == classifier_path.name


def test_force_refuses_when_the_old_manifest_cannot_say_what_is_its(bundle, classifier_path, tmp_path):
    target = tmp_path / "deploy"
    shutil.copytree(bundle, target)
    (target / MANIFEST).write_text("[" * 100_000)
    with pytest.raises(OutputError, match="cannot be read, so which files are the bundle's cannot be told"):
        optimize(classifier_path, None, _plan(), output=target, force=True)
    assert (target / "model.onnx").exists()


def test_the_working_folder_of_a_killed_run_is_removed_and_said(classifier_path, tmp_path):
    target = tmp_path / "deploy"
    leftover = tmp_path / f"{_scratch_prefix(target)}x1y2z3"  # what a SIGKILLed run left: its staging folder
    (leftover / "bundle").mkdir(parents=True)
    (leftover / "bundle" / "model.onnx").write_bytes(b"half")
    # the working folder of a run onto another output, 'deploy.work-a', whose lock this run does not hold
    other = tmp_path / f"{_scratch_prefix(tmp_path / 'deploy.work-a')}q9r8s7"
    other.mkdir()
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "-o", str(target), *FAST])
    assert result.exit_code == 0, result.output
    assert not leftover.exists() and other.is_dir()
    lines = [line for line in result.stderr.splitlines() if "partial working folder" in line]
    assert (
        len(lines) == 1 and lines[0].startswith("warning: removed '") and "killed before it could clean up" in lines[0]
    )
    assert "LeftoverWarning" not in result.stderr and read_bundle(target)


def test_the_search_folder_of_a_sigkilled_optimize_is_removed_by_the_next_run(classifier_path, tmp_path):
    """A real ``deploykit optimize -o`` is SIGKILLed while its search works (variants being made): no code
    runs, so its working folder stays, beside the bundle and named after it; the next run onto the same
    output removes it, says so by name, and writes the bundle."""
    target = tmp_path / "deploy"
    prefix = _scratch_prefix(target)
    command = [str(Path(sys.executable).with_name("deploykit")), "optimize", str(classifier_path), "-o", str(target)]
    process = subprocess.Popen([*command, *FAST], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    working: list[Path] = []
    while process.poll() is None and not working:  # bounded by the run itself: it ends, or its folder shows
        working = [folder for folder in tmp_path.glob(f"{prefix}*") if (folder / "variants").is_dir()]
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    assert working and process.returncode == -signal.SIGKILL, f"no search folder beside '{target}':\n{stderr}"
    (leftover,) = working
    assert leftover.is_dir() and not target.exists()
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "-o", str(target), *FAST])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "partial working folder" in line]
    assert lines == [
        f"warning: removed '{shown(leftover)}', the partial working folder of an earlier run onto "
        f"'{shown(target)}' that was killed before it could clean up."
    ], result.stderr
    assert not leftover.exists() and not list(tmp_path.glob(f"{prefix}*")) and read_bundle(target)


def test_a_manifest_nested_too_deeply_is_one_bundle_error(bundle, tmp_path):
    from deploykit.errors import BundleError

    copy = tmp_path / "deep"
    shutil.copytree(bundle, copy)
    (copy / MANIFEST).write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(BundleError, match="is nested too deeply to be a bundle's manifest"):
        read_bundle(copy)
    result = CliRunner().invoke(app, ["inspect", str(copy)])
    assert result.exit_code == 1 and "Traceback" not in result.output


def test_a_fifo_among_the_images_is_named_not_called_an_empty_folder(classifier_path, photos, tmp_path):
    import os

    folder = tmp_path / "images"
    shutil.copytree(photos, folder)
    os.mkfifo(folder / "a.jpg")
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "--images", str(folder), "-o",
                                      str(tmp_path / "deploy"), "-b", "onnxruntime", "--threads", "1"])  # fmt: skip
    assert result.exit_code == 1 and "'a.jpg': is a named pipe (FIFO)" in " ".join(result.stderr.split())
    assert "holds no images" not in result.stderr
