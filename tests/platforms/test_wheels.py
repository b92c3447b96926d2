"""The target's wheels take the host's versions: the runtimes and numpy/onnx pinned, every dependency
constrained, and another version only where pip says the index has none of the host's."""

from __future__ import annotations

import subprocess
from importlib import metadata

import pytest

from deploykit.backends.registry import get_backend
from deploykit.errors import PlatformError
from deploykit.platforms.wheels import (
    _available_version,
    _pip_failure,
    host_constraints,
    host_requirements,
    platform_tags,
)


def test_the_constraints_hold_the_hosts_version_of_every_installed_distribution() -> None:
    pins = host_constraints()
    for name in ("numpy", "onnx", "protobuf"):
        assert f"{name}=={metadata.version(name)}" in pins
    assert len(pins) == len({pin.split("==")[0].lower() for pin in pins})  # one pin per distribution


def test_a_pip_failure_that_is_no_missing_version_is_an_error_not_another_version() -> None:
    # an unparsable requirement: pip fails without saying that a version is missing
    with pytest.raises(PlatformError) as caught:
        _available_version(platform_tags("aarch64", 36), "3.11", "numpy>=")
    message = str(caught.value)
    assert "pip could not install numpy>=" in message and "expected wheels for the target's platform tags" in message
    assert "platforms add" in (caught.value.hint or "")


def test_a_full_disk_under_pip_is_said_as_a_full_disk_not_as_the_index() -> None:
    """pip's own last line when the disk filled during 'platforms add' (a fresh clone's CI run here): the
    message named the package index and its hint said to check access to it."""
    stderr = (
        "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device: "
        "'/work/x/.ci-cache/deploykit/platforms/linux-arm64/site.partial/onnx'\n"
    )
    error = _pip_failure(subprocess.CompletedProcess(["pip"], 1, "", stderr), "onnxruntime==1.31.1")
    assert "the disk is full" in str(error) and "No space left on device" in str(error)
    assert "package index" not in str(error) + (error.hint or "")
    assert "free some space" in (error.hint or "") and "platforms add" in (error.hint or "")


def test_the_target_gets_mnn_and_litert_at_the_hosts_versions_but_no_oracle_only_runtime() -> None:
    """LiteRT is left out of the default sweeps (its ONNX converter is the user's to create), yet its
    interpreter goes to the target: a .tflite runs there without the converter environment."""
    requirements = {r.distribution: r for r in host_requirements()}
    for distribution, backend in (("mnn", "mnn"), ("ai-edge-litert", "litert")):
        if not get_backend(backend).is_available():
            continue
        assert requirements[distribution].backend == backend
        assert requirements[distribution].pinned == f"{distribution}=={metadata.version(distribution)}"
    assert "reference" not in {r.backend for r in requirements.values()}


def test_the_platform_tags_reach_the_manylinux_2_27_and_2_28_wheels() -> None:
    """Current aarch64 wheels (ai-edge-litert: manylinux_2_27) are found only with the PEP 600 tags."""
    tags = platform_tags("aarch64", 36)  # Debian bookworm's glibc 2.36
    assert {"manylinux_2_27_aarch64", "manylinux_2_28_aarch64", "manylinux2014_aarch64"} <= set(tags)
    assert tags.index("manylinux_2_28_aarch64") < tags.index("manylinux_2_27_aarch64")
