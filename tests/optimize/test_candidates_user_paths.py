"""What the variants step says names the user's files, never the working copies in its temporary folder."""

from __future__ import annotations

import shutil

from typer.testing import CliRunner

from cli.main import app


def test_a_bad_photo_is_named_by_the_users_path(classifier_path, photos, tmp_path):
    folder = tmp_path / "images"
    shutil.copytree(photos, folder)
    (folder / "bad.jpg").write_text("not an image")
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "--images", str(folder), "-o",
                                      str(tmp_path / "deploy"), "-b", "onnxruntime", "--threads", "1",
                                      "--time-budget", "30s", "--quantizer", "ort"])  # fmt: skip
    said = " ".join(result.output.split())
    assert "variant int8-ort: not made" in said, said
    assert f"image '{(folder / 'bad.jpg').resolve()}' | is not an image OpenCV can read" in said, said
    assert "deploykit-optimize-" not in said and "/calibration/" not in said, said
