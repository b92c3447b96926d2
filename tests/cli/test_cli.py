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
        "-O",
        "precision=f32",
        "-i",
        f"a={tmp_path / 'a.npy'}",
        "-i",
        "b=random",
        "-o",
        out,
    )
    assert result.exit_code == 0, result.output
    assert "deprecated" not in result.stderr
    saved = np.load(out)
    np.testing.assert_allclose(saved["z_sum"] - saved["m_diff"], 2 * saved["a_prod"], atol=1e-6)


def test_old_spellings_still_work_for_one_release_and_say_so(catalog_paths, tmp_path):
    old = tmp_path / "old.npz"
    result = invoke("run", catalog_paths["multi_io"], "-b", "ov", "-o", "precision=f32", "--save", old)
    assert result.exit_code == 0, result.output
    assert "warning: 'deploykit run -o' is deprecated; use -O (-o is the output path in every command)" in result.stderr
    assert "warning: 'deploykit run --save' is deprecated; use --output." in result.stderr
    assert set(np.load(old).files) == {"z_sum", "a_prod", "m_diff"}
    result = invoke("compare", catalog_paths["multi_io"], "-b", "ort", "--reference", "none", "-o", "threads=1")
    assert result.exit_code == 0, result.output
    assert "'deploykit compare --reference' is deprecated; use --oracle" in result.stderr
    assert "'deploykit compare -o' is deprecated; use -O" in result.stderr
    result = invoke("quantize", catalog_paths["multi_io"], "-o", tmp_path / "q.onnx", "--engine=tensorrt")
    assert result.exit_code == 2 and "'deploykit quantize --engine' is deprecated; use --quantizer" in result.stderr
    assert "--quantizer 'tensorrt' | is not one of ort, nncf" in result.stderr


def test_the_vocabulary_table_rewrites_only_what_it_names():
    from deploykit.cli.vocabulary import DEPRECATED, command_of, modernize

    said: list[str] = []
    assert command_of(["--debug", "convert", "torch", "m.py:f", "-o", "x"]) == ("convert torch", 3)
    assert modernize(["predict", "m.onnx", "photos/", "--out", "rows/"], said.append) == [
        "predict", "m.onnx", "photos/", "--output", "rows/"]  # fmt: skip
    assert modernize(["run", "m.onnx", "-o", "out.npz", "-o", "threads=2"], said.append) == [
        "run", "m.onnx", "-o", "out.npz", "-O", "threads=2"]  # fmt: skip
    assert modernize(["convert", "torch", "m.py:f", "-o", "m.onnx"], said.append) == [
        "convert", "torch", "m.py:f", "-o", "m.onnx"]  # fmt: skip
    assert modernize(["bench", "m.onnx", "--", "-o"], said.append) == ["bench", "m.onnx", "--", "-o"]
    assert len(said) == 2 and all(d.new.startswith("-") and (d.old != d.new or d.drop_value) for d in DEPRECATED)


def test_one_flag_means_one_thing_in_every_command():
    """-o is an output path, -O a backend option, no old spelling left: read from the real typer app."""
    import typer.main

    from deploykit.cli.main import app as the_app

    group = typer.main.get_command(the_app)
    seen: dict[str, set[str]] = {}

    def walk(command):
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
        for param in getattr(command, "params", []):
            long = next((o for o in param.opts if o.startswith("--")), "")
            for flag in param.opts:
                seen.setdefault(flag, set()).add(long)

    walk(group)
    assert seen["-o"] == {"--output"} and seen["-O"] == {"--option"} and seen["--report"] == {"--report"}
    assert "--out" not in seen and "--save" not in seen and "--reference" not in seen


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
    assert result.exit_code == 2
    assert "'q' is not an input of the model; inputs are a, b" in result.stderr
    result = invoke("run", catalog_paths["multi_io"], "-O", "threads")
    assert result.exit_code == 2 and "--option 'threads' | expected KEY=VALUE" in result.stderr


def test_unknown_backend_exit_1(catalog_paths):
    result = invoke("run", catalog_paths["multi_io"], "-b", "coreml")
    assert result.exit_code == 1 and "backend 'coreml' | is not registered" in result.stderr


def test_usage_error_exit_2():
    result = invoke("run")
    assert result.exit_code == 2


def test_debug_shows_the_exception(tmp_path):
    result = invoke("--debug", "inspect", tmp_path / "missing.onnx")
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "ModelNotFoundError"


def test_save_to_missing_directory_leaves_nothing(catalog_paths, tmp_path):
    result = invoke("run", catalog_paths["multi_io"], "--save", tmp_path / "no" / "out.npz")
    assert result.exit_code == 2 and "does not exist" in result.stderr
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
