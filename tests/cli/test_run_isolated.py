"""``deploykit run`` runs the session in a worker process: a runtime crash is an error naming the
signal (exit 1, a message), a deploykit error in the worker comes back as the same error."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deploykit.backends.registry import get_backend
from deploykit.cli.main import app
from tests.assets.paths import missing_asset

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _mod_edge_cases(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``test_mod_float_edge_cases_fmod_0_float32`` of the ONNX node tests: OpenCV 5.0's Mod dies
    of SIGFPE on these values (a zero divisor, infinities, NaN)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [14])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [14])
    graph = helper.make_graph([helper.make_node("Mod", ["x", "y"], ["z"], fmod=0)], "mod", [x, y], [z])
    path = tmp_path / "mod.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    inf, nan = np.inf, np.nan
    xs = np.array([0, -0.0, 0, -0.0, -3, 3, -1, 1, inf, -inf, 1, 1, nan, 1], np.float32)
    ys = np.array([-2, 2, 2, -2, inf, inf, -inf, -inf, 2, 2, 0, -0.0, 2, nan], np.float32)
    np.save(tmp_path / "x.npy", xs)
    np.save(tmp_path / "y.npy", ys)
    return path, tmp_path / "x.npy", tmp_path / "y.npy"


def test_a_runtime_crash_is_an_error_with_its_signal(tmp_path: Path) -> None:
    if not get_backend("opencv").is_available():
        missing_asset("the opencv backend's runtime", str(get_backend("opencv").unavailable_reason()))
    model, xs, ys = _mod_edge_cases(tmp_path)
    result = _invoke("run", model, "-b", "opencv", "-i", f"x={xs}", "-i", f"y={ys}")
    assert result.exit_code == 1, result.output
    assert "error: backend 'opencv' | crashed running 'mod.onnx': the isolated run was killed by signal SIGFPE" in (
        result.stderr
    ), result.stderr
    assert "Hint: the runtime itself failed" in result.stderr
    # the same model and inputs on a runtime that does not crash: the command itself is fine
    fine = _invoke("run", model, "-b", "reference", "-i", f"x={xs}", "-i", f"y={ys}")
    assert fine.exit_code == 0, fine.output


def test_a_plugin_that_aborts_is_an_error_with_its_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    model, _, _ = _mod_edge_cases(tmp_path)
    result = _invoke("run", model, "-b", "crasher")
    assert result.exit_code == 1, result.output
    assert "error: backend 'crasher' | crashed running 'mod.onnx': the isolated run was killed by signal SIGABRT" in (
        result.stderr
    ), result.stderr


def test_a_deploykit_error_in_the_worker_is_the_same_error_here(tmp_path: Path) -> None:
    model, _, _ = _mod_edge_cases(tmp_path)
    result = _invoke("run", model, "-i", "x=random:3")
    assert result.exit_code == 2, result.output
    assert " ".join(result.stderr.split()) == (
        "error: --shape x:3 | does not fit input 'x' (14,). "
        "Hint: keep the rank and every fixed size; choose only the dynamic ones."
    )


def test_sequence_outputs_show_one_row_per_tensor(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    pieces = helper.make_tensor_sequence_value_info("pieces", TensorProto.FLOAT, None)
    node = helper.make_node("SplitToSequence", ["x"], ["pieces"], keepdims=1)
    graph = helper.make_graph([node], "split", [x], [pieces])
    path = tmp_path / "split.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    result = _invoke("run", path, "-b", "reference", "--json", "--save", tmp_path / "out.npz")
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "out.npz") as saved:
        assert sorted(saved.files) == ["pieces[0]", "pieces[1]"]
        assert saved["pieces[0]"].shape == (1,)
