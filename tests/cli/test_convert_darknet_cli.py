"""`deploykit convert darknet` and `deploykit inspect CFG` through the real CLI."""

from __future__ import annotations

import json

import onnx
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.convert.darknet.convert import load_network
from deploykit.convert.darknet.weights import write_random_weights
from tests.assets.paths import REPO

CFG = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
runner = CliRunner()


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("dn") / "yolov3-tiny.weights"
    write_random_weights(load_network(CFG), path, seed=2)
    return path


def test_convert_darknet_decoded_with_labels(tmp_path, weights):
    labels = tmp_path / "coco.names"
    labels.write_text((REPO / "models" / "labels" / "coco.names").read_text())
    out, report = tmp_path / "y.onnx", tmp_path / "conv.json"
    result = runner.invoke(
        app,
        [
            "convert",
            "darknet",
            str(CFG),
            str(weights),
            "-o",
            str(out),
            "--head",
            "decoded",
            "--batch",
            "dynamic",
            "--labels",
            str(labels),
            "--report",
            str(report),
            "--verify-backends",
            "ort,openvino,opencv",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "'deploykit convert darknet --report FILE' is deprecated; use --report FOLDER" in result.stderr
    data = json.loads(report.read_text())  # the 0.1 form: the file named, as before
    assert data["passed"] and data["converter"] == "darknet" and data["parameter_count"] == 8_858_734
    model = onnx.load(str(out))
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta["deploykit.labels"])[0] == "person" and meta["deploykit.task"] == "detect"
    assert [o.name for o in model.graph.output] == ["detections"]
    dims = [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 13 * 13 * 3 + 26 * 26 * 3, 85]


def test_convert_darknet_errors_exit_1(tmp_path, weights):
    result = runner.invoke(app, ["convert", "darknet", str(weights), str(CFG), "-o", str(tmp_path / "x.onnx")])
    assert result.exit_code == 1 and "a Darknet cfg is a small text file. Hint: check the order" in result.stderr
    result = runner.invoke(
        app, ["convert", "darknet", str(CFG), str(weights), "-o", str(tmp_path / "x.onnx"), "--input-size", "420x416"]
    )
    assert result.exit_code == 1 and "input size 420x416 | is not a multiple of the network stride 32" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_inspect_cfg_layer_table():
    result = runner.invoke(app, ["inspect", str(CFG), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["stride"] == 32 and data["parameters"] == 8_858_734
    layer = data["layers"][11]
    assert layer["type"] == "maxpool" and layer["output"] == [512, 13, 13] and layer["detail"] == "2x2/1 pad 1"
    assert data["layers"][20]["detail"] == "from 19,8"
    table = runner.invoke(app, ["inspect", str(CFG), "--input-size", "608x608"])
    assert table.exit_code == 0 and "608x608x3" in table.stdout


def test_without_an_independent_oracle_the_verdict_word_is_unverified(tmp_path, weights):
    """One word per verdict: the converter prints ``unverified`` (with why), as the JSON and the demo do."""
    out, report = tmp_path / "y.onnx", tmp_path / "conv"
    result = runner.invoke(app, ["convert", "darknet", str(CFG), str(weights), "-o", str(out), "--oracle", "none",
                                 "--verify-backends", "onnxruntime,openvino", "--report", str(report)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "unverified" in result.stdout and "agree (no independent oracle)" not in result.output
    data = json.loads((report / "report.json").read_text())
    verdicts = data["verification"]["verdicts"] if "verification" in data else data["verdicts"]
    assert {v["status"] for v in verdicts} == {"unverified"} and {v["label"] for v in verdicts} == {"unverified"}
