"""The demo's own checks: detections matched one-to-one by class at IoU 0.5, and a verdict that says
``unverified`` (with the reason) rather than ``pass`` when no independent oracle runs."""

from __future__ import annotations

import numpy as np

from deploykit.cli.demo_cmd import darknet_verdict, unmatched_detections
from deploykit.vision.results import Detection


def _box(label: str, x1: float, y1: float, x2: float, y2: float) -> Detection:
    return Detection(label, 0, 0.9, (x1, y1, x2, y2))


def test_same_objects_match_and_differences_are_named():
    reference = [_box("dog", 0, 0, 100, 100), _box("dog", 200, 0, 300, 100), _box("car", 0, 200, 50, 250)]
    shifted = [_box("dog", 210, 5, 305, 100), _box("dog", 5, 0, 100, 95), _box("car", 2, 200, 50, 252)]
    assert unmatched_detections(shifted, reference) == []
    # IoU of a box shifted by half its width is 1/3: not the same object
    assert unmatched_detections([_box("dog", 50, 0, 150, 100), *shifted[:1], shifted[2]], reference) == [
        "missing dog",
        "extra dog",
    ]
    # the same place under another class is a different object; one box cannot match two
    assert unmatched_detections([_box("cat", 0, 0, 100, 100), *shifted[::2]], reference) == ["missing dog", "extra cat"]
    assert unmatched_detections([shifted[1]], reference[:1] * 2) == ["missing dog"]


def _converted(tmp_path, seed: int = 1):
    from deploykit.convert.darknet.convert import load_network
    from deploykit.convert.darknet.weights import write_random_weights
    from deploykit.recipes import get_recipe

    cfg = get_recipe("yolov3-tiny").file("darknet/yolov3-tiny.cfg")
    weights = tmp_path / f"w{seed}.weights"
    write_random_weights(load_network(cfg), weights, seed=seed)
    return cfg, weights


def test_no_oracle_is_unverified_not_pass(tmp_path, monkeypatch):
    import deploykit.convert.darknet.oracles as oracles
    from deploykit.convert.darknet.convert import convert_darknet

    monkeypatch.setenv("DEPLOYKIT_DARKNET_INCLUDE", str(tmp_path))  # no darknet.h there: as without libdarknet
    monkeypatch.setattr(oracles, "opencv_darknet_outputs", lambda *args: None)  # as with OpenCV 5
    cfg, weights = _converted(tmp_path)
    report = convert_darknet(cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime"])
    verdict, sentence = darknet_verdict(report)
    assert verdict == "unverified"
    assert sentence.startswith("no independent oracle ran here (no Darknet oracle ran: ")


def test_verdict_can_fail(tmp_path):
    """A model that is not the cfg's network (other weights) disagrees with Darknet's own forward pass."""
    from deploykit.convert.darknet.convert import convert_darknet, load_network
    from deploykit.convert.darknet.oracles import verify
    from deploykit.convert.report import ConversionReport
    from deploykit.testing import darknet as reference
    from tests.assets.paths import missing_asset

    if reference.unavailable_reason():
        missing_asset("the Darknet reference (Debian's libdarknet)", str(reference.unavailable_reason()))
    cfg, right = _converted(tmp_path, seed=1)
    _, wrong = _converted(tmp_path, seed=2)
    model = tmp_path / "m.onnx"
    convert_darknet(cfg, wrong, model, verify_backends=[])
    import json

    import deploykit

    with deploykit.load(model) as session:
        heads = json.loads(session.metadata["deploykit.darknet.heads"])
    net = load_network(cfg)
    from deploykit.convert.darknet.settings import DarknetExportSettings
    from deploykit.verify.settings import ThresholdOverrides, VerifySettings

    checks = VerifySettings(oracle="darknet", seed=0, thresholds=ThresholdOverrides(atol=1e-4, rtol=1e-3))
    verdicts, oracle = verify(model, net, heads, cfg, right, ["onnxruntime"], (net.width, net.height),
                              DarknetExportSettings(head="raw"), checks)  # fmt: skip
    report = ConversionReport("x", str(model), "darknet", "-", 13, 0.0, verdicts=verdicts, oracle=oracle)
    verdict, sentence = darknet_verdict(report)
    assert verdict == "fail" and sentence.startswith("checked against Darknet's own forward pass (libdarknet)")
    assert np.isfinite(float(sentence.split("max abs error ")[1].split()[0]))
