"""QuantizeReport as typed objects: ``to_dict()`` writes the JSON the plain dicts wrote before the
report had types (issue #14), and ``from_dict()`` reads it back into equal objects."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from deploykit.quantize import (
    AccuracyDelta,
    DetectionDelta,
    LayerDivergence,
    OutputSimilarity,
    QuantizeReport,
    QuantizeSettings,
    SpeedComparison,
    SpeedRow,
    quantize,
    read_metadata,
)
from deploykit.tasks.classify import ClassificationAgreement

# The key paths, in order, of `deploykit quantize --json` as written by deploykit before the report's
# accuracy, speed and layers were dataclasses (captured from that code on the same kind of run:
# the tiny classifier, an .npz, --exclude fc, --debug-layers, speed on onnxruntime:cpu).
PATHS_BEFORE_TYPES = [
    "model", "output", "precision", "engine", "method", "per_channel", "task",
    "calibration.source", "calibration.sha256", "calibration.calibration_size", "calibration.held_out_size",
    "calibration.labelled", "calibration.notes", "excluded.head", "excluded.user", "kept_f32_ops",
    "quantized_nodes", "seconds",
    "accuracy.samples", "accuracy.backend",
    "accuracy.outputs[].output", "accuracy.outputs[].cosine", "accuracy.outputs[].snr_db",
    "accuracy.task.samples", "accuracy.task.top1_agreement", "accuracy.task.top5_overlap",
    "accuracy.task.top1_accuracy", "accuracy.task.reference_top1_accuracy", "accuracy.drop", "accuracy.max_drop",
    "speed.iterations", "speed.rounds",
    "speed.rows[].configuration", "speed.rows[].f32_p50_ms", "speed.rows[].p50_ms", "speed.rows[].speedup",
    "speed.rows[].rounds.f32_p50_ms", "speed.rows[].rounds.p50_ms", "speed.rows[].session_precision",
    "speed.rows[].status", "speed.recommended", "speed.best_speedup",
    "layers[].node", "layers[].op_type", "layers[].tensor", "layers[].snr_db", "layers[].snr_lost_db",
    "layers[].graph_output", "ir", "notes",
]  # fmt: skip
# a configuration that failed, as the old code wrote it: no rounds, no session precision, the error last
ERROR_ROW_KEYS_BEFORE_TYPES = ["configuration", "f32_p50_ms", "p50_ms", "speedup", "status", "error"]
DETECTION_TASK_KEYS_BEFORE_TYPES = [
    "images", "reference_boxes", "candidate_boxes", "precision", "recall", "map50", "map_min_score",
]  # fmt: skip


def key_paths(value, prefix=""):
    """Every key path of a JSON value in order; a list contributes its first item's paths."""
    if isinstance(value, dict) and value:
        return [p for key, item in value.items() for p in key_paths(item, f"{prefix}.{key}" if prefix else key)]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return key_paths(value[0], f"{prefix}[]")
    return [prefix]


@pytest.fixture(scope="module")
def report(classifier_path, classifier_npz, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "q.onnx"
    return quantize(
        classifier_path,
        out,
        QuantizeSettings(exclude=["fc"], debug_layers=True, backends=["onnxruntime:cpu"], iterations=3, rounds=1),
        calibrate=classifier_npz,
    )


def test_to_dict_has_the_keys_the_dicts_had(report):
    data = json.loads(json.dumps(report.to_dict()))
    assert key_paths(data) == PATHS_BEFORE_TYPES
    # the attributes hold what the JSON says
    assert data["accuracy"]["outputs"][0] == {
        "output": "logits", "cosine": report.accuracy.outputs[0].cosine, "snr_db": report.accuracy.outputs[0].snr_db
    }  # fmt: skip
    assert isinstance(report.accuracy.task, ClassificationAgreement)
    assert data["accuracy"]["task"]["top1_agreement"] == report.accuracy.task.top1_agreement
    assert data["accuracy"]["drop"] == report.accuracy.drop and data["accuracy"]["max_drop"] is None
    assert report.speed is not None and report.layers is not None
    row = report.speed.rows[0]
    assert data["speed"]["rows"][0]["rounds"] == {"f32_p50_ms": row.rounds.f32_p50_ms, "p50_ms": row.rounds.p50_ms}
    assert [layer["node"] for layer in data["layers"]] == [layer.node for layer in report.layers]
    assert data["excluded"] == {"head": [], "user": ["fc"]} and data["kept_f32_ops"] == {}


def test_from_dict_reads_back_an_equal_report(report):
    again = QuantizeReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report
    assert isinstance(again.accuracy, AccuracyDelta) and isinstance(again.speed, SpeedComparison)
    assert all(isinstance(o, OutputSimilarity) for o in again.accuracy.outputs)
    assert again.layers is not None and all(isinstance(layer, LayerDivergence) for layer in again.layers)


def test_metadata_holds_the_accuracy_as_json(report):
    metadata = report.metadata()
    assert metadata["accuracy"] == {
        "task": report.accuracy.task.to_dict(),
        "drop": report.accuracy.drop,
        "outputs": [{"output": o.output, "cosine": o.cosine, "snr_db": o.snr_db} for o in report.accuracy.outputs],
    }
    assert json.loads(json.dumps(metadata)) == metadata


def test_failed_configuration_keeps_its_old_keys():
    row = SpeedRow("onnxruntime:cuda b1 f32", "error", error="backend 'onnxruntime' | device 'cuda' cannot be used")
    data = row.to_dict()
    assert list(data) == ERROR_ROW_KEYS_BEFORE_TYPES
    assert data["f32_p50_ms"] is None and data["speedup"] is None
    assert SpeedRow.from_dict(json.loads(json.dumps(data))) == row
    comparison = SpeedComparison(iterations=3, rounds=1, rows=[row])
    assert comparison.to_dict()["recommended"] is None
    assert SpeedComparison.from_dict(comparison.to_dict()) == comparison


def test_detection_delta_keeps_its_old_keys():
    delta = DetectionDelta(images=2, reference_boxes=3, candidate_boxes=4, precision=0.75, recall=1.0, map50=0.9)
    assert list(delta.to_dict()) == DETECTION_TASK_KEYS_BEFORE_TYPES and delta.map_min_score == 0.001
    accuracy = AccuracyDelta(samples=2, backend="onnxruntime cpu", task=delta, drop=0.1)
    assert AccuracyDelta.from_dict(json.loads(json.dumps(accuracy.to_dict()))) == accuracy


def test_infinite_snr_survives_the_json(report):
    data = report.to_dict()
    data["accuracy"]["outputs"][0]["snr_db"] = float("inf")  # equal outputs: what float16 can give
    again = QuantizeReport.from_dict(json.loads(json.dumps(data)))
    assert again.accuracy.outputs[0].snr_db == np.inf


def test_cli_json_reads_back(classifier_path, classifier_npz, tmp_path):
    out, written = tmp_path / "q.onnx", tmp_path / "report.json"
    result = CliRunner().invoke(app, ["quantize", str(classifier_path), "-o", str(out), "--calibrate",
                                      str(classifier_npz), "--no-speed", "--json", str(written)])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(written.read_text())
    report = QuantizeReport.from_dict(data)
    assert report.to_dict() == data and report.speed is None and report.layers is None
    # the table prints the same numbers the JSON holds
    output = report.accuracy.outputs[0]
    assert re.search(rf"logits: cosine / SNR\W+{output.cosine:.5f} / {output.snr_db:.1f} dB", result.output)
    assert read_metadata(out)["accuracy"] == report.metadata()["accuracy"]
    assert "'deploykit quantize --json FILE' is deprecated; use --json > FILE" in result.stderr  # 0.1's form


def test_cli_json_prints_the_report_on_stdout(classifier_path, classifier_npz, tmp_path):
    out = tmp_path / "q.onnx"
    result = CliRunner().invoke(app, ["quantize", str(classifier_path), "-o", str(out), "--calibrate",
                                      str(classifier_npz), "--no-speed", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = QuantizeReport.from_dict(json.loads(result.stdout))  # nothing but the report on stdout
    assert report.output == str(out) and read_metadata(out)["accuracy"] == report.metadata()["accuracy"]
    assert "deprecated" not in result.stderr
