"""``deploykit.testing.darknet``: Darknet's own forward pass, compiled only when asked for, into a
documented cache directory, with a clear error for each thing that can be missing or go wrong."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from deploykit.convert.darknet.convert import load_network
from deploykit.convert.darknet.weights import write_random_weights
from deploykit.errors import OracleError
from deploykit.testing import darknet
from tests.assets.darknet_helper import (
    use_empty_cache,
    use_fake_darknet,
    use_fake_helper,
    use_no_compiler,
    write_small_cfg,
)
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


def test_the_darknet_module_is_an_attribute_of_the_package(tmp_path):
    environment = {**os.environ, "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    code = "import deploykit.testing as t; print(t.darknet.unsupported_reason.__name__)"
    done = subprocess.run([sys.executable, "-c", code], check=True, env=environment, cwd=REPO, capture_output=True,
                          text=True)  # fmt: skip
    assert done.stdout == "unsupported_reason\n"
    assert not (tmp_path / "cache").exists()


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


def test_darknet_runs_a_checked_cfg_and_returns_the_layers(tmp_path, cache):
    _require_darknet()
    weights = tmp_path / "random.weights"
    write_random_weights(load_network(YOLOV3_TINY), weights, seed=3)
    image = np.random.default_rng(0).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    outputs = darknet.darknet_outputs(YOLOV3_TINY, weights, image, np.array([16, 23]))
    assert {index: value.shape for index, value in outputs.items()} == {16: (255 * 13 * 13,), 23: (255 * 26 * 26,)}
    assert all(np.isfinite(value).all() and value.std() > 0 for value in outputs.values())


def test_darknet_failing_or_crashing_is_a_clear_error(tmp_path, monkeypatch):
    small = write_small_cfg(tmp_path / "small.cfg")
    weights = tmp_path / "small.weights"
    write_random_weights(load_network(small), weights)
    image = np.zeros((3, 32, 32), np.float32)
    use_fake_helper(tmp_path, monkeypatch, "echo 'layer 0 went wrong' >&2\nkill -ABRT $$\n")
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(small, weights, image, [0])
    assert caught.value.message == (
        "Darknet 'small.cfg' | Darknet's forward pass failed (killed by signal SIGABRT (exit code -6)): "
        "layer 0 went wrong; expected it to run the cfg with these weights."
    )
    # Darknet exits 0 after "Couldn't open file" and writes nothing
    (tmp_path / "again").mkdir()
    use_fake_helper(tmp_path / "again", monkeypatch, 'echo "Couldn\'t open file: x" >&2\n')
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(small, weights, image, [0])
    assert caught.value.message.startswith(
        "Darknet 'small.cfg' | Darknet's forward pass failed (exited with code 0): Couldn't open file: x;"
    )


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
        "image | shape (2, 3, 416, 416), expected (3, 416, 416) or (1, 3, 416, 416) for 'yolov3-tiny.cfg' "
        "(channels, height, width from its [net])."
    )
    assert caught.value.hint == "pass one image; run Darknet once per image for a batch."
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, image, [])
    assert caught.value.message == "Darknet helper | no layers to read, expected at least one layer index."
    no_net = tmp_path / "no-net.cfg"
    no_net.write_text("[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=leaky\n")
    with pytest.raises(OracleError) as caught:  # Darknet itself would abort on it
        darknet.darknet_outputs(no_net, weights, image, [0])
    assert caught.value.message == f"cfg '{no_net}' | starts with [convolutional] (line 1), expected [net]."
    assert not cache.exists()


@pytest.mark.parametrize(
    ("shape", "hint"),
    [
        ((416, 416, 3), "the image is laid out HWC (height, width, channels); transpose it to CHW: "
                        "image.transpose(2, 0, 1)."),
        ((1, 416, 416, 3), "the image is laid out HWC (height, width, channels); transpose it to CHW: "
                           "image.transpose(2, 0, 1)."),
        ((3, 320, 320), "resize the image to 416x416 with 3 channels and lay it out as CHW (an HWC image: "
                        "image.transpose(2, 0, 1))."),
        ((519168,), "resize the image to 416x416 with 3 channels and lay it out as CHW (an HWC image: "
                    "image.transpose(2, 0, 1))."),
    ],
)  # fmt: skip
def test_an_image_of_the_right_size_but_wrong_shape_is_refused(tmp_path, cache, shape, hint):
    """Darknet reads any 519168 floats as its 3 x 416 x 416 input: an HWC image would run silently."""
    weights = tmp_path / "w.weights"
    weights.write_bytes(bytes(16))
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros(shape, np.float32), [16])
    assert caught.value.message == (
        f"image | shape {shape}, expected (3, 416, 416) or (1, 3, 416, 416) for 'yolov3-tiny.cfg' "
        "(channels, height, width from its [net])."
    )
    assert caught.value.hint == hint
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros((3, 416, 416), complex), [16])
    assert caught.value.message == "image | dtype complex128, expected real numbers (passed to Darknet as float32)."
    assert not cache.exists()


def test_weights_of_another_net_are_refused_naming_both_sizes(tmp_path, cache):
    """Darknet reads a weights file of any size without a word; the converter's exact-size check applies."""
    small = write_small_cfg(tmp_path / "small.cfg", filters=4)  # 4 x 28 = 112 floats
    bigger = tmp_path / "bigger.weights"
    write_random_weights(load_network(write_small_cfg(tmp_path / "bigger.cfg", filters=8)), bigger)  # 224 floats
    image = np.zeros((3, 32, 32), np.float32)
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(small, bigger, image, [0])
    assert caught.value.message == (
        "weights 'bigger.weights' | 112 floats (448 bytes) left over after every layer of 'small.cfg' is loaded; "
        "expected 468 bytes (header 20 + 4 × 112 floats), found 916."
    )
    assert caught.value.hint == "these weights belong to another cfg (a bigger network, or more classes)."
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, bigger, np.zeros((3, 416, 416), np.float32), [16])
    assert caught.value.message.startswith("weights 'bigger.weights' | too short for 'yolov3-tiny.cfg': ")
    assert caught.value.message.endswith("expected 35434956 bytes (header 20 + 4 × 8858734 floats), found 916.")
    assert not cache.exists()


def test_an_alexeyab_cfg_is_refused(tmp_path, cache):
    """pjreddie's Darknet reads route groups and scale_x_y without an error and computes something else."""
    weights = tmp_path / "w.weights"
    weights.write_bytes(bytes(16))
    assert darknet.unsupported_reason(YOLOV3_TINY) is None
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(REPO / "models" / "darknet" / "yolov4-tiny.cfg", weights,
                                np.zeros((3, 416, 416), np.float32), [30])  # fmt: skip
    assert caught.value.message == (
        "Darknet 'yolov4-tiny.cfg' | Debian's libdarknet (pjreddie's Darknet) does not implement group_id, "
        "scale_x_y used by this cfg, expected a cfg of the layers pjreddie's Darknet knows (YOLOv2/v3)."
    )
    assert str(caught.value.hint).startswith("Darknet would run it without an error and compute something else; ")
    assert not cache.exists()


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (16, "layers | got 16 (int), expected a list of layer indices."),
        ("16", "layers | got '16' (str), expected a list of layer indices."),
        (["16"], "layers | entry '16' is a str, expected int layer indices."),
        ([16.0], "layers | entry 16.0 is a float, expected int layer indices."),
        ([True], "layers | entry True is a bool, expected int layer indices."),
        ([16, 999], "layers | 999 is out of range for 'yolov3-tiny.cfg', expected 0 to 23 (the cfg has 24 layers, "
                    "[net] not counted)."),
        ([-1], "layers | -1 is out of range for 'yolov3-tiny.cfg', expected 0 to 23 (the cfg has 24 layers, "
               "[net] not counted)."),
    ],
)  # fmt: skip
def test_bad_layers_are_refused_before_darknet_runs(tmp_path, cache, layers, message):
    weights = tmp_path / "w.weights"
    weights.write_bytes(bytes(16))
    with pytest.raises(OracleError) as caught:
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros((3, 416, 416), np.float32), layers)
    assert caught.value.message == message
    assert not cache.exists()


def test_numpy_layer_indices_pass_the_layer_check(tmp_path, cache):
    weights = tmp_path / "w.weights"
    weights.write_bytes(bytes(16))
    with pytest.raises(OracleError) as caught:  # the layers pass; the weights check is next
        darknet.darknet_outputs(YOLOV3_TINY, weights, np.zeros((3, 416, 416), np.float32), np.array([16, 23]))
    assert caught.value.message.startswith("weights 'w.weights' | too short for 'yolov3-tiny.cfg'")


def test_cc_with_arguments_is_split_like_make(tmp_path, cache, fake_darknet, monkeypatch):
    """``CC='ccache gcc'`` / ``CC='gcc -O2'``: the first word is the program, the rest its arguments."""
    cc = require_executable("cc", "apt-get install gcc")
    monkeypatch.setenv("CC", f"{cc} -O0")
    assert darknet.unavailable_reason() is None
    with pytest.raises(OracleError) as caught:  # found and run: it fails on the fake header only
        darknet.build_helper()
    assert caught.value.message.startswith(
        f"Darknet helper | cc failed to compile darknet_dump.c against {fake_darknet}"
    )
    for value in (f"{tmp_path}/no-such-cc -O2", "'gcc -O2"):  # a missing program, an unbalanced quote
        monkeypatch.setenv("CC", value)
        with pytest.raises(OracleError) as caught:
            darknet.build_helper()
        assert caught.value.message.startswith(f"Darknet helper | the C compiler $CC={value} is not found, ")


def test_cc_with_arguments_builds_the_helper(cache, monkeypatch):
    _require_darknet()
    monkeypatch.setenv("CC", f"{require_executable('gcc', 'apt-get install gcc')} -O1")
    assert darknet.build_helper().is_file() and darknet.is_built()


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
