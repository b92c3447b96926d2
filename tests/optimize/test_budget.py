"""Budgets: an accuracy budget only f32 meets, a time budget that stops the search early, and
Ctrl-C, which keeps the best so far as a partial bundle."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import deploykit
from cli.main import app
from deploykit.backends.registry import get_backend
from deploykit.errors import UsageError
from deploykit.optimize import OptimizePlan, SearchProgress, optimize, read_bundle


def _reduced_here() -> list[str]:
    backend = get_backend("openvino")
    return [p for p in backend.precisions("CPU") if p != "f32"]


def test_without_images_only_f32_is_an_answer(classifier_path, tmp_path):
    """--no-quantize without images: reduced precision has no measured accuracy delta, so f32 is the answer."""
    output = tmp_path / "deploy"
    result = CliRunner().invoke(app, ["optimize", str(classifier_path), "--no-quantize", "-b", "onnxruntime",
                                      "-b", "openvino:CPU", "--threads", "1", "--max-drop", "0", "-o", str(output)])  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = read_bundle(output).manifest
    assert manifest.precision == "f32" and manifest.variant == "float"
    report = read_bundle(output).report()
    for precision in _reduced_here():  # bf16/f16 only where this CPU runs them natively
        candidate = report.candidate(f"openvino:CPU b1 t1 {precision} float")
        assert candidate is not None and candidate.status == "stopped"
        assert candidate.reason.startswith("accuracy delta unknown"), candidate.reason
    assert any("the answer is f32" in note for note in report.notes)
    assert "rule: A is faster than B only when" in result.output and "chosen:" in result.output


def test_a_tiny_time_budget_screens_every_precision_class_first(classifier_path, photos, tmp_path):
    """The budget runs out while quantizing: one candidate of every variant × precision class is still
    screened (quantizing cannot starve them), the thread variants stop with the reason, and with no
    rounds left the decision is inconclusive and goes to the simpler setup."""
    report = optimize(
        classifier_path,
        photos,
        OptimizePlan(backends=["onnxruntime"], threads=[1, 2], engines=["ort"], time_budget=1),
        output=tmp_path / "deploy",
    )
    classes = {(c.variant, c.config.precision) for c in report.candidates}
    screened = {(c.variant, c.config.precision) for c in report.candidates if c.rounds}
    assert screened == classes and ("int8-ort", "int8") in screened
    unmeasured = [c for c in report.candidates if not c.rounds]
    assert unmeasured and all(
        c.reason.startswith("over the screening share of the time budget")
        and "its precision class was screened as" in c.reason
        for c in unmeasured
    )
    assert report.decision.decision in ("inconclusive", "faster", "tied")
    if report.decision.decision == "inconclusive":
        assert report.best.config.precision == "f32" and "insufficient evidence" in report.decision.reason


def test_ctrl_c_writes_the_best_so_far_marked_partial(classifier_path, tmp_path):
    output = tmp_path / "deploy"

    left: list[float] = []

    def interrupt(event: SearchProgress) -> None:
        assert event.budget_left_s is not None
        left.append(event.budget_left_s)  # the bar's ETA: the time budget left, never growing
        if event.stage == "screening" and event.done == 2:  # two f32 candidates measured, more to come
            raise KeyboardInterrupt

    report = optimize(
        classifier_path,
        None,
        OptimizePlan(quantize=False, backends=["onnxruntime", "openvino:CPU"], threads=[1], time_budget="5m"),
        output=output,
        progress=interrupt,
    )
    assert left and left == sorted(left, reverse=True) and 0 < left[-1] < left[0] <= 300
    assert report.partial and any("interrupted" in note for note in report.notes)
    assert sum(1 for c in report.candidates if c.rounds) == 2
    assert all(c.reason == "not screened: the search was interrupted" for c in report.candidates if not c.rounds)
    bundle = read_bundle(output)
    assert bundle.manifest.partial
    with deploykit.load(output) as session:
        assert session.info.backend == bundle.manifest.backend


def test_ctrl_c_before_any_answer_writes_nothing(classifier_path, tmp_path):
    def interrupt(event: SearchProgress) -> None:
        if event.stage == "screening":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        optimize(
            classifier_path,
            None,
            OptimizePlan(quantize=False, backends=["onnxruntime"], threads=[1]),
            output=tmp_path / "deploy",
            progress=interrupt,
        )
    assert not (tmp_path / "deploy").exists()


def test_offline_searches_batch_sizes_and_ranks_by_throughput(tmp_path):
    import onnx

    from tests.assets.samples import tiny_classifier

    model = tmp_path / "dynamic.onnx"
    onnx.save(tiny_classifier(), model)
    report = optimize(
        model,
        None,
        OptimizePlan(quantize=False, backends=["onnxruntime"], threads=[1], scenario="offline", batches=[1, 8]),
        output=tmp_path / "deploy",
    )
    assert {c.label for c in report.candidates} == {
        "onnxruntime:cpu b1 t1 f32 float",
        "onnxruntime:cpu b8 t1 f32 float",
    }
    assert report.headline == "throughput_sps" and report.decision.higher_is_better
    assert read_bundle(tmp_path / "deploy").manifest.batch == report.best.config.batch


def test_a_fixed_batch_model_refuses_other_batch_sizes(classifier_path, tmp_path):
    with pytest.raises(UsageError, match="has a fixed batch of 1"):
        optimize(
            classifier_path,
            None,
            OptimizePlan(quantize=False, scenario="offline", batches=[4]),
            output=tmp_path / "deploy",
        )


def test_a_detector_bundle_opens_as_a_detector(photos, tmp_path):
    """Ultralytics YOLOv8n (nudenet's): the bundle's Detector finds what the model file's finds."""
    from tests.assets.paths import nudenet_model

    model = nudenet_model()
    output = tmp_path / "deploy"
    report = optimize(model, photos, OptimizePlan(quantize=False, backends=["onnxruntime"], threads=[1]), output=output)
    assert report.task == "detect" and report.metric == "mAP@0.5" and report.settings.accuracy_images == 12
    assert read_bundle(output).manifest.task == "detect"
    photo = photos / "person.jpg"
    with deploykit.Detector(output) as bundled, deploykit.Detector(model) as direct:
        assert [(d.label, round(d.score, 3)) for d in bundled(photo)] == [
            (d.label, round(d.score, 3)) for d in direct(photo)
        ]
    result = CliRunner().invoke(app, ["predict", str(output), str(photo)])
    assert result.exit_code == 0 and "detections in person.jpg" in result.output
