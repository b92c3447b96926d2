"""The parity gate shared by converters: run the converted ONNX on backends, compare with the source.

The source's outputs (PyTorch, Darknet ...) are computed by the converter; this
module only loads the ONNX file on each backend and compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.registry import canonical_name, get_backend
from deploykit.compare import compare_outputs
from deploykit.convert.report import BackendParity
from deploykit.errors import DeployKitError

# Parity is a numeric question: OpenVINO is held to f32 rather than a device's bf16 default.
PARITY_OPTIONS: dict[str, dict[str, str]] = {"openvino": {"precision": "f32"}}


def run_gate(
    onnx_path: Path,
    cases: Sequence[dict[str, np.ndarray]],
    references: Sequence[dict[str, np.ndarray]],
    backends: Sequence[str],
    *,
    atol: float | None = None,
    rtol: float | None = None,
    precision: str = "f32",
) -> list[BackendParity]:
    """Run every case on every backend's CPU device and compare with the references."""
    results = []
    for requested in backends:
        name = canonical_name(requested)
        backend = get_backend(name)
        try:
            options: dict[str, Any] = dict(PARITY_OPTIONS.get(name, {}))
            session = backend.open(onnx_path, **options)
        except DeployKitError as exc:
            results.append(BackendParity(name, backend.default_device, "-", False, error=str(exc)))
            continue
        parity = BackendParity(name, session.info.device, session.info.precision, True)
        with session:
            for index, (feeds, reference) in enumerate(zip(cases, references, strict=True)):
                try:
                    outputs = session.run(feeds)
                except DeployKitError as exc:
                    parity.passed, parity.error = False, str(exc)
                    break
                report = compare_outputs(outputs, reference, atol=atol, rtol=rtol, precision=precision)
                parity.passed = parity.passed and report.passed
                parity.cases.append(
                    {
                        "case": index,
                        "input_shapes": {k: list(v.shape) for k, v in feeds.items()},
                        **report.to_dict(),
                        "messages": [o.describe() for o in report.outputs],
                    }
                )
        results.append(parity)
    return results


def first_failure(parity: Sequence[BackendParity]) -> str:
    """One sentence about the first failing backend: its error, or its worst output."""
    for entry in parity:
        if entry.passed:
            continue
        if entry.error:
            return f"on {entry.backend}: {entry.error}"
        for case in entry.cases:
            for output, message in zip(case["outputs"], case["messages"], strict=True):
                if not output["passed"]:
                    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in case["input_shapes"].items())
                    return f"on {entry.backend} with inputs {shapes}: {message}"
    return "no failure"
