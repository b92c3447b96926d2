"""A photo deploykit cannot read, among the photos a command is given: every command that reads a set of
the user's photos refuses it before any work, naming every bad file and how many of the set they are."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.fuzz.harness import run_cli
from tests.quantize.conftest import classifier_path, photos

__all__ = ["classifier_path", "photos"]

BAD = {
    "cut.jpg": "the JPEG data ends before its end-of-image marker (the file is truncated)",
    "notes.jpg": "is not an image OpenCV can read",
    "empty.jpg": "is empty (0 bytes)",
    "cut.png": "the PNG has no IEND chunk (the file is truncated)",
}


def _said(result: object) -> str:
    return " ".join((getattr(result, "stderr", "") + getattr(result, "stdout", "")).split())


@pytest.fixture
def spoiled(photos: Path, tmp_path: Path) -> Path:
    """The real photos, with a truncated JPEG, a text file named .jpg, a zero-byte file and a truncated
    PNG among them (one of them inside a class folder)."""
    folder = tmp_path / "photos"
    shutil.copytree(photos, folder)
    jpeg = (folder / "dog.jpg").read_bytes()
    png = next(folder.glob("*.png")).read_bytes()
    (folder / "cut.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (folder / "notes.jpg").write_text("these are my notes, not a photo\n")
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "cut.png").write_bytes(png[: len(png) // 2])
    return folder


def _commands(model: Path, folder: Path, out: Path) -> dict[str, list[str]]:
    return {
        "quantize --calibrate": ["quantize", str(model), "-o", str(out / "q.onnx"), "-c", str(folder), "--no-speed"],
        "optimize --images": ["optimize", str(model), "--images", str(folder), "-o", str(out / "bundle"),
                              "-b", "onnxruntime", "--threads", "1", "--time-budget", "30s"],
        "compare --inputs": ["compare", str(model), "--inputs", str(folder), "-b", "onnxruntime"],
        "bench --inputs": ["bench", str(model), "--inputs", str(folder), "-b", "onnxruntime", "--iterations", "5"],
        "predict FOLDER": ["predict", str(model), str(folder)],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["quantize --calibrate", "optimize --images", "compare --inputs",
                                     "bench --inputs", "predict FOLDER"])  # fmt: skip
def test_every_command_refuses_the_set_naming_every_bad_photo(command, classifier_path, spoiled, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    total = len([p for p in spoiled.iterdir() if p.is_file()])
    result = CliRunner().invoke(app, _commands(classifier_path, spoiled, out)[command])
    said = _said(result)
    assert result.exit_code == 1, said
    assert f"images '{spoiled}' | {len(BAD)} of {total} files are not whole images deploykit can read" in said, said
    for name, problem in BAD.items():
        assert f"'{name}': {problem}" in said, said
    assert "Traceback" not in said
    assert list(out.iterdir()) == [], "a refused set wrote nothing"


def test_quantize_names_a_bad_photo_in_a_class_folder_and_in_the_eval_folder(classifier_path, photos, tmp_path):
    calibrate = tmp_path / "calibrate"
    shutil.copytree(photos, calibrate / "dog")
    (calibrate / "dog" / "empty.jpg").write_bytes(b"")
    result = CliRunner().invoke(app, ["quantize", str(classifier_path), "-o", str(tmp_path / "q.onnx"),
                                      "-c", str(calibrate), "--no-speed"])  # fmt: skip
    assert result.exit_code == 1 and "'dog/empty.jpg': is empty (0 bytes)" in _said(result), _said(result)
    evaluate = tmp_path / "evaluate"
    shutil.copytree(photos, evaluate)
    (evaluate / "notes.jpg").write_text("not a photo")
    result = CliRunner().invoke(app, ["quantize", str(classifier_path), "-o", str(tmp_path / "q.onnx"),
                                      "-c", str(photos), "--eval", str(evaluate), "--no-speed"])  # fmt: skip
    said = _said(result)
    assert result.exit_code == 1 and f"images '{evaluate}' | 1 of" in said, said
    assert "'notes.jpg': is not an image OpenCV can read" in said and not (tmp_path / "q.onnx").exists()


def test_predict_refuses_bad_photos_among_several_sources_before_the_first_frame(classifier_path, photos, tmp_path):
    cut = tmp_path / "cut.jpg"
    data = (photos / "dog.jpg").read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    result = CliRunner().invoke(app, ["predict", str(classifier_path), str(photos / "dog.jpg"), str(cut),
                                      "--json", "-"])  # fmt: skip
    said = _said(result)
    assert result.exit_code == 1 and f"images | 1 of 2 files is not a whole image deploykit can read: '{cut}'" in said
    assert '"path"' not in result.stdout, "no frame was predicted before the refusal"


def test_the_screen_reads_only_the_ends_of_a_whole_photo_and_all_of_one_with_a_trailer(photos, tmp_path):
    from deploykit.vision.image import SCREEN_HEAD_BYTES, image_file_problem

    big = max(photos.glob("*.jpg"), key=lambda p: p.stat().st_size)
    data = big.read_bytes()
    assert len(data) > 2 * SCREEN_HEAD_BYTES, "the test needs a photo larger than what the screen reads"
    assert image_file_problem(big) is None
    trailer = tmp_path / "motion.jpg"  # a motion photo: a video after the image's end marker
    trailer.write_bytes(data + np.random.default_rng(0).bytes(200_000).replace(b"\xff", b"\x00"))
    assert image_file_problem(trailer) is None
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) - 10])
    assert image_file_problem(cut) == BAD["cut.jpg"]
    dot = tmp_path / "dot.png"
    assert cv2.imwrite(str(dot), np.zeros((1, 1, 3), np.uint8))
    assert image_file_problem(dot) == "is 1x1 pixels; at least 2x2 is needed"
    png = max(photos.glob("*.png"), key=lambda p: p.stat().st_size)
    assert image_file_problem(png) is None
    (tmp_path / "cut.png").write_bytes(png.read_bytes()[:-20])
    assert image_file_problem(tmp_path / "cut.png") == BAD["cut.png"]


def test_the_real_command_line_refuses_and_names_them(classifier_path, spoiled, tmp_path):
    done = run_cli(["quantize", classifier_path, "-o", tmp_path / "q.onnx", "-c", spoiled, "--no-speed"], cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said
    assert all(f"'{name}': {problem}" in said for name, problem in BAD.items()), said
    assert "Traceback" not in said and not (tmp_path / "q.onnx").exists()
