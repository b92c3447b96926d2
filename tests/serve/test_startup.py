"""The start-up policy of ``serve``: a server that could never answer an inference does not start (or stops at
once) with the reasons and exit 1, instead of running "not ready" forever (``server._refuse_if_nothing_can_serve``,
``cli/serve_cmd.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from tests.assets.paths import REPO
from tests.fuzz.harness import invoke_checked, usage_said

FREE_PORTS = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "none"]


def _unloadable(path: Path) -> Path:
    """A valid ONNX graph whose only op no runtime has (a custom domain): it cannot load anywhere."""
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example.nowhere")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.nowhere", 1)]
    )
    model.ir_version = 8  # what every runtime here reads
    onnx.save(model, path)
    return path


def test_a_server_whose_only_model_cannot_load_exits_1_with_the_reason(tmp_path):
    model = _unloadable(tmp_path / "broken.onnx")
    done = subprocess.run(
        [sys.executable, "-m", "deploykit.cli.main", "serve", str(model), *FREE_PORTS],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "no model can be served, so the server stops" in errors[0] and "model 'broken'" in errors[0]
    assert "NoSuchOp" in errors[0] and "Traceback" not in done.stderr
    assert not any(line.startswith("not ready:") for line in done.stderr.splitlines()), done.stderr


def test_no_endpoint_at_all_is_a_usage_error(tmp_path):
    model = _unloadable(tmp_path / "m.onnx")
    result = invoke_checked(["serve", model, "--http-port", "none", "--grpc-port", "off"])
    said = usage_said(result.output)
    assert result.exit_code == 2 and "Invalid value for '--http-port' / '--grpc-port': both are none" in said
