"""Parity across backends: the same inputs on several sessions, every output compared with a reference.

``deploykit compare`` is this alone; ``deploykit bench`` applies ``parity_entry`` to its rows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.registry import canonical_name, get_backend
from deploykit.compare import compare_outputs, tolerance_for
from deploykit.errors import DeployKitError


def _topk_agreement(actual: np.ndarray, reference: np.ndarray, k: int) -> float:
    top_actual = np.argsort(-actual, axis=1)[:, :k]
    top_reference = np.argsort(-reference, axis=1)[:, :k]
    if k == 1:
        return float(np.mean(top_actual[:, 0] == top_reference[:, 0]))
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top_actual, top_reference, strict=True)]))


def parity_entry(
    outputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    reference_label: str,
    precisions: Sequence[str],
    atol: float | None = None,
    rtol: float | None = None,
) -> dict[str, Any]:
    """Compare one configuration's outputs with the reference's at the looser of both precisions."""
    loosest = max(precisions, key=lambda p: tolerance_for(p)[0])
    report = compare_outputs(outputs, reference, precision=loosest, atol=atol, rtol=rtol)
    entry: dict[str, Any] = {
        "reference": reference_label,
        "precision": loosest,
        **report.to_dict(),
        "messages": [o.describe() for o in report.outputs],
    }
    for name, ref in reference.items():
        if ref.ndim == 2 and ref.shape[1] >= 5 and name in outputs and outputs[name].shape == ref.shape:
            entry["top1_agreement"] = _topk_agreement(outputs[name], ref, 1)
            entry["top5_agreement"] = _topk_agreement(outputs[name], ref, 5)
            break
    return entry


def compare_backends(
    model: str | os.PathLike[str],
    backends: Sequence[str] | None = None,
    *,
    batch: int | None = None,
    precision: str | None = "f32",
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    reference: str | None = None,
    atol: float | None = None,
    rtol: float | None = None,
) -> dict[str, Any]:
    """Run the same inputs on every backend spec and compare each with the reference's outputs.

    Args:
        model: the ``.onnx`` file.
        backends: ``BACKEND`` or ``BACKEND:DEVICE`` specs; default every available backend × device.
        batch: batch size for random inputs (default: the model's own).
        precision: OpenVINO precision (default f32: parity is a numeric question).
        inputs: an ``.npz`` file or dict of arrays; default seeded random data.
        reference: the spec whose outputs the others must match (default: the first that runs).
        atol, rtol: tolerances (default by precision).

    Returns:
        ``{"reference", "passed", "backends": [...]}``, each backend entry with label, device,
        precision, passed, outputs, failures and error.
    """
    from deploykit.bench.config import parse_backend_spec
    from deploykit.bench.runner import _feeds_for, default_backend_specs, load_inputs
    from deploykit.model import read_interface

    interface = read_interface(model)
    given = load_inputs(Path(model), inputs, batch or 1) if isinstance(inputs, (str, os.PathLike)) else inputs
    from deploykit.bench.config import model_batch

    if batch is None:
        batch = model_batch({s.name: s for s in interface.inputs})
    feeds = _feeds_for(interface, batch, given, seed)
    specs = list(backends or default_backend_specs())
    if reference and reference not in specs:
        specs.insert(0, reference)
    elif reference:
        specs.insert(0, specs.pop(specs.index(reference)))
    runs: list[dict[str, Any]] = []
    for spec in specs:
        name, device = parse_backend_spec(spec)
        name = canonical_name(name)
        options: dict[str, Any] = {"precision": precision} if name == "openvino" and precision else {}
        entry: dict[str, Any] = {
            "label": spec,
            "device": device,
            "precision": None,
            "passed": False,
            "outputs": [],
            "failures": [],
            "error": None,
        }
        try:
            with get_backend(name).open(Path(model), device, **options) as session:
                entry["outputs_arrays"] = session.run(feeds)
                entry["device"], entry["precision"] = session.info.device, session.info.precision
        except DeployKitError as exc:
            entry["error"] = str(exc)
        runs.append(entry)
    reference_run = next((r for r in runs if r["error"] is None), None)
    reference_arrays: dict[str, np.ndarray] = {}
    for run in runs:
        arrays = run.pop("outputs_arrays", None)
        if run["error"] is not None or reference_run is None:
            continue
        if run is reference_run:
            run["passed"] = True
            run["outputs"] = [
                {"name": n, "passed": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "cosine": 1.0} for n in arrays
            ]
            reference_arrays = arrays
            continue
        parity = parity_entry(
            arrays,
            reference_arrays,
            reference_run["label"],
            [run["precision"], reference_run["precision"]],
            atol,
            rtol,
        )
        run["passed"] = parity["passed"]
        run["outputs"] = parity["outputs"]
        run["failures"] = [m for m, o in zip(parity["messages"], parity["outputs"], strict=True) if not o["passed"]]
        for key in ("top1_agreement", "top5_agreement"):
            if key in parity:
                run[key] = parity[key]
    return {
        "model": str(model),
        "reference": reference_run["label"] if reference_run else None,
        "inputs": {k: list(v.shape) for k, v in feeds.items()},
        "passed": reference_run is not None and all(r["passed"] for r in runs),
        "backends": runs,
    }
