"""Models and photos for the optimize tests: the quantize tests' small image classifier built in code
and 12 real photos (the same fixtures; MobileNetV2 is the session's, tests/conftest.py), and a
verified-file cache of the tests' own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.quantize.conftest import classifier_path, photos

__all__ = ["classifier_path", "photos"]


@pytest.fixture(scope="package", autouse=True)
def _own_verified_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Bundles remember verified model files in the user's cache folder: these tests use their own,
    and only while they run (a session-wide one would hide the emulated targets of tests/platforms)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path_factory.mktemp("deploykit-cache")))
        yield
