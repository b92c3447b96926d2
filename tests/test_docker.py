"""The CPU image, built and run: ``docker/build.sh cpu`` (podman with runc, or docker), then the
commands a user runs first, inside the image, as its non-root user, with reports written to a mounted
folder. ``make docker`` runs this file; it is outside the main pytest pass (marker ``docker``).

It skips only where no container engine can run a container at all, and says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest

from tests.assets.paths import REPO, darknet_image, nudenet_model
from tests.quantize.conftest import conv_classifier

pytestmark = pytest.mark.docker

TAG = "localhost/deploykit:cpu"


def _engine() -> list[str]:
    chosen = os.environ.get("CONTAINER_ENGINE") or next((e for e in ("podman", "docker") if shutil.which(e)), None)
    if chosen is None or not shutil.which(chosen):
        pytest.skip("no container engine (podman or docker) is installed here: the image cannot be built or run")
    return [chosen, "--runtime", "runc"] if chosen == "podman" and shutil.which("runc") else [chosen]


@pytest.fixture(scope="module")
def image() -> list[str]:
    """The engine's command line, once the CPU image is built (built by this fixture every run:
    the build is what is tested, and the engine's layer cache makes an unchanged one quick)."""
    engine = _engine()
    probe = subprocess.run([*engine, "info"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{engine[0]} cannot run here ({probe.stderr.strip().splitlines()[-1:]})")
    built = subprocess.run(["bash", str(REPO / "docker" / "build.sh"), "cpu", TAG], capture_output=True, text=True,
                           timeout=1800, env={**os.environ, "CONTAINER_ENGINE": engine[0]})  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return engine


def _run(engine: list[str], *args: str, mounts: dict[Path, str] | None = None, entrypoint: str | None = None,
         expect: int = 0) -> subprocess.CompletedProcess[str]:  # fmt: skip
    command = [*engine, "run", "--rm", "--network", "none", "--ulimit", "nofile=4096:4096",
               "--ulimit", "nproc=4096:4096"]  # fmt: skip
    for host, inside in (mounts or {}).items():
        command += ["--volume", f"{host}:{inside}"]
    if entrypoint:
        command += ["--entrypoint", entrypoint]
    done = subprocess.run([*command, TAG, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == expect, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_image_runs_deploykit_as_a_user_that_is_not_root(image) -> None:
    version = _run(image, "--version").stdout
    assert "deploykit" in version.lower()
    uid = _run(image, "-c", "import os; print(os.getuid())", entrypoint="python3").stdout.strip()
    assert uid != "0"


def test_the_image_has_every_core_dependency_and_pip_check_passes(image) -> None:
    _run(image, "-m", "pip", "check", entrypoint="python3")
    # deploykit's own requirements as the installed package states them (from pyproject.toml)
    code = (
        "import json; from importlib import metadata; from pip._vendor.packaging.requirements import Requirement\n"
        "missing = []\n"
        "for text in metadata.requires('deploykit') or []:\n"
        "    r = Requirement(text)\n"
        "    if r.marker is not None and not r.marker.evaluate({'extra': ''}): continue\n"
        "    try: metadata.version(r.name)\n"
        "    except metadata.PackageNotFoundError: missing.append(r.name)\n"
        "print(json.dumps(missing))"
    )
    assert json.loads(_run(image, "-c", code, entrypoint="python3").stdout) == []


def test_backends_lists_the_images_runtimes_as_available(image) -> None:
    listed = json.loads(_run(image, "backends", "--json").stdout)
    available = {row["name"] for row in listed if row.get("available")}
    assert {"onnxruntime", "openvino", "opencv"} <= available, listed


def test_bench_writes_its_report_into_a_mounted_folder(image, tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    onnx.save(conv_classifier(), work / "classifier.onnx")
    work.chmod(0o777)  # the image's user is not the owner of the host's folder
    _run(image, "bench", "/work/classifier.onnx", "-b", "onnxruntime", "-b", "openvino", "-n", "5",
         "--report", "/work/out", mounts={work: "/work"})  # fmt: skip
    report = json.loads((work / "out" / "report.json").read_text())
    rows = {row["config"]["backend"]: row for row in report["rows"]}
    assert set(rows) >= {"onnxruntime", "openvino"}
    assert all(row["status"] == "ok" and row["verdict"]["status"] == "pass" for row in rows.values()), rows
    assert (work / "out" / "report.html").is_file()


def test_predict_runs_a_detector_on_a_shipped_photo(image, tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(nudenet_model(), work / "detector.onnx")
    shutil.copy(darknet_image("dog.jpg"), work / "dog.jpg")
    work.chmod(0o777)
    done = _run(image, "predict", "/work/detector.onnx", "/work/dog.jpg", "--draw", "/work/drawn.jpg",
                mounts={work: "/work"})  # fmt: skip
    assert "dog.jpg" in done.stdout + done.stderr
    assert (work / "drawn.jpg").stat().st_size > 0


def test_the_cuda_image_builds_where_its_base_can_be_pulled() -> None:
    engine = _engine()
    base = next(line.split("=", 1)[1] for line in (REPO / "docker" / "cuda.Dockerfile").read_text().splitlines()
                if line.startswith("ARG BASE_IMAGE="))  # fmt: skip
    pulled = subprocess.run([*engine, "pull", "-q", base], capture_output=True, text=True, timeout=1800)
    if pulled.returncode != 0:
        pytest.skip(f"the CUDA image's base {base} cannot be pulled here (no registry can be reached), and no "
                    "CUDA base can be made from Debian's packages; docker/cuda.Dockerfile is linted by "
                    "tests/test_packaging.py instead")  # fmt: skip
    built = subprocess.run(["bash", str(REPO / "docker" / "build.sh"), "cuda", "localhost/deploykit:cuda"],
                           capture_output=True, text=True, timeout=3600, env={**os.environ, "CONTAINER_ENGINE": engine[0]})  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
