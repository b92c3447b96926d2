"""Quantize engines are plug-ins, and the accuracy delta's judge is any backend's Session."""

from __future__ import annotations

import pytest

import deploykit
from deploykit.backends.registry import default_backend
from deploykit.quantize import QuantizeSettings, quantize
from deploykit.quantize.engines import DEFAULT_ENGINE, ENGINES, QUANTIZE_ENGINES


def test_the_engines_are_one_table():
    assert ENGINES == ("ort", "nncf") and DEFAULT_ENGINE == "ort"
    assert {name: engine.precision for name, engine in QUANTIZE_ENGINES.items()} == {
        "ort": "int8", "nncf": "int8", "fp16": "f16",
    }  # fmt: skip
    assert not QUANTIZE_ENGINES["fp16"].calibrates and QUANTIZE_ENGINES["nncf"].accuracy_control


def test_the_default_judge_is_the_registry_default(classifier_path, classifier_npz, tmp_path):
    report = quantize(
        classifier_path, tmp_path / "q.onnx", QuantizeSettings(measure_speed=False), calibrate=classifier_npz
    )
    backend = default_backend()
    assert report.accuracy.backend == f"{backend.name} {backend.default_device}" == "onnxruntime cpu"


def test_another_backend_judges_the_accuracy_delta(classifier_path, classifier_npz, tmp_path):
    openvino = deploykit.get_backend("openvino")
    if not openvino.is_available():
        pytest.skip(f"OpenVINO is not installed here: {openvino.unavailable_reason()}")
    output = tmp_path / "q.onnx"
    report = quantize(
        classifier_path, output, QuantizeSettings(measure_speed=False, judge="openvino"), calibrate=classifier_npz
    )
    assert report.accuracy.backend == f"openvino {openvino.default_device}"
    assert report.accuracy.task is not None and report.accuracy.task.samples == report.accuracy.samples
    assert report.accuracy.outputs and report.accuracy.outputs[0].cosine > 0.9
    # the same quantized model judged on ONNX Runtime: the two runtimes measure nearly the same delta
    again = quantize(
        classifier_path, tmp_path / "q2.onnx", QuantizeSettings(measure_speed=False), calibrate=classifier_npz
    )
    assert abs(again.accuracy.outputs[0].cosine - report.accuracy.outputs[0].cosine) < 0.02


def test_an_engine_says_why_it_cannot_run():
    from deploykit.quantize.engines import NncfEngine

    assert QUANTIZE_ENGINES["ort"].unavailable_reason() is None

    class Missing(NncfEngine):
        name, title, module = "missing", "A missing engine", "deploykit_no_such_package"

    assert Missing.unavailable_reason() == "A missing engine is not installed (pip install 'deploykit[quantize]')"
