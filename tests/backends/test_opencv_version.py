"""CI runs the OpenCV contract twice, on 5.x and on 4.x; this proves which one ran."""

from __future__ import annotations

import os

import pytest

from tests.assets.paths import require_module


def test_opencv_major_version_is_the_expected_one():
    cv2 = require_module("cv2", "pip install 'deploykit[opencv]'", "OpenCV")
    expected = os.environ.get("DEPLOYKIT_EXPECT_OPENCV")
    if not expected:
        pytest.skip("DEPLOYKIT_EXPECT_OPENCV not set (only the CI's OpenCV runs set it)")
    assert cv2.__version__.split(".")[0] == expected, cv2.__file__
