"""What each backend claims it runs here, checked: ``deploykit backends --check``.

A small convolutional model (built here in code, no file needed) runs on every available backend ×
device × precision the backend claims (``Backend.precisions(device)``), each in its own worker, and
is judged against onnx's reference evaluator. The report says, per row, what was claimed, what the
runtime says it ran, and the verdict; precisions a device does not claim are listed as such. This is
what a user runs first on a new device; the test suite asserts the same claims.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.registry import REFERENCE_BACKEND
from deploykit.verify.check import compare, default_backend_specs, parse_backend_spec
from deploykit.verify.settings import VerifySettings

CHECKED_PRECISIONS = ("f32", "bf16", "f16")


@dataclass(frozen=True)
class ClaimCheck:
    """One backend × device × claimed precision, run and judged.

    Attributes:
        backend, device: what was asked for.
        claimed: every precision the backend claims on that device.
        precision: the precision asked for; ``ran``: the one the runtime reported.
        status: the verdict (``pass``, ``fail``, ``error`` ...); ``reason`` why.
    """

    backend: str
    device: str
    claimed: tuple[str, ...]
    precision: str
    ran: str | None
    status: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "claimed": list(self.claimed)}


@dataclass(frozen=True)
class ClaimsReport:
    rows: list[ClaimCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every claimed precision ran as claimed and passed."""
        return bool(self.rows) and all(r.status == "pass" and r.ran == r.precision for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}


def probe_model(path: Path) -> Path:
    """A 1×3×16×16 Conv → BatchNorm → LeakyRelu → Conv → Sigmoid model with seeded weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)

    def init(name: str, *shape: int, low: float = -0.3, high: float = 0.3) -> Any:
        return numpy_helper.from_array(rng.uniform(low, high, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["bn"]),
        helper.make_node("LeakyRelu", ["bn"], ["act"], alpha=0.1),
        helper.make_node("Conv", ["act", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Sigmoid", ["c2"], ["y"]),
    ]
    inits = [
        init("w1", 8, 3, 3, 3),
        init("b1", 8),
        init("scale", 8, low=0.5, high=1.5),
        init("bias", 8),
        init("mean", 8),
        init("var", 8, low=0.5, high=1.5),
        init("w2", 4, 8, 3, 3),
    ]
    graph = helper.make_graph(
        nodes,
        "deploykit_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def check_claims(backends: Sequence[str] | None = None, *, timeout_s: float = 120.0) -> ClaimsReport:
    """Run the probe model on every backend × device × claimed precision and judge it.

    Args:
        backends: ``BACKEND[:DEVICE]`` specs; default every available backend × device.
        timeout_s: per worker process.
    """
    from deploykit.backends.registry import canonical_name, get_backend

    specs = list(backends or default_backend_specs())
    claims: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for spec in specs:
        name, device = parse_backend_spec(spec)
        backend = get_backend(canonical_name(name))
        device = device or backend.default_device
        claims[f"{backend.name}:{device}"] = (backend.name, device, tuple(backend.precisions(device)))
    with tempfile.TemporaryDirectory(prefix="deploykit-check-") as scratch:
        model = probe_model(Path(scratch) / "probe.onnx")
        settings = VerifySettings(precision=",".join(CHECKED_PRECISIONS), oracle=REFERENCE_BACKEND, timeout_s=timeout_s)
        report = compare(model, [f"{b}:{d}" for b, d, _ in claims.values()], settings)
    rows = []
    for verdict in report.verdicts:
        key, _, asked = verdict.candidate.rpartition(" ")
        backend_name, device, claimed = claims[key]
        rows.append(
            ClaimCheck(backend_name, device, claimed, asked, verdict.precision, verdict.status, verdict.explanation)
        )
    notes = [n for n in report.notes if not n.startswith("no task metric")]  # the probe has no task by design
    if backends is None:
        notes.append("not checked: AUTO (it picks among the devices above) and the reference backend (the oracle)")
    return ClaimsReport(rows, notes)
