"""Special files are refused by what they are, up front: a FIFO would block the reader forever,
``/dev/zero`` never ends, a socket cannot be read (issue #21's hangs). The real CLI runs in a
subprocess with a time limit, so a regression shows as a failure, not as a hung suite."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.assets.paths import REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")


def _deploykit(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from deploykit.cli.main import main; sys.argv[0] = 'deploykit'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.fixture()
def fifo(tmp_path):
    path = tmp_path / "model.onnx"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["run"], ["inspect"], ["compare"], ["bench", "--iterations", "2"]])
def test_a_fifo_given_as_a_model_is_refused_at_once(fifo, command):
    result = _deploykit(*command, str(fifo))
    assert result.returncode == 1, result.stderr
    assert f"model '{fifo}' | is a named pipe (FIFO): reading it would wait for a writer" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_character_device_is_not_a_model():
    result = _deploykit("run", "/dev/zero")
    assert result.returncode == 1
    assert "model '/dev/zero' | is a character device, not a file; expected a regular .onnx file" in result.stderr


def test_a_socket_is_not_a_model(tmp_path):
    path = tmp_path / "s.onnx"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        result = _deploykit("inspect", str(path))
    finally:
        server.close()
    assert result.returncode == 1 and "is a socket, not a file" in result.stderr


def test_a_fifo_given_as_inputs_is_refused(tmp_path, catalog_paths):
    pipe = tmp_path / "inputs.npz"
    os.mkfifo(pipe)
    result = _deploykit("run", str(catalog_paths["conv_bn_act"]), "-i", str(pipe))
    assert result.returncode == 2
    assert (
        f"inputs file '{pipe}' | is a named pipe (FIFO)" in result.stderr
        and "expected a regular .npz file" in result.stderr
    )


def test_a_fifo_given_as_an_image_is_refused(tmp_path):
    from deploykit.errors import InputError
    from deploykit.vision.image import load_image

    pipe = tmp_path / "photo.jpg"
    os.mkfifo(pipe)
    with pytest.raises(InputError, match=r"image '.*photo.jpg' \| is a named pipe \(FIFO\).*expected an image file"):
        load_image(pipe)


def test_a_path_too_long_is_named_short(tmp_path):
    from deploykit.errors import ModelNotFoundError
    from deploykit.model import check_model_path

    path = "x" * 5000 + ".onnx"
    with pytest.raises(ModelNotFoundError) as caught:
        check_model_path(path)
    message = str(caught.value)
    assert "(5005 characters)" in message and len(message) < 600


@pytest.mark.parametrize(
    "args, message, code",
    [
        (["convert", "darknet", "{fifo}", "{cfg_weights}", "-o", "{tmp}/x.onnx"], "cfg '{fifo}' | is a named pipe", 1),
        (["convert", "darknet", "{cfg}", "{fifo}", "-o", "{tmp}/x.onnx"], "weights '{fifo}' | is a named pipe", 1),
        (["convert", "darknet", "{cfg}", "/dev/zero", "-o", "{tmp}/x.onnx"], "weights '/dev/zero' | is a character", 1),
        (["predict", "{classifier}", "{image}", "--labels", "{fifo}"], "labels '{fifo}' | is a named pipe", 2),
        (["inspect", "{fifo}.cfg"], "cfg '{fifo}.cfg' | is a named pipe", 1),
        (["report", "{fifo}"], "report '{fifo}' | is a named pipe", 1),
        (["report", "merge", "{fifo}", "{fifo}.cfg", "-o", "{tmp}/m.html"], "report '{fifo}' | is a named pipe", 1),
        (["run", "{dynamic}", "-i", "x={fifo}.npy"], "--input 'x={fifo}.npy' | is a named pipe", 2),
        (["run", "{dynamic}", "-i", "x=/dev/zero"], "--input 'x=/dev/zero' | is a character device", 2),  # any suffix
        (["quantize", "{classifier}", "-o", "{tmp}/q.onnx", "-c", "{folder}"], "2 of 3 files are not whole images deploykit can read: 'zero.png': is a character device, not a file; "
         "'zz.jpg': is a named pipe", 1),
    ],
)  # fmt: skip
def test_every_reader_refuses_special_files_by_kind(tiny, tmp_path, args, message, code):
    """The second sweep (issue 21): cfg, weights, labels, reports, .npy inputs and image folders said 'no such
    file', or blocked on a FIFO, or read /dev/zero until the OOM killer came. A model, cfg, weights, report or
    photo that is no file is a failure (1); a --labels or --input value that is none is a usage error (2)."""
    fifo = tmp_path / "pipe"
    for path in (fifo, tmp_path / "pipe.cfg", tmp_path / "pipe.npy"):
        os.mkfifo(path)
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(tiny["image"].read_bytes())
    os.mkfifo(folder / "zz.jpg")
    (folder / "zero.png").symlink_to("/dev/zero")
    values = {**{k: str(v) for k, v in tiny.items()}, "fifo": str(fifo), "tmp": str(tmp_path), "folder": str(folder),
              "cfg_weights": str(tiny["weights"])}  # fmt: skip
    result = _deploykit(*(a.format(**values) for a in args))
    assert result.returncode == code, result.stderr
    assert message.format(**values) in result.stderr and "Traceback" not in result.stderr


def test_a_fifo_and_dev_zero_in_a_predict_folder_are_error_rows(tiny, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(tiny["image"].read_bytes())
    os.mkfifo(folder / "zz.jpg")
    (folder / "zero.png").symlink_to("/dev/zero")
    result = _deploykit("predict", str(tiny["classifier"]), str(folder), "--out", str(tmp_path / "rows"))
    assert result.returncode == 0, result.stderr
    rows = (tmp_path / "rows").glob("part-*.jsonl")
    errors = {r["path"].rsplit("/", 1)[-1]: r["error"] for f in rows for line in f.read_text().splitlines()
              if (r := json.loads(line))["status"] == "error"}  # fmt: skip
    assert "is a named pipe (FIFO)" in errors["zz.jpg"] and "is a character device" in errors["zero.png"]
