"""The emulated target the tests run on (``make platforms`` prepares it once, in deploykit's cache),
and the MobileNetV2 recipe with real photos for the task metric under emulation."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from deploykit.platforms import EmulatedPlatform, get_platform
from deploykit.platforms.emulated import cache_dir
from tests.assets.catalog import CATALOG
from tests.assets.paths import darknet_image, missing_asset, mobilenet_v2_weights

PREPARE = "make platforms (or: deploykit platforms add linux/arm64)"
PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg")  # three: OpenVINO f16 under emulation takes seconds a photo
CACHE = cache_dir()  # read at import: tests that point DEPLOYKIT_CACHE_DIR elsewhere still find these


def old_qemu() -> Path:
    """Debian bookworm's qemu-aarch64 7.2 (``make platforms`` extracts it beside the new one): too old."""
    path = CACHE / "platforms" / "qemu-bookworm" / "usr" / "bin" / "qemu-aarch64"
    if not path.is_file():
        missing_asset("Debian bookworm's qemu-aarch64 7.2 in the cache", PREPARE)
    return path


@pytest.fixture(scope="session")
def arm64() -> EmulatedPlatform:
    """The prepared linux/arm64 target; missing, it skips (fails with DEPLOYKIT_REQUIRE_ASSETS=1)."""
    platform = get_platform("linux/arm64")
    assert isinstance(platform, EmulatedPlatform)
    if platform.state() != "ready":
        missing_asset(f"the linux/arm64 emulated target ({platform.state()} in {platform.folder()})", PREPARE)
    return platform


@pytest.fixture(scope="session")
def catalog_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    import numpy as np

    directory = tmp_path_factory.mktemp("catalog-arm64")
    models = {}
    for entry in CATALOG:
        path = directory / f"{entry.name}.onnx"
        onnx.save(entry.build(), path)
        models[entry.name] = (path, entry.feeds(np.random.default_rng(0))[0])
    return models


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    return folder


@pytest.fixture(scope="session")
def mobilenet_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MobileNetV2 recipe from torchvision's ImageNet weights (checked on the host's ORT)."""
    from deploykit.recipes import build

    mobilenet_v2_weights()
    path = tmp_path_factory.mktemp("mobilenet") / "mobilenet_v2.onnx"
    build("mobilenet_v2", path, verify_backends=("onnxruntime",))
    return path
