"""deploykit.quantize on real models and real photos: ORT static QDQ, NNCF, float16."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import onnxruntime as ort
import pytest

import deploykit
from deploykit.model import read_interface
from deploykit.quantize import DetectionDelta, QuantizeReport, QuantizeSettings, quantize, read_metadata
from deploykit.quantize.graph import head_nodes
from deploykit.tasks.classify import ClassificationAgreement
from tests.assets.paths import darknet_image, nudenet_model, require_module


def ort_run(path, feeds):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def op_count(path, op_type):
    return sum(1 for node in onnx.load(str(path)).graph.node if node.op_type == op_type)


def test_mobilenet_v2_int8_on_real_photos(mobilenet_v2, photos, tmp_path):
    out = tmp_path / "mobilenet_v2.int8.onnx"
    report = quantize(mobilenet_v2, out, QuantizeSettings(calibration_size=6, measure_speed=False), calibrate=photos)
    # 12 photos: 20 % (2) held out, 6 of the other 10 calibrate
    assert report.calibration["held_out_size"] == 2 and report.calibration["calibration_size"] == 6
    assert any("fewer" not in n and "held out 2 of 12" in n for n in report.notes)
    assert op_count(out, "QuantizeLinear") > 50 and op_count(out, "DequantizeLinear") > 100
    # per-channel: the first convolution's weight scale has one value per output channel (32)
    model = onnx.load(str(out))
    scales = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("_scale")}
    assert any(s.shape == (32,) for s in scales.values())
    # the logits stay float: the int8 classifier layer hands them over without an 8-bit rounding
    assert next(n for n in model.graph.node if "output" in n.output).op_type == "Gemm"
    # the report's agreement, recomputed here with the Classifier pipeline on the held-out images
    held = [p for p in sorted(photos.iterdir())]
    with deploykit.Classifier(mobilenet_v2) as f32, deploykit.Classifier(out) as int8:
        first = [f32(p, top_k=1)[0].class_id for p in held]
        second = [int8(p, top_k=1)[0].class_id for p in held]
        # an independent fact: ImageNet class 22 is the bald eagle, in f32 and in int8
        assert f32(darknet_image("eagle.jpg"))[0].label == int8(darknet_image("eagle.jpg"))[0].label == "bald eagle"
    assert np.mean(np.equal(first, second)) >= 0.75
    assert report.accuracy.task is not None and report.accuracy.task.samples == 2
    assert report.accuracy.drop is not None and 0 <= report.accuracy.drop <= 1
    assert report.accuracy.outputs[0].cosine > 0.95
    stamped = read_metadata(out)
    assert stamped["engine"] == "ort" and stamped["precision"] == "int8"
    assert stamped["calibration"]["calibration_size"] == 6 and len(stamped["calibration"]["sha256"]) == 64
    # the source's pre-processing metadata travels with the quantized model
    assert json.loads(read_interface(out).metadata_props["deploykit.input"])["mean"] == [0.485, 0.456, 0.406]


def test_top1_accuracy_from_class_folders(mobilenet_v2, photos, tmp_path):
    evaluation = tmp_path / "eval"
    (evaluation / "bald eagle").mkdir(parents=True)
    shutil.copy(darknet_image("eagle.jpg"), evaluation / "bald eagle" / "eagle.jpg")
    report = quantize(
        mobilenet_v2,
        tmp_path / "q.onnx",
        QuantizeSettings(calibration_size=4, measure_speed=False),
        calibrate=photos,
        evaluate_on=evaluation,
    )
    task = report.accuracy.task
    assert isinstance(task, ClassificationAgreement)
    assert task.samples == 1 and task.reference_top1_accuracy == 1.0
    assert task.top1_accuracy in (0.0, 1.0)
    assert report.accuracy.drop == task.reference_top1_accuracy - task.top1_accuracy
    assert report.calibration["held_out_size"] == 1 and report.calibration["labelled"]


def test_yolov8_head_stays_float_and_detections_agree(photos, tmp_path):
    model = nudenet_model()
    out = tmp_path / "yolov8n.int8.onnx"
    report = quantize(
        model, out, QuantizeSettings(calibration_size=6, held_out=0.5, measure_speed=False), calibrate=photos
    )
    head = report.excluded["head"]
    # the decode: the final Concat, the class Sigmoid, the DFL softmax and its fixed-weight Conv
    for name in ("/model.22/Concat_25", "/model.22/Sigmoid", "/model.22/dfl/Softmax", "/model.22/dfl/conv/Conv"):
        assert name in head
    # the detection convolutions feeding the head are not part of it
    assert "/model.22/cv3.0/cv3.0.2/Conv" not in head and report.task == "detect"
    quantized = onnx.load(str(out))
    producer = {o: n for n in quantized.graph.node for o in n.output}
    final = next(n for n in quantized.graph.node if n.name == "/model.22/Concat_25")
    assert all(producer[i].op_type != "DequantizeLinear" for i in final.input), "the head reads float tensors"
    assert op_count(out, "QuantizeLinear") > 20
    task = report.accuracy.task
    assert isinstance(task, DetectionDelta)
    assert task.images == 6 and 0 <= task.map50 <= 1 and task.map_min_score == 0.001
    # the head reads the int8 convolutions' outputs unrounded: no Q→DQ between them
    per_scale = next(n for n in quantized.graph.node if n.name == "/model.22/Concat")
    assert all(producer[i].op_type == "Conv" for i in per_scale.input)
    assert report.accuracy.drop == pytest.approx(1 - task.map50, abs=1e-9)
    assert QuantizeReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    with_head = quantize(
        model,
        tmp_path / "all.onnx",
        QuantizeSettings(calibration_size=6, quantize_head=True, measure_speed=False),
        calibrate=photos,
    )
    assert with_head.excluded["head"] == []
    assert op_count(tmp_path / "all.onnx", "QuantizeLinear") > op_count(out, "QuantizeLinear")


def test_head_of_a_darknet_decoded_graph(tmp_path):
    """A [yolo] decode written by hand: conv → sigmoid/exp arithmetic → concat; only the decode is head."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((6, 3, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["raw"], name="conv"),
        helper.make_node("Split", ["raw"], ["xy", "wh", "rest"], name="split", axis=1, num_outputs=3),
        helper.make_node("Sigmoid", ["xy"], ["sxy"], name="sigmoid"),
        helper.make_node("Exp", ["wh"], ["ewh"], name="exp"),
        helper.make_node("Concat", ["sxy", "ewh", "rest"], ["y"], name="concat", axis=1),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4, 4])], [w])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert head_nodes(model) == ["split", "sigmoid", "exp", "concat"]


def test_float16_keeps_io_types_and_lists_ops_kept_in_f32(classifier_path, classifier_npz, tmp_path):
    out = tmp_path / "classifier.fp16.onnx"
    report = quantize(classifier_path, out, QuantizeSettings(fp16=True, measure_speed=False), calibrate=classifier_npz)
    assert report.precision == "f16" and report.engine == "fp16"
    model = onnx.load(str(out))
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)
    # every sample measures the delta (nothing to calibrate)
    assert report.calibration["held_out_size"] == 12 and report.calibration["calibration_size"] == 0
    x = np.load(classifier_npz)["images"][:1]
    expected = onnx.reference.ReferenceEvaluator(str(classifier_path)).run(None, {"images": x})[0]
    np.testing.assert_allclose(ort_run(out, {"images": x})[0], expected, rtol=2e-2, atol=2e-2)
    assert report.accuracy.outputs[0].snr_db > 40


def test_float16_without_data_and_with_an_excluded_node(classifier_path, tmp_path):
    out = tmp_path / "fp16.onnx"
    report = deploykit.quantize(
        classifier_path, out, deploykit.QuantizeSettings(fp16=True, exclude=["fc"], measure_speed=False)
    )  # the package calls
    assert report.kept_f32_ops == {"Gemm": 1} and report.excluded["user"] == ["fc"]
    assert "seeded random inputs" in report.calibration["source"]
    gemm = next(n for n in onnx.load(str(out)).graph.node if n.name == "fc")
    initializers = {t.name: t for t in onnx.load(str(out)).graph.initializer}
    assert initializers[gemm.input[1]].data_type == onnx.TensorProto.FLOAT


def test_exclude_keeps_a_node_float_and_debug_layers_names_real_nodes(classifier_path, classifier_npz, tmp_path):
    out = tmp_path / "int8.onnx"
    report = quantize(
        classifier_path,
        out,
        QuantizeSettings(exclude=["fc"], debug_layers=True, measure_speed=False),
        calibrate=classifier_npz,
    )
    quantized = onnx.load(str(out))
    producer = {o: n for n in quantized.graph.node for o in n.output}
    fc = next(n for n in quantized.graph.node if n.name == "fc")
    float_weights = {t.name for t in quantized.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    assert fc.input[1] in float_weights and fc.input[1] not in producer  # its weights stay f32
    conv = next(n for n in quantized.graph.node if n.name == "conv1")
    assert producer[conv.input[1]].op_type == "DequantizeLinear"
    names = {n.name for n in onnx.load(str(classifier_path)).graph.node}
    assert report.layers and len(report.layers) <= 10
    assert all(row.node in names for row in report.layers)
    lost = [row.snr_lost_db for row in report.layers]
    assert lost == sorted(lost, reverse=True)


@pytest.mark.parametrize("task", ["classify", "embed"])
def test_a_quantize_run_parses_the_float_model_once(classifier_path, classifier_npz, tmp_path, monkeypatch, task):
    """onnx's loaders are counted in this process, by what they read: the user's file and quantize's float
    copy (scratch/float.onnx, written from the model read, then passed down as a Model) are one model.
    ``embed`` takes the task plug-in's path (task_delta), which used to read the float copy back."""
    import collections
    import hashlib

    from deploykit.model import Model

    model = classifier_path
    if task == "embed":  # the same graph, stated to be an encoder: judged by its embedding cosine
        proto = onnx.load(str(classifier_path))
        proto.metadata_props.add(key="deploykit.task", value="embed")
        model = tmp_path / "encoder.onnx"
        onnx.save(proto, str(model))
    float_model = {hashlib.sha256(model.read_bytes()).hexdigest(), model.name, "float.onnx"}
    written = Model.written

    def recorded(proto, path):
        made = written(proto, path)
        float_model.add(made.sha256)
        return made

    monkeypatch.setattr(Model, "written", staticmethod(recorded))
    reads: collections.Counter[str] = collections.Counter()
    for name in ("load", "load_model", "load_from_string", "load_model_from_string"):
        original = getattr(onnx, name)

        def counted(source, *args, _original=original, **kwargs):
            is_bytes = isinstance(source, bytes)
            reads[hashlib.sha256(source).hexdigest() if is_bytes else Path(str(source)).name] += 1
            return _original(source, *args, **kwargs)

        monkeypatch.setattr(onnx, name, counted)
    report = quantize(model, tmp_path / "int8.onnx", QuantizeSettings(measure_speed=False), calibrate=classifier_npz)
    assert report.task == task and report.accuracy.task is not None and report.quantized_nodes > 0
    measured = report.accuracy.task
    assert isinstance(measured, ClassificationAgreement) if task == "classify" else measured.kind == "embed"
    assert sum(count for read, count in reads.items() if read in float_model) == 1, dict(reads)


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_calibration_methods(classifier_path, classifier_npz, tmp_path, method):
    report = quantize(
        classifier_path,
        tmp_path / "q.onnx",
        QuantizeSettings(method=method, measure_speed=False),
        calibrate=classifier_npz,
    )
    assert report.method == method and report.quantized_nodes > 0


def test_speedup_is_measured_in_isolated_workers(classifier_path, classifier_npz, tmp_path):
    report = quantize(
        classifier_path,
        tmp_path / "q.onnx",
        QuantizeSettings(iterations=3, rounds=2, backends=["onnxruntime:cpu"]),
        calibrate=classifier_npz,
    )
    assert report.speed is not None
    (row,) = report.speed.rows
    # two rounds each, alternating; the p50 is their median
    assert row.rounds is not None and len(row.rounds.f32_p50_ms) == len(row.rounds.p50_ms) == 2
    assert row.p50_ms == pytest.approx(float(np.median(row.rounds.p50_ms)))
    assert row.f32_p50_ms == pytest.approx(float(np.median(row.rounds.f32_p50_ms)))
    assert row.configuration.startswith("onnxruntime:cpu") and row.f32_p50_ms > 0 and row.p50_ms > 0
    assert row.speedup == pytest.approx(row.f32_p50_ms / row.p50_ms)
    assert row.session_precision == "int8" and row.error is None
    # slower than f32 is flagged and never recommended
    assert (row.status == "slower than f32") == (row.speedup < 1)
    assert (report.speed.recommended is None) == (row.speedup < 1)


def test_nncf_engine_and_openvino_ir(classifier_path, classifier_npz, tmp_path):
    require_module("nncf", "pip install 'deploykit[quantize]'")  # its absence is tested in test_errors
    out = tmp_path / "nncf.onnx"
    report = quantize(
        classifier_path,
        out,
        QuantizeSettings(engine="nncf", measure_speed=False),
        calibrate=classifier_npz,
        ir=tmp_path / "nncf.xml",
    )
    assert report.engine == "nncf" and op_count(out, "QuantizeLinear") > 0
    assert (tmp_path / "nncf.xml").is_file() and (tmp_path / "nncf.bin").is_file()
    import openvino as ov

    x = np.load(classifier_npz)["images"][:1]
    compiled = ov.Core().compile_model(str(tmp_path / "nncf.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    from_ir = compiled({"images": x})[0]
    np.testing.assert_allclose(from_ir, ort_run(out, {"images": x})[0], atol=0.05, rtol=0.05)


def test_nncf_accuracy_control_on_a_real_classifier(mobilenet_v2, photos, tmp_path):
    require_module("nncf", "pip install 'deploykit[quantize]'")
    report = quantize(
        mobilenet_v2,
        tmp_path / "q.onnx",
        QuantizeSettings(calibration_size=4, engine="nncf", max_drop="50%", measure_speed=False),
        calibrate=photos,
    )
    assert report.accuracy.max_drop == 0.5
    assert report.accuracy.drop is not None and report.accuracy.drop <= 0.5
