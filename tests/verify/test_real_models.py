"""Verdicts on real pretrained models and real photos; crashes in every verifying command; Darknet oracles.

Reduced precision is parametrised, never left to the device's default: on a CPU with bf16 units the
bf16 case is judged by the task metric and must pass; on one without, the report must say "not
supported here" (a silent skip would be a defect).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import deploykit
from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
from deploykit.convert.darknet.weights import write_random_weights
from deploykit.errors import ParityError
from deploykit.recipes import build
from deploykit.testing import darknet as reference
from deploykit.verify import VerifySettings
from tests.assets.paths import darknet_image, official_darknet, yolov4_detector_photo

REPO = Path(__file__).resolve().parents[2]
PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    for name in ("bus.jpg", "zidane.jpg"):
        shutil.copy(yolov4_detector_photo(name), folder / name)
    return folder


def _check_reduced(report: deploykit.VerificationReport, precision: str, metric: str) -> None:
    by_precision = {v.precision: v for v in report.verdicts}
    assert by_precision["f32"].status == "pass", by_precision["f32"].describe()
    assert by_precision["f32"].rule == "element-wise"
    if precision not in deploykit.get_backend("openvino").precisions("CPU"):
        assert any(f"openvino:CPU {precision}: not supported here" in n for n in report.notes), report.notes
        return
    verdict = by_precision[precision]
    assert verdict.status == "pass", verdict.describe()
    assert verdict.task is not None and verdict.task.metric == metric, verdict.describe()
    assert verdict.task.value >= verdict.task.threshold
    assert verdict.rule == f"cosine/SNR + {metric}"
    assert verdict.outputs and all(o.max_abs_error > 0 for o in verdict.outputs), "element-wise numbers are shown"


# one compare per model for both reduced precisions: one oracle run and one f32 run serve both
@pytest.mark.slow
def test_real_classifier_reduced_precision_by_top1_agreement(mobilenet, photos):
    report = deploykit.compare(
        mobilenet, ["openvino"], deploykit.VerifySettings(precision="f32,bf16,f16"), inputs=photos
    )
    assert report.input_source == "images (9 images)"
    for precision in ("bf16", "f16"):
        _check_reduced(report, precision, "top-1 agreement")


@pytest.mark.slow
def test_real_detector_reduced_precision_by_map(yolov4_tiny, photos):
    report = deploykit.compare(
        yolov4_tiny, ["openvino"], deploykit.VerifySettings(precision="f32,bf16,f16"), inputs=photos
    )
    for precision in ("bf16", "f16"):
        _check_reduced(report, precision, "mAP@0.5")


@pytest.mark.slow
def test_a_wrong_model_fails_the_task_metric(yolov4_tiny, photos, tmp_path):
    """The task metric can fail: random weights in the same architecture find other objects."""
    from deploykit.tasks.registry import recognise
    from deploykit.verify.check import judge_runs
    from deploykit.verify.isolated import run_candidate
    from deploykit.verify.verdict import OracleInfo
    from deploykit.vision.image import image_cases

    cfg, _, names = official_darknet("yolov4-tiny")
    weights = tmp_path / "random.weights"
    write_random_weights(load_network(cfg), weights, seed=3)
    wrong = tmp_path / "wrong.onnx"
    convert_darknet(cfg, weights, wrong, labels=names, verify_backends=[])
    cases, _ = image_cases(yolov4_tiny, photos)
    right_run = run_candidate(yolov4_tiny, "ort", "cpu", cases, label="f32")
    wrong_run = run_candidate(wrong, "ort", "cpu", cases, label="bf16-pretend")
    interface = deploykit.model.read_interface(yolov4_tiny)
    task = recognise({s.name: s for s in interface.outputs}, interface.metadata_props)
    oracle = OracleInfo("onnx-reference", True)
    verdicts = judge_runs([(right_run, "f32"), (wrong_run, "bf16")], cases, right_run.outputs[:1], oracle, task=task)
    wrong_verdict = verdicts[1]
    assert wrong_verdict.status == "fail" and wrong_verdict.task is not None
    assert wrong_verdict.task.value < 0.5


# --- a crash is an error row in every verifying command ----------------------------------


@pytest.fixture()
def crasher(monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def test_a_crash_in_the_torch_gate_is_an_error_verdict(tmp_path, crasher):
    output = tmp_path / "m.onnx"
    with pytest.raises(ParityError) as caught:
        deploykit.convert_torch(
            f"{REPO / 'tests' / 'assets' / 'torch_models.py'}:small_cnn",
            output=output,
            inputs=["images:1x3x16x16"],
            verify_backends=["crasher", "onnxruntime"],
        )
    report = caught.value.report
    assert report is not None
    crashed, survived = report.verdicts
    assert crashed.status == "error" and "killed by signal SIGABRT" in crashed.reason
    assert survived.status == "pass"
    assert "crasher: error against pytorch" in str(caught.value) and not output.exists()


def test_a_crash_in_a_recipe_build_is_an_error_verdict(tmp_path, crasher):
    output = tmp_path / "nudenet.onnx"
    with pytest.raises(ParityError) as caught:
        build("yolov8n-nudenet", output, verify_backends=["crasher", "onnxruntime"])
    report = caught.value.report
    assert report is not None
    crashed, survived = report.verdicts
    assert crashed.status == "error" and "SIGABRT" in crashed.reason
    assert survived.status == "pass"
    assert not output.exists()


# --- Darknet: an oracle or 'unverified', never a check against itself ----------------------


def test_darknet_without_any_oracle_is_unverified(tmp_path, monkeypatch):
    cfg = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=1)
    monkeypatch.setenv("DEPLOYKIT_DARKNET_INCLUDE", str(tmp_path))  # no darknet.h there: as without libdarknet
    import deploykit.convert.darknet.oracles as oracles

    monkeypatch.setattr(oracles, "opencv_darknet_outputs", lambda *args: None)  # as with OpenCV 5
    report = convert_darknet(cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime", "openvino"])
    assert report.status == "unverified" and report.written
    assert all(v.status == "unverified" and v.agreement for v in report.verdicts)
    assert not report.oracle.independent and "no Darknet oracle ran" in report.oracle.detail


def test_darknet_against_libdarknet_passes(tmp_path):
    if reference.unavailable_reason():
        from tests.assets.paths import missing_asset

        missing_asset("Debian's libdarknet (the Darknet oracle)", "apt-get install darknet gcc")
    cfg, weights, _ = official_darknet("yolov3-tiny")
    report = convert_darknet(
        cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime"], checks=VerifySettings(oracle="darknet")
    )
    assert report.oracle.name == "darknet" and report.oracle.independent
    assert report.status == "pass", [v.describe() for v in report.verdicts]


def test_predict_check_prints_and_stores_the_verdict(yolov4_tiny, tmp_path):
    import json

    from typer.testing import CliRunner

    from deploykit.cli.main import app

    out = tmp_path / "p.json"
    result = CliRunner().invoke(
        app, ["predict", str(yolov4_tiny), str(darknet_image("dog.jpg")), "-b", "ort", "--check", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "check: onnxruntime:cpu: pass against onnx-reference (f32, element-wise)" in result.stdout
    verdict = json.loads(out.read_text())["verdict"]
    assert verdict["status"] == "pass" and verdict["oracle"]["independent"] is True


def test_darknet_with_a_fixed_batch_is_verified(tmp_path):
    cfg = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=1)
    report = convert_darknet(
        cfg, weights, tmp_path / "b2.onnx", verify_backends=["onnxruntime"], export=DarknetExportSettings(batch=2)
    )
    assert report.passed and report.written, [v.describe() for v in report.verdicts]
    assert report.verdicts[0].status in ("pass", "unverified")  # pass where libdarknet or OpenCV 4 runs


# --- the task metric on every row of real images -----------------------------------------


@pytest.mark.slow
def test_every_f32_row_on_photos_has_its_task_metric_against_the_oracle(mobilenet, photos):
    report = deploykit.compare(mobilenet, ["ort", "openvino"], deploykit.VerifySettings(precision="f32"), inputs=photos)
    assert len(report.verdicts) == 2
    for verdict in report.verdicts:
        assert verdict.status == "pass", verdict.describe()
        assert verdict.task is not None, verdict.task_note
        assert verdict.task.metric == "top-1 agreement" and verdict.task.details["reference"] == "onnx-reference"
        assert verdict.task_note is None


@pytest.mark.slow
def test_a_reduced_precision_alone_still_gets_its_task_metric(mobilenet, photos):
    """Only --precision bf16 (or f16): no f32 candidate runs, the oracle's f32 outputs are the reference."""
    reduced = [p for p in deploykit.get_backend("openvino").precisions("CPU") if p != "f32"]
    if not reduced:
        pytest.skip("OpenVINO's CPU plug-in here computes no reduced precision (precisions('CPU') is f32 only)")
    for precision in reduced:
        report = deploykit.compare(
            mobilenet, ["openvino"], deploykit.VerifySettings(precision=precision), inputs=photos
        )
        (verdict,) = report.verdicts
        assert verdict.precision == precision and verdict.rule == "cosine/SNR + top-1 agreement"
        assert verdict.task is not None and verdict.task.details["reference"] == "onnx-reference"
        assert verdict.status == "pass", verdict.describe()


@pytest.mark.slow
def test_a_row_without_a_task_metric_says_why(mobilenet, photos):
    """No independent oracle: the first f32 candidate is the reference and says so on its row."""
    report = deploykit.compare(
        mobilenet, ["ort", "openvino"], deploykit.VerifySettings(precision="f32", oracle="none"), inputs=photos
    )
    reference_row, other = report.verdicts
    assert reference_row.task is None
    assert reference_row.task_note is not None and "this row is the task reference" in reference_row.task_note
    assert other.task is not None and other.task.details["reference"] == reference_row.candidate
    assert all(v.status == "unverified" and v.label == "unverified" for v in report.verdicts)


@pytest.mark.slow
def test_compare_with_only_a_reduced_precision_shows_the_task_metric_on_every_row(mobilenet, photos):
    """The issue's command: `compare mnv2.onnx -b ort -b openvino --precision P --inputs photos/`."""
    from typer.testing import CliRunner

    from deploykit.cli.main import app

    reduced = [p for p in deploykit.get_backend("openvino").precisions("CPU") if p != "f32"]
    precision = reduced[0] if reduced else "f32"  # a CPU without bf16/f16: the f32 rows must show it as well
    result = CliRunner().invoke(app, ["compare", str(mobilenet), "-b", "ort", "-b", "openvino", "--precision",
                                      precision, "--inputs", str(photos), "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.stdout)
    assert data["verdicts"], data
    for verdict in data["verdicts"]:
        assert verdict["task"] is not None and verdict["task"]["metric"] == "top-1 agreement", verdict
        assert verdict["status"] == "pass"
    if precision != "f32":
        assert any(f"onnxruntime:cpu {precision}: not supported here" in n for n in data["notes"]), data["notes"]
