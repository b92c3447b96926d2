"""Model metadata that lies (issue 21): every ``deploykit.*`` value goes through one typed reader
(``deploykit.metadata``), so a wrong type, a negative or absurd size, NaN or labels that are not strings
is one error naming the key and what was expected — never a traceback, an OpenCV allocation of 40 GB,
or a silent default."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploykit
from deploykit.errors import MetadataError
from deploykit.metadata import read_metadata
from tests.fuzz.harness import invoke_checked


def _dynamic_classifier(path, metadata: dict[str, str]):
    """images (N, 3, H, W) → (N, 5): a classifier whose image size only its metadata can give."""
    import numpy as np

    weight = numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (5, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["g"]),
        helper.make_node("Flatten", ["g"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes, "dynamic_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 5])], [weight],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in {"deploykit.task": "classify", **metadata}.items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return path


SIZE = json.dumps({"size": [32, 32]})


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("deploykit.input", "{size: [32", "is not valid JSON (Expecting property name"),
        ("deploykit.input", "[1, 2]", "is a JSON list; expected an object"),
        ("deploykit.input", json.dumps({"size": "big"}), "'size' is \"big\"; expected [height, width]"),
        ("deploykit.input", json.dumps({"size": [-32, 32]}), "'size' is [-32, 32]; expected [height, width], two"),
        ("deploykit.input", json.dumps({"size": [100000, 100000]}), "two integers from 1 to 16384"),
        ("deploykit.input", '{"size": [32, 32], "scale": NaN}', "'scale' is NaN; expected a finite number"),
        ("deploykit.input", json.dumps({"size": [32, 32], "std": [0, 0, 0]}), "'std' is [0, 0, 0]; expected a list"),
        ("deploykit.input", json.dumps({"size": [32, 32], "mean": "x"}), "'mean' is \"x\"; expected a list of 3"),
        ("deploykit.input", json.dumps({"size": [32, 32], "channel_order": "XYZ"}), "expected one of RGB, BGR"),
        ("deploykit.input", json.dumps({"size": [32, 32], "pad_value": "grey"}), "expected a number from 0 to 1"),
        ("deploykit.labels", "[1,2", "is not valid JSON"),
        ("deploykit.labels", json.dumps([1, 2, 3, 4, 5]), "expected a JSON list of class names (strings)"),
        ("deploykit.task", "panoptic", 'is "panoptic"; expected one of detect, classify'),
    ],
)
def test_a_bad_metadata_value_is_one_error_that_names_the_key(tmp_path, tiny, key, value, message):
    photo = tiny["image"]
    metadata = {"deploykit.input": SIZE, key: value}
    model = _dynamic_classifier(tmp_path / "lying.onnx", metadata)
    result = invoke_checked(["predict", model, photo, "-o", tmp_path / "rows.json"], reads=[model],
                            writes=[tmp_path / "rows.json"])  # fmt: skip
    assert result.exit_code == 1
    shown = " ".join(result.stderr.split())
    assert f"error: model 'lying.onnx' metadata '{key}' | " in shown and message in shown, result.stderr
    with pytest.raises(MetadataError, match=r"lying\.onnx"):
        deploykit.Classifier(model)


def test_metadata_that_is_right_still_drives_the_pipeline(tmp_path, tiny):
    photo = tiny["image"]
    stored = {"deploykit.input": json.dumps({"size": [24, 40], "channel_order": "BGR", "mean": [1, 2, 3],
                                             "std": [2, 2, 2], "resize": "stretch", "pad_value": 0.5}),
              "deploykit.labels": json.dumps(list("abcde"))}  # fmt: skip
    classifier = deploykit.Classifier(_dynamic_classifier(tmp_path / "ok.onnx", stored))
    assert classifier.size == (24, 40) and classifier.labels == list("abcde")
    assert (classifier.preprocess.channel_order, classifier.preprocess.resize) == ("BGR", "stretch")
    assert classifier.preprocess.mean == (1.0, 2.0, 3.0) and classifier.preprocess.pad_value == 128
    assert classifier(photo)[0].label in "abcde"


def test_foreign_ultralytics_keys_that_do_not_parse_are_unused_not_fatal():
    assert read_metadata({"imgsz": "[-5, 10]", "names": "{0: 'a',"}).size is None
    read = read_metadata({"imgsz": "640", "names": "{0: 'person', 1: 'bicycle'}", "task": "detect"})
    assert (read.size, read.size_source, read.labels, read.task) == (
        (640, 640),
        "Ultralytics imgsz metadata",
        ("person", "bicycle"),
        "detect",
    )


@pytest.mark.parametrize(
    "head, message",
    [
        ({"output": "y", "type": "yolo", "classes": 1, "anchors": [[float("nan"), 4]]}, "has anchors [[NaN, 4]]"),
        ({"output": "y", "type": "yolo", "classes": 0, "anchors": [[4, 4]]}, "has classes 0; expected an integer"),
        ({"output": "y", "type": "tiny", "classes": 1, "anchors": [[4, 4]]}, 'has type "tiny"; expected yolo'),
        ({"output": 3, "type": "yolo", "classes": 1, "anchors": [[4, 4]]}, "has output 3; expected the name"),
    ],
)
def test_darknet_heads_in_metadata_are_checked(head, message):
    with pytest.raises(MetadataError, match=r"metadata 'deploykit.darknet.heads' \| head 0 ") as caught:
        read_metadata({"deploykit.darknet.heads": json.dumps([head])}, "yolo.onnx")
    assert message in caught.value.message


def test_outputs_that_are_nan_are_no_ranking(tmp_path, tiny):
    """Sweep 21b: deploykit.input scale 1e308 made every pixel infinite and predict printed a top-5 of NaN
    probabilities with exit 0; a pipeline refuses outputs with NaN or infinity, naming the output."""
    model = _dynamic_classifier(tmp_path / "huge.onnx", {"deploykit.input": json.dumps({"size": [32, 32],
                                                                                        "scale": 1e308})})  # fmt: skip
    result = invoke_checked(["predict", model, tiny["image"]], reads=[model])
    assert result.exit_code == 1, result.output
    assert "error: model 'huge.onnx' output 'scores' | holds NaN or infinity (5 of 5 elements)" in result.stderr


def test_a_metadata_key_given_twice_is_refused_in_every_command(tmp_path, tiny):
    """Sweep 21b: a second deploykit.labels silently won in predict (and a second deploykit.task in run),
    while inspect refused the file: every command reads metadata through one reader, which refuses it."""
    model = onnx.load(tiny["classifier"])
    model.metadata_props.add(key="deploykit.labels", value=json.dumps(list("vwxyz")))
    onnx.save(model, tmp_path / "twice.onnx")
    message = 'model \'twice.onnx\' metadata \'deploykit.labels\' | is given twice (\'["a", "b", "c", "d", "e"]\', then'
    for command in (["predict", tmp_path / "twice.onnx", tiny["image"]], ["run", tmp_path / "twice.onnx"]):
        result = invoke_checked(command, reads=[tmp_path / "twice.onnx"])
        assert result.exit_code == 1 and message in result.stderr, result.output


@pytest.mark.parametrize(
    "field, message",
    [
        ({"channels": 4}, "says channels 4, but the graph's image input 'images' has channels 3"),
        ({"size": [32, 32]}, "says size [32, 32], but the graph's image input 'images' has size [16, 16]"),
        ({"name": "nope"}, "says name 'nope', but the graph's image input 'images' has name 'images'"),
    ],
)
def test_input_metadata_that_contradicts_the_graph_is_refused(tmp_path, tiny, field, message):
    """Sweep 21b: deploykit.input saying 4 channels, another size or another input name was silently ignored."""
    model = onnx.load(tiny["classifier"])
    model.metadata_props.add(key="deploykit.input", value=json.dumps(field))
    onnx.save(model, tmp_path / "other.onnx")
    result = invoke_checked(["predict", tmp_path / "other.onnx", tiny["image"]], reads=[tmp_path / "other.onnx"])
    assert result.exit_code == 1
    assert "model 'other.onnx' metadata 'deploykit.input' | " + message in " ".join(result.stderr.split())


@pytest.mark.parametrize("imgsz", ["[99999, 99999]", "[0, -3]", "[3.5, true]"])
def test_an_unusable_imgsz_is_named_not_called_absent(tmp_path, tiny, imgsz):
    """Sweep 21b: a dynamic model whose Ultralytics imgsz was out of range was said to have no size at all."""
    model = _dynamic_classifier(tmp_path / "ul.onnx", {"imgsz": imgsz})
    result = invoke_checked(["predict", model, tiny["image"]], reads=[model])
    assert result.exit_code == 1
    assert f"model 'ul.onnx' metadata 'imgsz' | is {imgsz!r}; expected the input size" in result.stderr
