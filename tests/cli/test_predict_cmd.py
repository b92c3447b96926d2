"""``deploykit predict`` asks the model's task: from ``--task``, the metadata (``deploykit.task``), or, deprecated
and said on stderr, what the task plug-ins recognise in its outputs; a task without an app pipeline is refused."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.tasks.registry import pipeline_tasks
from tests.assets.paths import darknet_image
from tests.assets.samples import IR_VERSION, OPSET, tiny_classifier


def _invoke(*args):
    return CliRunner().invoke(app, ["predict", *(str(a) for a in args)])


def _save(model, path, task: str | None = None):
    if task is not None:
        model.metadata_props.add(key="deploykit.task", value=task)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def image():
    return darknet_image("dog.jpg")


def test_a_model_without_a_task_runs_as_recognised_with_a_deprecation_line_naming_task(tmp_path, image):
    model = _save(tiny_classifier(), tmp_path / "tiny.onnx")
    result = _invoke(model, image, "-o", tmp_path / "result.json")
    assert result.exit_code == 0, result.output
    assert "names no task in its metadata" in result.stderr and "Pass --task classify" in result.stderr
    assert json.loads((tmp_path / "result.json").read_text())["task"] == "classify"
    stated = _invoke(model, image, "--task", "classify")
    assert stated.exit_code == 0 and "deprecated" not in stated.stderr
    stamped = _invoke(_save(tiny_classifier(), tmp_path / "stamped.onnx", "classify"), image)
    assert stamped.exit_code == 0 and "deprecated" not in stamped.stderr
    assert "top 5 for dog.jpg" in stamped.stdout


def test_outputs_no_task_recognises_and_a_task_without_a_pipeline_are_refused_with_a_hint(tmp_path, image):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["images"], ["features"])],
        "features",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 3, 32, 32])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    unknown = _invoke(_save(model, tmp_path / "features.onnx"), image)
    assert unknown.exit_code != 0
    assert "model 'features.onnx' | names no task in its metadata" in unknown.stderr
    assert f"pass --task ({' or '.join(pipeline_tasks())})" in unknown.stderr
    embed = _invoke(_save(model, tmp_path / "encoder.onnx", "embed"), image)
    assert embed.exit_code != 0
    assert f"task 'embed' | has no app pipeline; an app pipeline runs {', '.join(pipeline_tasks())}" in embed.stderr
    wrong = _invoke(tmp_path / "features.onnx", image, "--task", "segmentation")
    assert "--task 'segmentation' | is not a registered task" in wrong.stderr


def test_a_classifier_draws_nothing_and_says_so(tmp_path, image):
    model = _save(tiny_classifier(), tmp_path / "tiny.onnx", "classify")
    one = _invoke(model, image, "--draw", tmp_path / "drawn.jpg")
    assert one.exit_code == 0 and "the classify task draws nothing" in one.stderr
    assert not (tmp_path / "drawn.jpg").exists()
    many = _invoke(model, image, image, "--draw", tmp_path / "drawn")
    assert many.exit_code != 0 and "the classify task draws none" in many.stderr
