"""``deploykit export ncnn``: a verified .param/.bin/.json, checked outputs, all or nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import deploykit
from deploykit.backends.registry import get_backend
from tests.assets.catalog import CATALOG
from tests.assets.paths import missing_asset, official_darknet, yolov4_detector_photo
from tests.assets.reference import run_reference
from tests.assets.samples import tiny_classifier
from tests.fuzz.harness import invoke_checked


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    reason = get_backend("ncnn").unavailable_reason()
    if reason:
        missing_asset("the ncnn backend's runtime", reason)
    path = tmp_path_factory.mktemp("export") / "classifier.onnx"
    onnx.save(tiny_classifier(), path)
    return path


def _outputs(stem: Path) -> list[Path]:
    return [stem.with_name(stem.name + suffix) for suffix in (".param", ".bin", ".json")]


def test_export_round_trip(classifier, tmp_path):
    stem = tmp_path / "out" / "model"
    stem.parent.mkdir()
    result = invoke_checked(["export", "ncnn", classifier, "-o", stem], reads=[classifier], watch=[stem.parent])
    assert result.exit_code == 0, result.output
    param, weights, io = _outputs(stem)
    assert param.is_file() and weights.is_file() and io.is_file()
    assert "images = in0, probabilities = out0" in result.stdout
    assert "element-wise" in result.stdout and "pass" in result.stdout
    document = json.loads(io.read_text())
    assert document["format"] == "deploykit-ncnn-io" and document["weights"] == "f32"
    assert [(t["name"], t["blob"]) for t in document["inputs"] + document["outputs"]] == [
        ("images", "in0"),
        ("probabilities", "out0"),
    ]
    # the exported pair is a model like any other: ONNX names, dynamic batch, the reference's numbers
    images = np.random.default_rng(0).uniform(0, 1, (2, 3, 32, 32)).astype(np.float32)
    with deploykit.load(param, "ncnn") as session:
        assert list(session.inputs) == ["images"] and session.inputs["images"].shape == ("batch", 3, 32, 32)
        got = session.run({"images": images})["probabilities"]
        assert session.info.precision == "f32"
    np.testing.assert_allclose(
        got, run_reference(classifier, {"images": images})["probabilities"], atol=1e-5, rtol=1e-4
    )


def test_output_given_as_param_writes_the_same_three_files(classifier, tmp_path):
    result = invoke_checked(["export", "ncnn", classifier, "-o", tmp_path / "net.param"], reads=[classifier])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.bin", "net.json", "net.param"]


def test_fp16_weights_halve_the_bin_and_are_judged_as_f16(classifier, tmp_path):
    invoke_checked(["export", "ncnn", classifier, "-o", tmp_path / "f32"], reads=[classifier])
    result = invoke_checked(["export", "ncnn", classifier, "-o", tmp_path / "f16", "--fp16"], reads=[classifier])
    assert result.exit_code == 0, result.output
    assert "(f16 weights)" in result.stdout and "cosine/SNR" in result.stdout
    assert "no task metric: f16 weights judged by cosine/SNR only" in result.stderr
    assert (tmp_path / "f16.bin").stat().st_size < 0.6 * (tmp_path / "f32.bin").stat().st_size
    with deploykit.load(tmp_path / "f16.param", "ncnn") as session:
        assert session.info.precision == "f16" and "f16 weights" in session.info.providers


@pytest.mark.parametrize("suffix", [".bin", ".json", ".onnx"])
def test_an_output_named_like_one_of_the_other_files_is_refused(classifier, tmp_path, suffix):
    target = tmp_path / f"model{suffix}"
    result = invoke_checked(["export", "ncnn", classifier, "-o", target], reads=[classifier], writes=[target])
    assert result.exit_code == 2
    assert f"error: -o/--output '{target}' | names a {suffix} file; the export writes a .param, a .bin" in result.stderr
    assert f"Hint: give the name without suffix (-o {tmp_path / 'model'})" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_output_onto_the_input_is_refused(classifier, tmp_path):
    shutil.copy(classifier, tmp_path / "classifier.onnx")
    result = invoke_checked(
        ["export", "ncnn", tmp_path / "classifier.onnx", "-o", tmp_path / "classifier.onnx.param"],
        reads=[tmp_path / "classifier.onnx"],
    )
    assert result.exit_code == 0, "classifier.onnx.param/.bin/.json are other files than classifier.onnx"
    link = tmp_path / "alias.bin"
    link.symlink_to(tmp_path / "classifier.onnx")
    result = invoke_checked(
        ["export", "ncnn", tmp_path / "classifier.onnx", "-o", tmp_path / "alias"], reads=[tmp_path / "classifier.onnx"]
    )
    assert result.exit_code == 2
    assert "-o/--output (.bin)" in result.stderr and "is the file this command reads (the model)" in result.stderr
    assert not (tmp_path / "alias.param").exists() and not (tmp_path / "alias.json").exists()


def test_a_missing_output_directory_is_refused_before_the_work(classifier, tmp_path):
    result = invoke_checked(["export", "ncnn", classifier, "-o", tmp_path / "nowhere" / "model"], reads=[classifier])
    assert result.exit_code == 2
    assert f"directory '{tmp_path / 'nowhere'}' does not exist" in result.stderr


def test_a_failed_verification_writes_nothing(classifier, tmp_path):
    """A tolerance no runtime meets (0) fails the f32 check: the pair must not reach the output paths."""
    stem = tmp_path / "model"
    paths = _outputs(stem)
    result = invoke_checked(
        ["export", "ncnn", classifier, "-o", stem, "--atol", "0", "--rtol", "0"],
        reads=[classifier],
        writes=paths,
        watch=[tmp_path],
    )
    assert result.exit_code == 1
    assert "error: export ncnn 'classifier.onnx' | the exported pair does not pass against onnx-reference" in (
        result.stderr
    )
    assert "Nothing was written." in result.stderr
    assert not any(p.exists() for p in paths)


def test_a_model_ncnn_cannot_take_is_refused_by_operator(tmp_path):
    entry = next(e for e in CATALOG if e.name == "int64_embedding")
    path = tmp_path / "embedding.onnx"
    onnx.save(entry.build(), path)
    result = invoke_checked(
        ["export", "ncnn", path, "-o", tmp_path / "out"], reads=[path], writes=_outputs(tmp_path / "out")
    )
    assert result.exit_code == 1
    assert "ncnn has no layer for operator Gather (node 'Gather_0')" in result.stderr


def _sequence_model(path: Path) -> Path:
    """Relu of x, and x twice as a sequence: one tensor output and one sequence output."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("SequenceConstruct", ["x", "y"], ["pair"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_sequence_value_info("pair", TensorProto.FLOAT, [1, 4])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_sequence_output_is_named_with_what_ncnn_takes(classifier, tmp_path):
    """pnnx's own failure on a sequence output read as a converter crash; the output is named before it runs."""
    path = _sequence_model(tmp_path / "pair.onnx")
    result = invoke_checked(
        ["export", "ncnn", path, "-o", tmp_path / "out"], reads=[path], writes=_outputs(tmp_path / "out")
    )
    said = " ".join(result.stderr.split())
    assert result.exit_code == 1, said
    assert (
        "error: output 'pair' | is a sequence<float32(1, 4)>; ncnn's inputs and outputs are single tensors "
        "(float32 Mats), it has no sequence or optional values." in said
    ), said
    assert "Hint: return tensors instead" in said and "pnnx" not in said and "Traceback" not in said
    result = invoke_checked(["compare", path, "-b", "ncnn"], reads=[path])  # the backend says the same
    assert "output 'pair' | is a sequence<float32(1, 4)>" in " ".join(result.output.split())


def test_a_dynamic_size_needs_shape(tmp_path):
    entry = next(e for e in CATALOG if e.name == "symbolic_sequence")
    path = tmp_path / "sequence.onnx"
    onnx.save(entry.build(), path)
    result = invoke_checked(["export", "ncnn", path, "-o", tmp_path / "out"], reads=[path])
    assert result.exit_code == 1
    assert "error: input 'x' | axis 1 ('seq') of (1, seq, 4) is dynamic" in result.stderr
    result = invoke_checked(["export", "ncnn", path, "-o", tmp_path / "out", "--shape", "x:1x5x4"], reads=[path])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out.json").read_text())["inputs"][0]["shape"] == [1, 5, 4]


@pytest.mark.slow
def test_fp16_yolov4_tiny_is_judged_by_map_on_photos(tmp_path):
    from deploykit.convert.darknet.convert import convert_darknet

    cfg, weights, names = official_darknet("yolov4-tiny")
    model = tmp_path / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, model, labels=names, verify_backends=[])
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("bus.jpg", "zidane.jpg"):
        shutil.copy(yolov4_detector_photo(name), photos / name)
    result = invoke_checked(
        ["export", "ncnn", model, "-o", tmp_path / "y4", "--fp16", "--inputs", photos], reads=[model]
    )
    assert result.exit_code == 0, result.output
    assert "cosine/SNR + mAP@0.5" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "ncnn y4.param" in line)
    assert "mAP@0.5" in row and row.rstrip(" │").endswith("pass"), row
