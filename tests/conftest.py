from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest

from deploykit.backends.registry import BUILTIN_BACKENDS, get_backend
from tests.assets.catalog import CATALOG
from tests.assets.paths import REQUIRE_VARIABLE, assets_required, environment_flag, missing_asset


def has_cuda_gpu() -> bool:
    return Path("/dev/nvidia0").exists() or environment_flag("DEPLOYKIT_TEST_GPU")


def pytest_report_header(config: pytest.Config) -> str:
    if assets_required():
        return f"{REQUIRE_VARIABLE} is on: a missing external asset fails its test"
    return f"{REQUIRE_VARIABLE} is off: a missing external asset skips its test (the reason names it)"


# `make test` runs the suite on two pytest-xdist workers. Each test file is one scope, so a file's module and
# session fixtures are built once and its tests run in order on one worker; every file that starts Ray shares
# one scope, so two Ray clusters never run at once (the Ray tests count and stop Ray's processes). The scopes
# come from the scheduler below, not from xdist_group marks: pytest 9.2 no longer lets pytest-xdist 3.8 carry a
# mark's group in the node id, and --dist loadgroup then spreads a group's tests over every worker, silently
# (pytest-dev/pytest-xdist#1386).
_STARTS_RAY = re.compile(
    r'ray\.init|"--engine", "ray"|engine="ray"|^import ray|importorskip\("ray"|require_module\("ray"|ray_module'
    r"|deploykit\.ray|serve\.ray_engine",
    re.M,
)


def _file_scope(path: Path, cache: dict[Path, str]) -> str:
    """The worker scope of a test file: ``ray`` for every file that starts Ray, else the file itself."""
    if path not in cache:
        starts_ray = path.parent.name == "distributed" or bool(_STARTS_RAY.search(path.read_text()))
        cache[path] = "ray" if starts_ray else path.as_posix()
    return cache[path]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    scopes: dict[Path, str] = {}

    class FileScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _file_scope(config.rootpath / nodeid.split("::", 1)[0], scopes)

    return FileScopes(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_cuda_gpu():
        return
    skip = pytest.mark.skip(reason="gpu: no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def catalog_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("catalog")
    paths = {}
    for entry in CATALOG:
        path = directory / f"{entry.name}.onnx"
        onnx.save(entry.build(), path)
        paths[entry.name] = path
    return paths


@pytest.fixture(params=list(BUILTIN_BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    """Every built-in backend; one whose runtime is missing is skipped with the reason."""
    reason = get_backend(request.param).unavailable_reason()
    if reason:
        missing_asset(f"the {request.param} backend's runtime", reason)
    # a converter environment is the user's to create (gigabytes, on request): its absence is said, not failed
    reason = get_backend(request.param).conversion.onnx_unavailable_reason()
    if reason:
        pytest.skip(f"{request.param} opens no ONNX model here: {reason}")
    return request.param


@pytest.fixture(scope="session")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MobileNetV2 recipe with its packaged ImageNet weights, built once per session."""
    from deploykit.recipes import build

    output = tmp_path_factory.mktemp("mobilenet") / "mobilenet_v2.onnx"
    build("mobilenet_v2", output, verify_backends=[])
    return output


@pytest.fixture(scope="session")
def yolov4_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The official YOLOv4-tiny (COCO weights from a package), converted once per session."""
    from deploykit.convert.darknet.convert import convert_darknet
    from tests.assets.paths import official_darknet

    cfg, weights, names = official_darknet("yolov4-tiny")
    output = tmp_path_factory.mktemp("yolo") / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, output, labels=names, verify_backends=[])
    return output


@pytest.fixture()
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs (needs root, as CI runs; elsewhere a missing asset): a disk that fills at once."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        missing_asset("a 16 KiB tmpfs", "run the tests as root (CI does) so they can mount one")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True)
    if result.returncode:
        missing_asset("a 16 KiB tmpfs", f"mount refused: {result.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
