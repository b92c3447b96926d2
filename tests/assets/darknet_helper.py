"""Environments for the tests of ``deploykit.testing.darknet`` and of the oracle choice: an empty
cache directory, Darknet's files where the checks look (without Darknet), no C compiler."""

from __future__ import annotations

from pathlib import Path

import pytest


def use_empty_cache(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``DEPLOYKIT_CACHE_DIR`` at ``directory``/cache, which does not exist yet."""
    cache = directory / "cache"
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(cache))
    return cache


def use_fake_darknet(directory: Path, monkeypatch: pytest.MonkeyPatch, header: str = "") -> Path:
    """A ``darknet.h`` (with ``header`` as its text) and an empty ``libdarknet.so`` where the helper
    looks: the checks before compiling pass on any machine, but this is not Darknet."""
    fake = directory / "fake-darknet"
    fake.mkdir()
    (fake / "darknet.h").write_text(header)
    (fake / "libdarknet.so").write_bytes(b"")
    monkeypatch.setenv("DEPLOYKIT_DARKNET_INCLUDE", str(fake))
    monkeypatch.setenv("DEPLOYKIT_DARKNET_LIB", str(fake))
    return fake


def use_no_compiler(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty directory as the whole ``PATH`` and no ``CC``: no C compiler to be found."""
    empty = directory / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)


def write_small_cfg(path: Path, filters: int = 4) -> Path:
    """A [net] of 3 x 32 x 32 and one 3x3 [convolutional] without batch norm: ``filters`` x (1 + 27) floats."""
    path.write_text(
        "[net]\nwidth=32\nheight=32\nchannels=3\n\n"
        f"[convolutional]\nfilters={filters}\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    )
    return path


def use_fake_helper(directory: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """A fake Darknet (``use_fake_darknet``), an empty cache, and ``script`` (a shell script) installed
    as the built helper: ``darknet_outputs`` runs it as it would run Darknet, on any machine."""
    from deploykit.testing import darknet

    use_fake_darknet(directory, monkeypatch, header="/* not Darknet */\n")
    use_empty_cache(directory, monkeypatch)
    helper = darknet.helper_path()
    helper.parent.mkdir(parents=True)
    helper.write_text("#!/bin/sh\n" + script)
    helper.chmod(0o755)
    return helper
