"""Writing a bundle folder under careless use: a model whose name the bundle uses for its own files, ``--force``
onto a folder that also holds someone else's file, and the working folder a killed run left behind; and a
backend that converts (MNN, LiteRT) chosen: the bundle carries the converted file, which opens where
nothing converts."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from cli.main import app
from deploykit.backends.registry import get_backend
from deploykit.cache import cache_dir
from deploykit.errors import BundleError, OutputError
from deploykit.io import _scratch_prefix, file_sha256, shown
from deploykit.model import Model
from deploykit.optimize import OptimizePlan, optimize, read_bundle
from deploykit.optimize.manifest import MANIFEST, REPORT, REPORT_HTML, BundleManifest
from tests.assets.paths import missing_asset

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
    assert result.exit_code == 2, result.output
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


CACHE = cache_dir()  # read at import: the package's fixture points DEPLOYKIT_CACHE_DIR at a folder of its own


def _converted_bundle(classifier_path: Path, photos: Path, output: Path, plan: OptimizePlan) -> BundleManifest:
    optimize(classifier_path, photos, plan, output=output)
    return read_bundle(output).manifest


def _hidden_converters(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine where nothing converts: an empty cache (no LiteRT converter environment, no cached
    conversion) and MNN's converter turned off."""
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("DEPLOYKIT_MNN_CONVERTER", "off")


def _check_carried(manifest: BundleManifest, bundle: Path, suffix: str) -> None:
    """The bundle holds the converted file and its .json, both hashed, and not the .onnx."""
    stem = Path(manifest.model_file).stem
    assert manifest.model_file == f"{stem}{suffix}"
    assert sorted(manifest.files) == sorted([f"{stem}{suffix}", f"{stem}.json", REPORT, REPORT_HTML])
    assert not list(bundle.glob("*.onnx"))
    for name, recorded in manifest.files.items():
        assert file_sha256(bundle / name) == recorded


def _opens_where_nothing_converts(bundle: Path, copy: Path, photo: Path) -> None:
    """The copied bundle opens, predicts and answers as the original; a changed .json is refused by name."""
    shutil.copytree(bundle, copy)
    x = np.random.default_rng(5).random((1, 3, 32, 32), dtype=np.float32)
    with deploykit.load(copy) as session:
        got = session.run({"images": x})["logits"]
        assert session.model_path.parent == copy and list(session.inputs) == ["images"]
    with deploykit.load(bundle) as session:
        np.testing.assert_array_equal(got, session.run({"images": x})["logits"])
    result = CliRunner().invoke(app, ["predict", str(copy), str(photo), "--json"])
    assert result.exit_code == 0, result.output
    io = copy / f"{Path(read_bundle(copy).manifest.model_file).stem}.json"
    io.write_text(io.read_text().replace('"images"', '"pictures"'))
    with pytest.raises(BundleError, match=rf"'{io.name}' has SHA-256 .*the file was changed or replaced"):
        deploykit.load(copy)


def test_an_mnn_choice_travels_as_its_converted_file_and_opens_where_nothing_converts(
    classifier_path, photos, tmp_path, monkeypatch
):
    if get_backend("mnn").unavailable_reason():
        missing_asset("the mnn backend's runtime", get_backend("mnn").unavailable_reason() or "")
    plan = OptimizePlan(quantize=False, backends=["mnn"], threads=[1], time_budget="20s")
    manifest = _converted_bundle(classifier_path, photos, tmp_path / "deploy", plan)
    assert manifest.backend == "mnn"
    _check_carried(manifest, tmp_path / "deploy", ".mnn")
    _hidden_converters(monkeypatch, tmp_path)
    _opens_where_nothing_converts(tmp_path / "deploy", tmp_path / "copy", next(photos.glob("*.jpg")))
    result = CliRunner().invoke(app, ["bench", str(tmp_path / "deploy"), "--recheck"])
    assert result.exit_code == 2
    assert f"the bundle holds {manifest.model_file}, mnn's conversion of the searched model" in result.output
    assert f"deploykit bench {classifier_path} -b mnn --threads 1" in result.output


@pytest.mark.converter
@pytest.mark.slow
def test_a_litert_choice_travels_as_its_tflite_and_opens_where_nothing_converts(
    classifier_path, photos, tmp_path, monkeypatch
):
    """LiteRT searched with its own dynamic-range INT8 file as a variant of LiteRT alone; the bundle carries
    the chosen .tflite (the weights option spent) and opens with the converter environment hidden."""
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(CACHE))
    if get_backend("litert").unavailable_reason() or get_backend("litert").conversion.onnx_unavailable_reason():
        pytest.skip(f"no litert converter environment: {get_backend('litert').conversion.onnx_unavailable_reason()}")
    plan = OptimizePlan(backends=["litert"], threads=[1], time_budget="40s", max_drop="50%", engines=("ort",))
    report = optimize(classifier_path, photos, plan, output=tmp_path / "deploy")
    made = {v.name: v for v in report.variants}
    assert made["int8-litert"].backend == "litert" and made["int8-litert"].options == {"weights": "int8"}
    assert "int8-ort" in made  # made for the other backends; LiteRT runs its own reduced files, and says so
    assert any("int8-ort: not run (litert runs the reduced files its own converter makes" in n for n in report.notes)
    assert "f16-litert" not in made or "f16" in get_backend("litert").precisions("cpu")
    labels = [c.label for c in report.candidates]
    assert any(label.endswith(" int8 int8-litert") for label in labels), labels
    manifest = read_bundle(tmp_path / "deploy").manifest
    assert manifest.backend == "litert" and "weights" not in manifest.options
    _check_carried(manifest, tmp_path / "deploy", ".tflite")
    _hidden_converters(monkeypatch, tmp_path)
    assert get_backend("litert").conversion.onnx_unavailable_reason() is not None
    _opens_where_nothing_converts(tmp_path / "deploy", tmp_path / "copy", next(photos.glob("*.jpg")))


@pytest.mark.converter
@pytest.mark.slow
def test_litert_carries_its_int8_file_with_the_weights_option_spent(classifier_path, tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(CACHE))
    backend = get_backend("litert")
    if backend.unavailable_reason() or backend.conversion.onnx_unavailable_reason():
        pytest.skip(f"no litert converter environment: {backend.conversion.onnx_unavailable_reason()}")
    carried = backend.conversion.carry(Model.open(classifier_path), {"weights": "int8", "threads": 1}, tmp_path, "m")
    assert carried is not None and carried.spent == ("weights",)
    assert [f.name for f in carried.files] == ["m.tflite", "m.json"]
    _hidden_converters(monkeypatch, tmp_path)
    with deploykit.load(carried.model_file, backend="litert") as session:
        assert session.info.providers[2] == "int8 weights"
        assert session.info.precision_label == "int8 (float layers f32)"  # int8 weights, float activations
        assert list(session.inputs) == ["images"] and list(session.outputs) == ["logits"]
