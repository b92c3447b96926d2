"""The target's wheels take the host's versions: the runtimes and numpy/onnx pinned, every dependency
constrained, and another version only where pip says the index has none of the host's."""

from __future__ import annotations

from importlib import metadata

import pytest

from deploykit.errors import PlatformError
from deploykit.platforms.wheels import _available_version, host_constraints, platform_tags


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
