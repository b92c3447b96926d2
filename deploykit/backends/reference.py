"""The ``reference`` backend: ``onnx.reference.ReferenceEvaluator``, onnx's own numpy implementation.

Slow and CPU only, but it shares no code with ONNX Runtime, OpenVINO or OpenCV, so the
verification subsystem uses its outputs as the independent oracle for those runtimes (and
``deploykit compare -b reference`` runs it as a candidate). It ships with the ``onnx`` package:
no extra to install. Floating inputs can be computed in float64 (``precision=f64``) and the
outputs cast back to the graph's types.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo
from deploykit.backends.devices import Device
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import LoadWording, OraclePolicy, RawRuntime, RuntimePackage, SearchTraits, device_error
from deploykit.model import Model, has_external_data, load_onnx
from deploykit.tensors import KINDS, OPTIONAL


def _blind_spot(model: Model) -> str | None:
    """A construct of ``model`` the evaluator is known to compute wrongly (``reference_ops``), or None."""
    from deploykit.backends.reference_ops import blind_spot

    return blind_spot(model.proto) if model.proto is not None else None


class ReferenceBackend(Backend):
    """onnx's reference evaluator: the independent oracle (CPU, f32 or f64)."""

    name = "reference"
    aliases = ("ref", "onnx-reference")
    runtime = RuntimePackage(module="onnx.reference", pip_extra="onnx", distributions=("onnx",))
    oracle = OraclePolicy(independent=True, label="onnx-reference", blind_spot=_blind_spot)
    search = SearchTraits(default_candidate=False)
    value_kinds = frozenset(KINDS)  # lists for sequences, None for empty optionals, both ways
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "precision": OptionSpec(
            "f32: the model's own types; f64: floating inputs computed in float64",
            "str",
            "f32",
            choices=("f32", "f64"),
        ),
    }

    wording = LoadWording(hint="onnx's reference evaluator lacks some ops (and contrib domains); use another oracle.")
    raw = RawRuntime("deploykit.backends.raw:run_reference")

    def version(self) -> str:
        return f"onnx {metadata.version('onnx')} (reference evaluator)"

    def devices(self) -> list[str]:
        return ["cpu"]

    def precisions(self, device: str | None = None) -> list[str]:
        return ["f32", "f64"]

    def requested_precision(self, options: Mapping[str, Any]) -> str | None:
        """Only f64 is a request: ``precision=f32`` means the model's own types (f16 for an f16 model)."""
        return "f64" if self.option_value(options, "precision") == "f64" else None

    def precision_options(self, precision: str) -> dict[str, Any]:
        """f64 widens floating inputs; anything else runs the model's own types (f32 for an f32 model)."""
        return {"precision": "f64"} if precision == "f64" else {}

    def _open(self, model: Model, request: OpenRequest) -> Session:
        from onnx.reference import ReferenceEvaluator

        from deploykit.backends.reference_ops import REFERENCE_OPS

        device = request.device
        if not Device.parse(device).is_bare("cpu"):
            raise device_error(
                self.name, device, "the reference evaluator runs on the CPU only.", hint="use device cpu."
            )
        precision = request.option("precision")
        # the evaluator needs the weights too: the Model's proto leaves external data out
        proto = model.proto
        if has_external_data(proto):
            proto = load_onnx(model.path, load_external_data=True, check=False)
        evaluator = ReferenceEvaluator(proto, new_ops=REFERENCE_OPS)
        info = SessionInfo(
            backend=self.name,
            backend_version=self.version(),
            device_requested=device,
            device="cpu",
            precision="f64" if precision == "f64" else model.precision,
            providers=["onnx.reference.ReferenceEvaluator"],
            options=dict(request.options),
        )
        return ReferenceSession(
            model.path, model.inputs, model.outputs, info, evaluator, precision == "f64", model.metadata_props, request
        )


class ReferenceSession(Session):
    def __init__(
        self,
        model_path: Path,
        inputs: Any,
        outputs: Any,
        info: SessionInfo,
        evaluator: Any,
        widen: bool,
        metadata: Any = None,
        request: OpenRequest | None = None,
    ) -> None:
        super().__init__(model_path, inputs, outputs, info, metadata, request=request)
        self._evaluator = evaluator
        self._widen = widen

    def _run(self, feeds: dict[str, Any]) -> Mapping[str, Any]:
        if self._widen:
            feeds = {name: _map_tensors(value, _widened) for name, value in feeds.items()}
        try:
            results = self._evaluator.run(None, feeds)
        except MemoryError as exc:  # name the node that asked for too much (a worker's memory limit says the rest)
            raise NodeMemoryError(_failing_node(exc.__traceback__)) from exc
        produced = {
            name: _optional_tensor(value) if self.outputs[name].kind == OPTIONAL else value
            for name, value in zip(self.outputs, results, strict=True)
        }
        # the evaluator may hand back numpy scalars, or float64 after widening: the graph's types
        return {
            name: _map_tensors(value, lambda array, dtype=self.outputs[name].dtype: _graph_typed(array, dtype))
            for name, value in produced.items()
        }


class NodeMemoryError(MemoryError):
    """An allocation failed while running ``node`` (``'Conv_3' (Conv)``, or None when unknown)."""

    def __init__(self, node: str | None) -> None:
        super().__init__(f"out of memory on node {node}" if node else "out of memory")
        self.node = node


def _failing_node(trace: Any) -> str | None:
    """The innermost onnx reference op in a traceback, as ``'name' (OpType)``: the node that was running."""
    found = None
    while trace is not None:
        op = trace.tb_frame.f_locals.get("self")
        node = getattr(op, "onnx_node", None)
        if node is not None and hasattr(node, "op_type"):
            found = f"'{node.name or node.output[0]}' ({node.op_type})"
        trace = trace.tb_next
    return found


def _optional_tensor(value: Any) -> Any:
    """An optional tensor as deploykit returns it (the array, or None): the evaluator wraps it in a list."""
    if isinstance(value, list | tuple) and len(value) <= 1:
        return value[0] if value else None
    return value


def _map_tensors(value: Any, convert: Any) -> Any:
    """``convert`` applied to a tensor, to each tensor of a sequence; None (an empty optional) kept."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [convert(item) for item in value]
    return convert(value)


def _widened(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if array.dtype.kind == "f" else array


def _graph_typed(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    return np.asarray(value).astype(dtype, copy=False)
