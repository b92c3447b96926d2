"""The real deploykit CLI through typer's CliRunner: exit codes and messages."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_backends_json_lists_all_three():
    result = invoke("backends", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) >= {"onnxruntime", "openvino", "opencv"}
    for row in rows.values():
        assert row["available"] and "cpu" in [d.lower() for d in row["devices"]]


def test_backends_table():
    result = invoke("backends", "--options")
    assert result.exit_code == 0
    assert "onnxruntime" in result.stdout and "performance_hint" in result.stdout


def test_inspect_json(catalog_paths):
    result = invoke("inspect", catalog_paths["mlp_dynamic_batch"], "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 8]}]
    assert summary["op_histogram"] == {"MatMul": 2, "Add": 2, "Relu": 1}
    assert summary["parameter_count"] == 8 * 16 + 16 + 16 * 4 + 4
    assert summary["opsets"] == {"ai.onnx": 17}


def test_inspect_table(catalog_paths):
    result = invoke("inspect", catalog_paths["symbolic_sequence"])
    assert result.exit_code == 0
    assert "(1, seq, 4)" in result.stdout and "MatMul" in result.stdout


@pytest.mark.parametrize("backend", ["ort", "openvino", "opencv"])
def test_run_prints_outputs(catalog_paths, backend):
    result = invoke("run", catalog_paths["multi_io"], "--backend", backend, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [o["name"] for o in data["outputs"]] == ["z_sum", "a_prod", "m_diff"]
    assert data["outputs"][0]["shape"] == [2, 3]


def test_run_with_inputs_and_save(catalog_paths, tmp_path):
    a = np.ones((2, 3), np.float32)
    np.save(tmp_path / "a.npy", a)
    out = tmp_path / "out.npz"
    result = invoke(
        "run",
        catalog_paths["multi_io"],
        "-b",
        "ov",
        "-o",
        "precision=f32",
        "-i",
        f"a={tmp_path / 'a.npy'}",
        "-i",
        "b=random",
        "--save",
        out,
    )
    assert result.exit_code == 0, result.output
    saved = np.load(out)
    np.testing.assert_allclose(saved["z_sum"] - saved["m_diff"], 2 * saved["a_prod"], atol=1e-6)


def test_run_dynamic_shape(catalog_paths):
    result = invoke("run", catalog_paths["mlp_dynamic_batch"], "-i", "x=random:6x8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outputs"][0]["shape"] == [6, 4]


def test_error_is_one_paragraph_exit_1(tmp_path):
    result = invoke("run", tmp_path / "missing.onnx")
    assert result.exit_code == 1
    assert "error: model '" in result.stderr and "no such file. Hint:" in result.stderr
    assert "Traceback" not in result.output


def test_device_error_exit_1(catalog_paths):
    result = invoke("run", catalog_paths["multi_io"], "-b", "opencv", "-d", "cuda")
    assert result.exit_code == 1
    assert "device 'cuda' cannot be used" in result.stderr


def test_bad_input_option(catalog_paths):
    result = invoke("run", catalog_paths["multi_io"], "-i", "q=random")
    assert result.exit_code == 1
    assert "'q' is not an input of the model; inputs are a, b" in result.stderr
    result = invoke("run", catalog_paths["multi_io"], "-o", "threads")
    assert result.exit_code == 1 and "--option 'threads' | expected KEY=VALUE" in result.stderr


def test_unknown_backend_exit_1(catalog_paths):
    result = invoke("run", catalog_paths["multi_io"], "-b", "tflite")
    assert result.exit_code == 1 and "backend 'tflite' | is not registered" in result.stderr


def test_usage_error_exit_2():
    result = invoke("run")
    assert result.exit_code == 2


def test_debug_shows_the_exception(tmp_path):
    result = invoke("--debug", "inspect", tmp_path / "missing.onnx")
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "ModelNotFoundError"


def test_save_to_missing_directory_leaves_nothing(catalog_paths, tmp_path):
    result = invoke("run", catalog_paths["multi_io"], "--save", tmp_path / "no" / "out.npz")
    assert result.exit_code == 1 and "does not exist" in result.stderr
    assert not (tmp_path / "no").exists()


def test_inspect_model_with_external_data(tmp_path):
    import onnx

    from tests.assets.samples import tiny_classifier

    path = tmp_path / "external.onnx"
    onnx.save_model(tiny_classifier(size=16), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="external.onnx.data", size_threshold=0)  # fmt: skip
    result = invoke("inspect", path, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["external_data_bytes"] == (tmp_path / "external.onnx.data").stat().st_size > 0
    assert summary["parameter_count"] > 0
    run = invoke("run", path, "-b", "ort", "--json")
    assert run.exit_code == 0, run.output
