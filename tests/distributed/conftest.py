"""Fixtures for the Ray tests: real photos in bulk, a real detector, and Ray instances that are always shut down."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.assets.paths import darknet_image, nudenet_model, require_module

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")
COPIES = 29  # 7 photos × 29 sizes = 203 images
BROKEN = {"broken.jpg": b"this is not a JPEG", "empty.png": b"", "truncated.jpg": None}


@pytest.fixture(scope="session", autouse=True)
def _no_ray_network() -> None:
    # Ray would otherwise report usage statistics over the network.
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"


@pytest.fixture(scope="session")
def ray_module():
    return require_module("ray", "pip install 'deploykit[ray]'", "Ray (the deploykit[ray] extra)")


@pytest.fixture(scope="session")
def detector() -> Path:
    return nudenet_model()


@pytest.fixture(scope="session")
def photo_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """≥ 200 real photos (resized copies of Debian darknet's samples) and 3 broken image files."""
    import cv2

    folder = tmp_path_factory.mktemp("photos")
    for name in PHOTOS:
        image = cv2.imread(str(darknet_image(name)))
        for index in range(COPIES):
            scale = 0.25 + 0.025 * index
            resized = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
            cv2.imwrite(str(folder / f"{Path(name).stem}_{index:02d}.jpg"), resized)
    whole = (folder / "dog_00.jpg").read_bytes()
    for name, data in BROKEN.items():
        (folder / name).write_bytes(whole[: len(whole) // 3] if data is None else data)
    return folder


@pytest.fixture(scope="module")
def local_ray(ray_module):
    """A local Ray with 2 CPUs for the module, shut down afterwards (no stray processes)."""
    from deploykit.distributed.cluster import loopback_only

    with loopback_only():
        ray_module.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray_module
    finally:
        ray_module.shutdown()
