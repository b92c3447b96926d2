"""The demo's own checks: detections matched one-to-one by class at IoU 0.5, and a verdict that says
``unverified`` (with the reason) rather than ``pass`` when no independent oracle runs."""

from __future__ import annotations

import numpy as np
import pytest

from deploykit.cli.demo_cmd import unmatched_detections, verify_darknet
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


def test_no_oracle_is_unverified_not_pass(tmp_path):
    import cv2

    if hasattr(cv2.dnn, "readNetFromDarknet"):
        pytest.skip("OpenCV 4.x is an oracle here; the OpenCV 5 pass checks the unverified wording")
    verdict, sentence = verify_darknet("yolov4-tiny", tmp_path / "unused.onnx", _cfg(tmp_path), tmp_path / "w")
    assert verdict == "unverified"
    assert sentence.startswith(f"no independent oracle ran here (OpenCV {cv2.__version__} has no Darknet importer")
    verdict, sentence = verify_darknet("some-other-model", tmp_path / "unused.onnx", _cfg(tmp_path), tmp_path / "w")
    assert (verdict, sentence) == ("unverified", "no independent oracle is known for this model")


def _cfg(directory):
    cfg = directory / "tiny.cfg"
    cfg.write_text("[net]\nwidth=32\nheight=32\nchannels=3\n\n[convolutional]\nfilters=4\nsize=3\nactivation=leaky\n")
    return cfg


def test_verdict_can_fail(tmp_path):
    """A model that is not the cfg's network disagrees with Darknet's own forward pass."""
    from deploykit.convert.darknet import reference
    from deploykit.convert.darknet.convert import convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights
    from deploykit.recipes import get_recipe
    from tests.assets.paths import missing_asset

    if reference.unavailable_reason():
        missing_asset("the Darknet reference (Debian's libdarknet)", str(reference.unavailable_reason()))
    cfg = get_recipe("yolov3-tiny").file("darknet/yolov3-tiny.cfg")
    right, wrong = tmp_path / "right.weights", tmp_path / "wrong.weights"
    write_random_weights(load_network(cfg), right, seed=1)
    write_random_weights(load_network(cfg), wrong, seed=2)
    model = tmp_path / "m.onnx"
    convert_darknet(cfg, wrong, model, head="decoded", verify_backends=[])
    verdict, sentence = verify_darknet("yolov3-tiny", model, cfg, right)
    assert verdict == "fail" and sentence.startswith(
        "checked against Darknet's own forward pass (libdarknet), max error"
    )
    assert np.isfinite(float(sentence.split("max error ")[1].split()[0]))
