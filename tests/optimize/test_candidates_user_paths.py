"""What the variants and accuracy steps say names the user's files, never the working links in their
temporary folder."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from cli.main import app


def _without_huffman_tables(jpeg: bytes) -> bytes:
    """The JPEG with every Huffman table zeroed: both ends whole, so only its decoder can tell."""
    data = bytearray(jpeg)
    scan = data.find(b"\xff\xda")
    position = data.find(b"\xff\xc4")
    while 0 <= position < scan:
        length = int.from_bytes(data[position + 2 : position + 4], "big")
        data[position + 4 : position + 2 + length] = bytes(length - 2)
        position = data.find(b"\xff\xc4", position + 2)
    return bytes(data)


@pytest.mark.parametrize("seed", ["0", "1"])  # the seeded split puts the photo among the calibration or the accuracy
def test_a_photo_only_decoding_shows_broken_stops_optimize_naming_the_users_file(
    seed, classifier_path, photos, tmp_path
):
    from deploykit.vision.image import image_file_problem

    folder = tmp_path / "photos"
    shutil.copytree(photos, folder)
    broken = folder / "broken.jpg"
    broken.write_bytes(_without_huffman_tables((photos / "dog.jpg").read_bytes()))
    assert image_file_problem(broken) is None
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "--images", str(folder), "-o",
                                      str(tmp_path / "deploy"), "-b", "onnxruntime", "--threads", "1",
                                      "--time-budget", "30s", "--quantizer", "ort", "--seed", seed])  # fmt: skip
    said = " ".join(result.output.split())
    assert result.exit_code == 1, said
    assert f"image '{broken.resolve()}' | is not an image OpenCV can read" in said, said
    assert "deploykit-optimize-" not in said and "not made" not in said, said
    assert not (tmp_path / "deploy").exists()
