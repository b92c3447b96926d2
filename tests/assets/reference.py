"""The slow, independent oracle the tests compare backends against: ``onnx.reference``.

The library's own oracle lives in ``deploykit.verify``; this is the plain call tests need to get
expected outputs of a file (it was ``deploykit.model.run_reference``, used by tests only).
"""

from __future__ import annotations

import os

import numpy as np


def run_reference(path: str | os.PathLike[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of ``onnx.reference.ReferenceEvaluator`` (with deploykit's extra reference ops), by name."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    from deploykit.backends.reference_ops import REFERENCE_OPS

    model = onnx.load(os.fspath(path), load_external_data=True)
    evaluator = ReferenceEvaluator(model, new_ops=REFERENCE_OPS)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, evaluator.run(None, feeds), strict=True))
