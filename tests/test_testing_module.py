"""``deploykit.testing.darknet``: Darknet's own forward pass, compiled only when asked for, into a
documented cache directory, with a clear error for each thing that can be missing or go wrong."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from deploykit.errors import OracleError
from deploykit.testing import darknet
from tests.assets.darknet_helper import use_empty_cache, use_fake_darknet, use_no_compiler
from tests.assets.paths import REPO, missing_asset, require_executable

YOLOV3_TINY = REPO / "models" / "darknet" / "yolov3-tiny.cfg"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    return use_empty_cache(tmp_path, monkeypatch)


@pytest.fixture
def fake_darknet(tmp_path, monkeypatch) -> Path:
    return use_fake_darknet(tmp_path, monkeypatch, header='#error "this is not Darknet\'s header"\n')


def _require_darknet() -> None:
    reason = darknet.unavailable_reason()
    if reason:
        missing_asset("Darknet's own forward pass (deploykit.testing.darknet)", reason)


def test_cache_dir_rule(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert darknet.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("DEPLOYKIT_CACHE_DIR")
    assert darknet.cache_dir() == tmp_path / "xdg" / "deploykit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert darknet.cache_dir() == tmp_path / "home" / ".cache" / "deploykit"


def test_importing_deploykit_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    environment = {**os.environ, "DEPLOYKIT_CACHE_DIR": str(cache)}
    code = "import deploykit, deploykit.testing.darknet, deploykit.convert.darknet.convert"
    subprocess.run([sys.executable, "-c", code], check=True, env=environment, cwd=REPO)
    assert not cache.exists()


def test_missing_darknet_is_a_clear_error(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_DARKNET_INCLUDE", str(tmp_path / "no-include"))
    monkeypatch.setenv("DEPLOYKIT_DARKNET_LIB", str(tmp_path / "no-lib"))
    assert darknet.unavailable_reason() == (
        f"Darknet is not installed: no {tmp_path}/no-include/darknet.h and no {tmp_path}/no-lib/libdarknet.so "
        "(apt-get install darknet)"
    )
    assert not darknet.is_built()
    with pytest.raises(OracleError) as caught:
        darknet.build_helper()
    assert caught.value.message == (
        f"Darknet helper | Darknet is not installed: no {tmp_path}/no-include/darknet.h and no "
        f"{tmp_path}/no-lib/libdarknet.so, expected Debian's darknet package (darknet.h and libdarknet.so)."
    )
    assert "apt-get install darknet" in str(caught.value.hint) and "DEPLOYKIT_DARKNET_INCLUDE" in str(caught.value.hint)
    assert not cache.exists()


def test_no_compiler_on_path_is_a_clear_error(tmp_path, cache, fake_darknet, monkeypatch):
    use_no_compiler(tmp_path, monkeypatch)
    assert darknet.unavailable_reason() == (
        "no C compiler: neither gcc nor cc is on PATH to build Darknet's forward pass (apt-get install gcc)"
    )
    with pytest.raises(OracleError) as caught:
        darknet.build_helper()
    assert caught.value.message == (
        "Darknet helper | no C compiler: neither gcc nor cc is on PATH, expected a C compiler to build "
        f"Darknet's forward pass into {cache}."
    )
    assert str(caught.value.hint).startswith("apt-get install gcc, or set CC to a C compiler; or verify against ")
    assert not cache.exists()


def test_a_cc_that_does_not_exist_is_a_clear_error(tmp_path, cache, fake_darknet, monkeypatch):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(OracleError) as caught:
        darknet.build_helper()
    assert caught.value.message.startswith(f"Darknet helper | the C compiler $CC={tmp_path}/no-such-cc is not found, ")


def test_a_failed_compile_is_a_clear_error_and_leaves_nothing(cache, fake_darknet, monkeypatch):
    monkeypatch.setenv("CC", require_executable("cc", "apt-get install gcc"))
    with pytest.raises(OracleError) as caught:
        darknet.build_helper()
    message = caught.value.message
    assert message.startswith(f"Darknet helper | cc failed to compile darknet_dump.c against {fake_darknet}/darknet.h")
    assert "this is not Darknet's header" in message and message.endswith("; expected a clean build.")
    assert "another Darknet fork" in str(caught.value.hint)
    assert list(cache.iterdir()) == []  # no helper, no temporary file


def test_build_is_explicit_atomic_and_follows_the_umask(cache):
    _require_darknet()
    assert not darknet.is_built()
    previous = os.umask(0o027)
    try:
        binary = darknet.build_helper()
    finally:
        os.umask(previous)
    assert darknet.is_built() and binary == darknet.helper_path() and binary.parent == cache
    assert [p.name for p in cache.iterdir()] == [binary.name]  # the temporary build directory is gone
    assert stat.S_IMODE(binary.stat().st_mode) == 0o750
    assert stat.S_IMODE(cache.stat().st_mode) == 0o750
    assert darknet.build_helper() == binary  # built once


def test_darknet_failures_are_clear_errors(tmp_path):
    _require_darknet()
    weights = tmp_path / "zero.weights"
    weights.write_bytes(bytes(1000))
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros((3, 32, 32), np.float32), [16])
    assert caught.value.message == (
        "Darknet 'yolov3-tiny.cfg' | Darknet's forward pass failed (exited with code 1): the input is not 519168 floats "
        "(3 x 416 x 416) as the cfg's [net] says; expected it to run the cfg with these weights."
    )
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros((3, 416, 416), np.float32), [99])
    assert "(exited with code 1): layer 99 is out of range: the network has 24 layers;" in caught.value.message
    # a cfg without [net]: Darknet's parser gives up with assert(0) (exit(-1) in a build without asserts)
    crash = tmp_path / "no-net.cfg"
    crash.write_text("[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n")
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(crash, weights, np.zeros((3, 32, 32), np.float32), [0])
    assert re.match(r"Darknet 'no-net.cfg' \| Darknet's forward pass failed \((killed by signal SIGABRT|exited with code 255)",
                    caught.value.message), caught.value.message  # fmt: skip


def test_bad_arguments_are_clear_errors_before_anything_is_built(tmp_path, cache):
    image = np.zeros((3, 416, 416), np.float32)
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(tmp_path / "missing.cfg", tmp_path / "w.weights", image, [16])
    assert caught.value.message == (
        f"Darknet helper | the cfg '{tmp_path}/missing.cfg' is not a file, expected an existing Darknet cfg."
    )
    weights = tmp_path / "w.weights"
    weights.write_bytes(bytes(16))
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros((2, 3, 416, 416), np.float32), [16])
    assert caught.value.message == (
        "Darknet helper | the image has shape (2, 3, 416, 416), expected one image as CHW or 1xCxHxW."
    )
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, image, [])
    assert caught.value.message == "Darknet helper | no layers to read, expected at least one layer index."
    assert not cache.exists()


@pytest.mark.slow
def test_the_wheel_carries_the_c_source(tmp_path):
    """The helper's C file is package data: a wheel built from this checkout holds it beside the module."""
    source = tmp_path / "source"
    for folder in ("deploykit", "cli", "models"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("deploykit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"deploykit/testing/darknet_dump.c", "deploykit/testing/darknet.py"} <= names
    assert not any(name.startswith("deploykit/convert/darknet/darknet_dump") for name in names)


def test_a_cache_dir_that_cannot_be_made_is_a_clear_error(tmp_path, fake_darknet, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("CC", sys.executable)  # found, so the cache directory is what fails
    with pytest.raises(OracleError) as caught:
        darknet.build_helper()
    assert caught.value.message == (
        f"Darknet helper | cannot create the cache directory {blocker}/cache (Not a directory), "
        "expected a directory this user can write."
    )
    assert caught.value.hint == "set DEPLOYKIT_CACHE_DIR to a writable directory."
