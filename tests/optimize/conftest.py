"""Models and photos for the optimize tests: a small image classifier built in code, the MobileNetV2
recipe with its real ImageNet weights, and real photos from Debian's darknet and scikit-image."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest

from tests.assets.paths import darknet_image, mobilenet_v2_weights
from tests.quantize.conftest import DARKNET_PHOTOS, SKIMAGE_PHOTOS, conv_classifier, skimage_photo


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 real photos in one folder."""
    folder = tmp_path_factory.mktemp("photos")
    for source in [darknet_image(n) for n in DARKNET_PHOTOS] + [skimage_photo(n) for n in SKIMAGE_PHOTOS]:
        shutil.copy(source, folder / source.name)
    return folder


@pytest.fixture(scope="session")
def classifier_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 32×32 conv classifier with random weights and the metadata a converter writes."""
    path = tmp_path_factory.mktemp("tiny") / "classifier.onnx"
    onnx.save(conv_classifier(), path)
    return path


@pytest.fixture(scope="session")
def mobilenet_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MobileNetV2 recipe built from torchvision's ImageNet weights (metadata: mean/std, labels)."""
    from deploykit.recipes import build

    mobilenet_v2_weights()
    path = tmp_path_factory.mktemp("mobilenet") / "mobilenet_v2.onnx"
    build("mobilenet_v2", path, verify_backends=("onnxruntime",))
    return path


@pytest.fixture(scope="session", autouse=True)
def _own_verified_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Bundles remember verified model files in the user's cache folder: the tests use their own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path_factory.mktemp("deploykit-cache")))
        yield
