"""GPU devices: run only where a CUDA GPU is present (skipped, and said so, elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

import deploykit
from deploykit.verify.metrics import Thresholds, compare_outputs
from tests.assets.catalog import CATALOG
from tests.assets.reference import run_reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("entry", CATALOG, ids=[e.name for e in CATALOG])
def test_onnxruntime_cuda_matches_the_reference(catalog_paths, entry):
    path = catalog_paths[entry.name]
    with deploykit.load(path, "onnxruntime", "cuda") as session:
        assert session.info.device == "cuda" and not session.info.fallback
        assert session.info.providers[0] == "CUDAExecutionProvider"
        for feeds in entry.feeds(np.random.default_rng(0)):
            report = compare_outputs(session.run(feeds), run_reference(path, feeds), Thresholds())
            assert all(o.passed for o in report), [o.describe() for o in report if not o.passed]


def test_opencv_cuda_target_where_built_with_cuda(catalog_paths):
    import cv2

    if not cv2.cuda.getCudaEnabledDeviceCount():
        pytest.skip(f"this OpenCV {cv2.__version__} has no CUDA (pip wheels never do)")
    path = catalog_paths["conv_bn_act"]
    feeds = CATALOG[0].feeds(np.random.default_rng(0))[0]
    with deploykit.load(path, "opencv", "cuda") as session:
        assert session.info.device == "cuda"
        assert all(o.passed for o in compare_outputs(session.run(feeds), run_reference(path, feeds), Thresholds()))
