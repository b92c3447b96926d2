"""Special files are refused by what they are, up front: a FIFO would block the reader forever,
``/dev/zero`` never ends, a socket cannot be read (issue #21's hangs). The real CLI runs in a
subprocess with a time limit, so a regression shows as a failure, not as a hung suite."""

from __future__ import annotations

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
    assert result.returncode == 1
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
