"""Every way quantize can be misused: a clear message, and nothing written at the output."""

from __future__ import annotations

import builtins
import shutil
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.errors import (
    BackendUnavailableError,
    InputError,
    ModelError,
    QuantizationError,
    UsageError,
)
from deploykit.quantize import QuantizeSettings, parse_drop, quantize
from tests.quantize.conftest import conv_classifier


def test_a_folder_without_images(classifier_path, tmp_path):
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "notes.txt").write_text("no photos here")
    out = tmp_path / "q.onnx"
    with pytest.raises(InputError, match=r"images '.*empty' \| the folder holds no images"):
        quantize(classifier_path, out, QuantizeSettings(measure_speed=False), calibrate=empty)
    assert not out.exists()


def test_images_for_a_model_that_takes_one_channel(photos, tmp_path):
    gray = tmp_path / "gray.onnx"
    onnx.save(conv_classifier(channels=1), gray)
    out = tmp_path / "q.onnx"
    with pytest.raises(InputError, match=r"images give 3 channels .* the model's input 'images' takes 1"):
        quantize(gray, out, QuantizeSettings(measure_speed=False), calibrate=photos)
    assert not out.exists()


def test_an_already_quantized_model(classifier_path, classifier_npz, tmp_path):
    once = tmp_path / "once.onnx"
    quantize(classifier_path, once, QuantizeSettings(measure_speed=False), calibrate=classifier_npz)
    twice = tmp_path / "twice.onnx"
    with pytest.raises(ModelError, match=r"is already quantized \(it has DequantizeLinear, QuantizeLinear nodes\)"):
        quantize(once, twice, QuantizeSettings(measure_speed=False), calibrate=classifier_npz)
    fp16 = tmp_path / "fp16.onnx"
    quantize(classifier_path, fp16, QuantizeSettings(fp16=True, measure_speed=False))
    with pytest.raises(ModelError, match=r"'fp16.onnx' \| already has float16 weights"):
        quantize(fp16, twice, QuantizeSettings(fp16=True, measure_speed=False))
    assert not twice.exists()


def test_a_model_with_nothing_to_quantize(tmp_path):
    graph = helper.make_graph([helper.make_node("Exp", ["x"], ["y"], name="exp")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])  # fmt: skip
    model = tmp_path / "exp.onnx"
    sigmoid = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sigmoid.ir_version = 8
    onnx.save(sigmoid, model)
    arrays = tmp_path / "x.npz"
    np.savez(arrays, x=np.random.default_rng(0).normal(size=(4, 2, 4)).astype(np.float32))
    out = tmp_path / "q.onnx"
    with pytest.raises(UsageError, match=r"--max-drop \| needs INT8 and a task metric: a classifier or detector"):
        quantize(model, out, QuantizeSettings(max_drop="1%", measure_speed=False), calibrate=arrays)
    with pytest.raises(
        QuantizationError, match=r"quantized no node of 'exp.onnx': none of its ops \(Exp\) can be quantized"
    ):
        quantize(model, out, QuantizeSettings(measure_speed=False), calibrate=arrays)
    assert not out.exists()


def test_missing_nncf_names_the_extra(classifier_path, classifier_npz, tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_nncf(name, *args, **kwargs):
        if name == "nncf" or name.startswith("nncf."):
            raise ImportError("No module named 'nncf'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "nncf", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_nncf)
    out = tmp_path / "q.onnx"
    with pytest.raises(
        BackendUnavailableError, match=r"--quantizer nncf needs the 'nncf' package.*deploykit\[quantize\]"
    ):
        quantize(classifier_path, out, QuantizeSettings(engine="nncf", measure_speed=False), calibrate=classifier_npz)
    assert not out.exists()


def test_option_errors(classifier_path, classifier_npz, tmp_path):
    out = tmp_path / "q.onnx"
    cases = [
        (dict(), UsageError, r"--calibrate \| INT8 needs calibration data"),
        (
            dict(calibrate=classifier_npz, engine="tensorrt"),
            UsageError,
            r"--quantizer 'tensorrt' \| is not one of ort, nncf\. Hint",
        ),
        (
            dict(calibrate=classifier_npz, engine="ncnn"),
            UsageError,
            r"--quantizer 'ncnn' \| is not one of ort, nncf: ncnn quantizes with its ncnn2table and ncnn2int8 tools, "
            r"which the ncnn and pnnx wheels do not ship",
        ),
        (dict(calibrate=classifier_npz, method="kl"), UsageError, r"--method 'kl' \| is not one of minmax, entropy"),
        (dict(calibrate=classifier_npz, engine="nncf", method="entropy"), UsageError, r"NNCF chooses its own ranges"),
        (dict(fp16=True, engine="nncf"), UsageError, r"--fp16 \| takes no --quantizer or --method"),
        (
            dict(calibrate=classifier_npz, max_drop="150%"),
            UsageError,
            r"--max-drop 150% \| expected a drop in \(0, 1\)",
        ),
        (dict(calibrate=classifier_npz, held_out=1.0), UsageError, r"--held-out 1 \| expected a fraction in \[0, 1\)"),
        (dict(calibrate=classifier_npz, calibration_size=0), UsageError, r"--calibration-size 0 \| at least 1"),
        (
            dict(calibrate=classifier_npz, exclude=["fc1"]),
            UsageError,
            r"--exclude 'fc1' \| is not a node of the model; close names: fc",
        ),
        (
            dict(calibrate=tmp_path / "nowhere"),
            UsageError,
            r"is neither a folder of images nor an .npz file \(it does not exist\)",
        ),
        (
            dict(calibrate=classifier_npz, ir=tmp_path / "q.bin"),
            UsageError,
            r"--ir '.*q.bin' \| expected a path ending in .xml",
        ),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            paths = {k: options.pop(k) for k in ("calibrate", "ir") if k in options}
            quantize(classifier_path, out, QuantizeSettings(measure_speed=False, **options), **paths)
        assert not out.exists(), options


def test_npz_errors(classifier_path, tmp_path):
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, pixels=np.zeros((2, 3, 32, 32), np.float32))
    with pytest.raises(UsageError, match=r"has pixels; missing model input\(s\) images"):
        quantize(classifier_path, tmp_path / "q.onnx", QuantizeSettings(measure_speed=False), calibrate=wrong)
    single = tmp_path / "single.npz"
    np.savez(single, images=np.zeros((1, 3, 32, 32), np.float32))
    with pytest.raises(UsageError, match=r"holds 1 sample; a calibration and a held-out part need at least 2"):
        quantize(classifier_path, tmp_path / "q.onnx", QuantizeSettings(measure_speed=False), calibrate=single)


def test_a_single_photo_cannot_be_split(classifier_path, photos, tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(next(photos.iterdir()), one)
    with pytest.raises(InputError, match=r"holds 1 image; a calibration and a held-out part need at least 2"):
        quantize(classifier_path, tmp_path / "q.onnx", QuantizeSettings(measure_speed=False), calibrate=one)


def test_output_onto_the_model_is_refused(classifier_path, classifier_npz, tmp_path):
    copy = tmp_path / "model.onnx"
    shutil.copy(classifier_path, copy)
    before = copy.read_bytes()
    with pytest.raises(UsageError, match=r"is the file this command reads"):
        quantize(copy, copy, QuantizeSettings(measure_speed=False), calibrate=classifier_npz)
    assert copy.read_bytes() == before


def test_over_the_accuracy_budget_nothing_is_written(tmp_path, photos):
    """Small features next to a huge one: the huge one sets the 8-bit range of the activations
    (steps of ~2), so the small ones (~0.001) round to zero. Class 1 is the sum of the small ones
    × 1000, class 0 a constant 1: f32 picks class 1, int8 class 0; the budget is missed."""
    model = conv_classifier(seed=3)
    values = {t.name: onnx.numpy_helper.to_array(t).copy() for t in model.graph.initializer}
    values["b2"][0] = 500.0  # channel 0 of the features ≈ 500, read by no logit
    values["w2"][1:] *= 1e-3  # channels 1-15 ≈ 0.001
    values["b2"][1:] *= 1e-3
    values["w3"][:] = 0.0
    values["w3"][1, 1:] = 1000.0
    values["b3"][:] = 0.0
    values["b3"][0] = 1.0
    for tensor in model.graph.initializer:
        tensor.CopyFrom(onnx.numpy_helper.from_array(values[tensor.name].astype(np.float32), tensor.name))
    path = tmp_path / "fragile.onnx"
    onnx.save(model, path)
    out = tmp_path / "q.onnx"
    with pytest.raises(
        QuantizationError, match=r"the classify metric dropped by .* the budget is 1.00%. Nothing was written"
    ):
        quantize(path, out, QuantizeSettings(max_drop="1%", held_out=0.5, measure_speed=False), calibrate=photos)
    assert not out.exists()


def test_parse_drop():
    assert parse_drop("1%") == pytest.approx(0.01) and parse_drop("0.02") == 0.02 and parse_drop(None) is None
    with pytest.raises(UsageError, match=r"--max-drop abc \| expected a drop in \(0, 1\)"):
        parse_drop("abc")


def test_cli(classifier_path, classifier_npz, tmp_path):
    out, report = tmp_path / "q.onnx", tmp_path / "report.json"
    result = CliRunner().invoke(app, ["quantize", str(classifier_path), "-o", str(out), "--calibrate",
                                      str(classifier_npz), "--no-speed", "--debug-layers", "--json", str(report)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "int8 model written to" in result.output and "Nodes that add the most error" in result.output
    assert out.is_file() and '"engine": "ort"' in report.read_text()
    failed = CliRunner().invoke(app, ["quantize", str(classifier_path), "-o", str(tmp_path / "x.onnx")])
    assert failed.exit_code == 2
    assert "error: --calibrate | INT8 needs calibration data" in failed.output
    assert not (tmp_path / "x.onnx").exists()


def test_an_output_not_named_onnx_is_refused_before_any_work(classifier_path, classifier_npz, tmp_path):
    from deploykit.errors import OutputError

    with pytest.raises(OutputError, match=r"--output '.*q\.npz' \| is not an \.onnx file name, expected NAME\.onnx"):
        quantize(classifier_path, tmp_path / "q.npz", QuantizeSettings(measure_speed=False), calibrate=classifier_npz)
    assert not (tmp_path / "q.npz").exists()


def _one_node(path, node, output):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], [output],
                              [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_reduced_model_onnx_runtime_refuses_and_an_infinite_reference_are_errors(tmp_path):
    """Sweep 21b: fp16 of a sequence output was ORT's raw traceback; y = x / 0 exited 0 with cosine NaN."""
    sequence = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2, 3])
    seq = _one_node(tmp_path / "seq.onnx", helper.make_node("SequenceConstruct", ["x", "x"], ["s"]), sequence)
    fp16 = QuantizeSettings(fp16=True, measure_speed=False)
    with pytest.raises(
        QuantizationError, match=r"the reduced model \| backend 'onnxruntime' cannot load it to measure"
    ):
        quantize(seq, tmp_path / "q1.onnx", fp16)
    infinite = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    div = _one_node(tmp_path / "div.onnx", helper.make_node("Div", ["x", "zero"], ["y"]), infinite)
    with pytest.raises(QuantizationError, match=r"output 'y' \| the float model's reference is degenerate"):
        quantize(div, tmp_path / "q2.onnx", fp16)
    assert not (tmp_path / "q1.onnx").exists() and not (tmp_path / "q2.onnx").exists()
