"""The one model loader: ``Model.open`` reads a file once into a typed ``Model``.

A ``Model`` carries what every layer needs from the file (its path, format, SHA-256, inputs and
outputs as ``TensorSpec``s, weight precision and metadata, typed by ``deploykit.metadata``) and is
passed down instead of the path: bench, verify, vision and quantize take a ``Model`` or a path and
call ``as_model`` once at their boundary, so the ONNX file is parsed once per process. Backends
take it too; a backend that reads a native format (OpenCV's Darknet ``.cfg``) makes the ``Model``
of such a file itself (``Backend.read_model``). ``load_onnx`` is the checked parse that a missing,
corrupt or non-ONNX file fails with the same clear error everywhere. This module must not import a
runtime.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.errors import InvalidModelError, ModelNotFoundError
from deploykit.tensors import TensorSpec, spec_from_value_info

if TYPE_CHECKING:
    from deploykit.metadata import ModelMetadata

_TWO_GIB = 2**31


def check_model_path(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` as a ``Path`` when it names a readable file.

    Raises:
        ModelNotFoundError: the path does not exist, is a directory or a special file, or this user
            may not read it.
    """
    from deploykit.io import UNREADABLE, regular_file_problem, shown

    model_path = Path(path)
    problem = regular_file_problem(path)
    if problem is None:
        return model_path
    if problem == "is a directory":
        raise ModelNotFoundError(
            f"model '{shown(model_path)}' | is a directory, expected an .onnx file.",
            hint="pass the path of the .onnx file inside it.",
        )
    if problem.startswith(UNREADABLE):
        raise ModelNotFoundError(
            f"model '{shown(path)}' | {problem}; expected a file this user may read.",
            hint="give this user read permission (chmod/chown), or copy the model somewhere it may read.",
        )
    expected = "" if problem == "no such file" else "; expected a regular .onnx file"
    raise ModelNotFoundError(
        f"model '{shown(path)}' | {problem}{expected}.",
        hint="check the path; relative paths are taken from the current directory.",
    )


def load_onnx(path: str | os.PathLike[str], *, load_external_data: bool = False, check: bool = True) -> Any:
    """Read an ONNX model and make sure it is one.

    Args:
        path: the ``.onnx`` file.
        load_external_data: also read tensors stored in external data files.
        check: run ``onnx.checker`` on it.

    Returns:
        the ``onnx.ModelProto``.

    Raises:
        ModelNotFoundError: the path does not exist or is a directory.
        InvalidModelError: the file is not a valid ONNX model (corrupt, truncated, other format).
    """
    import onnx

    model_path = check_model_path(path)
    try:
        model = onnx.load(str(model_path), load_external_data=load_external_data)
    except Exception as exc:
        raise _unparsable(model_path, exc) from exc
    _check_is_onnx(model, model_path)
    if check:
        _run_checker(model, model_path)
    return model


def check_onnx(model: Model) -> None:
    """Run ``onnx.checker`` on a ``Model`` already read (a file over 2 GiB or with external data is
    checked by path, as the checker needs).

    Raises:
        InvalidModelError: naming the checker's first complaint.
    """
    _run_checker(model.proto, model.path)


def _run_checker(model: Any, model_path: Path) -> None:
    import onnx

    try:
        if model_path.stat().st_size >= _TWO_GIB or has_external_data(model):
            onnx.checker.check_model(str(model_path))
        else:
            onnx.checker.check_model(model)
    except Exception as exc:
        raise InvalidModelError(
            f"model '{model_path}' | fails the ONNX checker: {checker_reason(model, exc)}",
            hint="the file may be truncated or hand-edited; re-export it.",
        ) from exc


def _unparsable(model_path: Path, exc: Exception) -> InvalidModelError:
    return InvalidModelError(
        f"model '{model_path}' | cannot be parsed as ONNX ({type(exc).__name__}: {exc}).",
        hint="the file may be truncated or in another format; re-export or re-download it.",
    )


def _check_is_onnx(model: Any, model_path: Path) -> None:
    if model.ir_version <= 0 or not model.HasField("graph") or not model.graph.output:
        raise InvalidModelError(
            f"model '{model_path}' | is not an ONNX model (no IR version or no graph outputs).",
            hint="pass an .onnx file; convert other formats with 'deploykit convert'.",
        )


_CHECKER_NODE = re.compile(r"(?:node:\s*)?name:\s*(\S*)\s+OpType:\s*(\S+)", re.I)


def checker_reason(model: Any, exc: BaseException) -> str:
    """The checker's reason on one line, with the node it is about named by its name or, when it has
    none (the checker then prints "Name:  OpType: Add"), by its op type and index in the graph."""
    text = str(exc).strip() or repr(exc)
    reason, _, context = text.partition("==> Context:")
    match = _CHECKER_NODE.search(context) or _CHECKER_NODE.search(reason)
    reason = " ".join((_CHECKER_NODE.sub("NODE", reason) if match else reason).split()).rstrip(".")
    if match is None:
        return reason + "."
    name, op_type = match.groups()
    node = f"node '{name}' ({op_type})" if name else _unnamed_node(model, op_type, reason)
    return (reason.replace("NODE", node) if "NODE" in reason else f"{reason}; at {node}") + "."


def _unnamed_node(model: Any, op_type: str, reason: str) -> str:
    """``node 3 (an unnamed Add)``: the one unnamed top-level node of that op type the reason fits."""
    import onnx

    found = [(i, n) for i, n in enumerate(model.graph.node) if n.op_type == op_type and not n.name]
    if len(found) > 1:  # the checker says which only by what is wrong: ask it again, node by node
        context = onnx.checker.C.CheckerContext()
        context.ir_version = model.ir_version
        context.opset_imports = {entry.domain: entry.version for entry in model.opset_import}
        lexical = onnx.checker.C.LexicalScopeContext()
        failing = []
        for index, node in found:
            named = re.search(r"input '([^']*)'", reason)
            if named and named.group(1) in node.input:
                failing.append((index, node))
                continue
            try:
                onnx.checker.C.check_node(node.SerializeToString(), context, lexical)
            except Exception:
                failing.append((index, node))
        found = failing or found
    if len(found) == 1:
        return f"node {found[0][0]} (an unnamed {op_type})"
    indices = ", ".join(str(i) for i, _ in found[:5])
    return f"an unnamed {op_type} node (one of nodes {indices})" if found else f"an unnamed {op_type} node"


def check_opset(model: Any, path: str | os.PathLike[str]) -> None:
    """Refuse a model whose default-domain opset is newer than the installed ``onnx`` knows.

    Runtimes disagree on such files (ONNX Runtime refuses them, OpenVINO and OpenCV run them
    with whatever semantics they guess), so every backend refuses them the same way here.

    Raises:
        InvalidModelError: naming the model's opset and the supported range.
    """
    import onnx

    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and not 1 <= entry.version <= newest:
            raise InvalidModelError(
                f"model '{path}' | declares ONNX opset {entry.version}; the installed onnx "
                f"{onnx.__version__} knows opsets 1 to {newest}.",
                hint="re-export the model at a released opset (e.g. 17), or upgrade onnx if the "
                "opset is newer than it.",
            )


def has_external_data(model: Any) -> bool:
    """True when some initializer keeps its data in an external file."""
    from onnx import TensorProto

    return any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)


def metadata_of(model: Any, where: str | None = None) -> dict[str, str]:
    """``metadata_props`` as text: a key or value that is not valid UTF-8 (protobuf then hands over bytes)
    is decoded with replacement characters, so it can be shown and parsed, never crash a caller.

    Raises:
        MetadataError: a key is given twice (``where`` names the model in the message).
    """

    def text(value: Any) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    metadata: dict[str, str] = {}
    for entry in model.metadata_props:
        key, value = text(entry.key), text(entry.value)
        if key in metadata:  # which one is meant cannot be told; the ONNX checker refuses it too
            from deploykit.errors import MetadataError
            from deploykit.io import one_line

            subject = f"model '{where}' metadata" if where else "model metadata"
            raise MetadataError(
                f"{subject} '{one_line(key)}' | is given twice ({one_line(metadata[key], 60)!r}, then "
                f"{one_line(value, 60)!r}); expected each key once.",
                hint="re-save the model with one value for the key (onnx.helper.set_model_props).",
            )
        metadata[key] = value
    return metadata


def graph_io(model: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's real inputs (initializers excluded) and outputs, in graph order."""
    initializer_names = {t.name for t in model.graph.initializer}
    inputs = [spec_from_value_info(v) for v in model.graph.input if v.name not in initializer_names]
    outputs = [spec_from_value_info(v) for v in model.graph.output]
    for kind, specs in (("input", inputs), ("output", outputs)):
        names = [s.name for s in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # the checker lets it pass; every runtime then answers with fewer values than the graph lists
            raise InvalidModelError(
                f"graph | lists the {kind} {', '.join(repr(n) for n in twice)} more than once.",
                hint=f"list each graph {kind} once (edit model.graph.{kind}, or export again).",
            )
    return inputs, outputs


_QUANTIZED_OPS = {"DequantizeLinear", "QuantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"}


def model_precision(model: Any) -> str:
    """The type most of the model's weights use: ``f32``, ``f16``, ``bf16``, ``f64``, or ``int8`` for a
    quantized model (QDQ or QOperator) whose weights are mostly 8-bit integers."""
    from onnx import TensorProto

    names = {
        TensorProto.FLOAT: "f32",
        TensorProto.FLOAT16: "f16",
        TensorProto.BFLOAT16: "bf16",
        TensorProto.DOUBLE: "f64",
    }
    counts: collections.Counter[str] = collections.Counter()
    quantized = any(node.op_type in _QUANTIZED_OPS for node in model.graph.node)
    for tensor in model.graph.initializer:
        if tensor.data_type in names:
            counts[names[tensor.data_type]] += int(np.prod(tensor.dims, dtype=np.int64))
        elif quantized and tensor.data_type in (TensorProto.INT8, TensorProto.UINT8):
            counts["int8"] += int(np.prod(tensor.dims, dtype=np.int64))
    if not counts:
        for value in model.graph.input:
            elem = value.type.tensor_type.elem_type
            if elem in names:
                counts[names[elem]] += 1
    return counts.most_common(1)[0][0] if counts else "f32"


@dataclass
class ModelSummary:
    """What ``deploykit inspect`` shows about an ONNX file."""

    path: str
    size_bytes: int
    external_data_bytes: int
    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph_name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    node_count: int
    op_histogram: dict[str, int]
    parameter_count: int
    precision: str
    metadata: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size_bytes": self.size_bytes,
            "external_data_bytes": self.external_data_bytes,
            "ir_version": self.ir_version,
            "opsets": self.opsets,
            "producer": self.producer,
            "graph_name": self.graph_name,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "node_count": self.node_count,
            "op_histogram": self.op_histogram,
            "parameter_count": self.parameter_count,
            "precision": self.precision,
            "metadata": self.metadata,
        }


def walk_nodes(graph: Any) -> Any:
    """Every node of a graph, including those inside If/Loop/Scan subgraphs."""
    from onnx import AttributeProto

    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                yield from walk_nodes(attribute.g)
            elif attribute.type == AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from walk_nodes(subgraph)


# Constant tensors of these types are weights; integer ones are shapes, axes and indices.
_WEIGHT_TYPES = frozenset({1, 2, 3, 10, 11, 16})  # FLOAT, UINT8, INT8, FLOAT16, DOUBLE, BFLOAT16


def constant_parameters(graph: Any) -> int:
    """Weights stored in ``Constant`` nodes instead of initializers (Paddle and spox exports do this)."""
    from onnx import AttributeProto

    count = 0
    for node in walk_nodes(graph):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        for attribute in node.attribute:
            if attribute.name == "value" and attribute.type == AttributeProto.TENSOR:
                if attribute.t.data_type in _WEIGHT_TYPES:
                    count += int(np.prod(attribute.t.dims, dtype=np.int64))
            elif attribute.name == "value_floats":
                count += len(attribute.floats)
    return count


def summarize(path: str | os.PathLike[str]) -> ModelSummary:
    """Describe an ONNX file without running it (external data is not read)."""
    model_path = check_model_path(path)
    model = load_onnx(model_path, load_external_data=False)
    inputs, outputs = graph_io(model)
    histogram: collections.Counter[str] = collections.Counter()
    node_count = 0
    for node in walk_nodes(model.graph):
        node_count += 1
        histogram[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    parameters = sum(int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer)
    parameters += constant_parameters(model.graph)
    external_files = set()
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                external_files.add(model_path.parent / entry.value)
    external_bytes = sum(f.stat().st_size for f in external_files if f.exists())
    return ModelSummary(
        path=str(model_path),
        size_bytes=model_path.stat().st_size,
        external_data_bytes=external_bytes,
        ir_version=int(model.ir_version),
        opsets={(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import},
        producer=" ".join(p for p in (model.producer_name, model.producer_version) if p),
        graph_name=model.graph.name,
        inputs=inputs,
        outputs=outputs,
        node_count=node_count,
        op_histogram=dict(histogram.most_common()),
        parameter_count=parameters,
        precision=model_precision(model),
        metadata=metadata_of(model, model_path.name),
    )


@dataclass(frozen=True, eq=False)
class Model:
    """A model file, read once: what bench, verify, vision, quantize and the backends need from it.

    Make one with ``Model.open(path)`` (or ``as_model(model_or_path)`` at a function's boundary) and
    pass it down instead of the path; nothing below re-reads the file for its interface.

    Attributes:
        path: the file.
        format: ``.onnx`` for a file ``onnx`` parsed, else the suffix of a backend's own format (``.cfg``).
        sha256: the SHA-256 of the bytes that were parsed (a run that must time this very file
            compares it with the file's hash at the end).
        inputs: the graph's real inputs (initializers excluded), in graph order.
        outputs: the graph's outputs, in graph order.
        precision: the type most weights use (``f32``, ``f16``, ``int8`` ...; see ``model_precision``).
        metadata_props: ``metadata_props`` as stored (key → text).
        proto: the parsed ``onnx.ModelProto`` without external data (None for a native format); read
            it, do not change it: every holder of this ``Model`` shares it.
    """

    path: Path
    format: str
    sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    precision: str
    metadata_props: Mapping[str, str] = field(default_factory=dict)
    proto: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Model:
        """Read an ONNX file once (external data is not read): its bytes are hashed and parsed.

        Raises:
            ModelNotFoundError: the path does not exist or is a directory.
            InvalidModelError: not a valid ONNX file, an opset newer than the installed onnx knows,
                or a graph that lists an input or output twice.
        """
        model_path = check_model_path(path)
        data = model_path.read_bytes()
        proto = parse_onnx(data, model_path)
        check_opset(proto, model_path)
        inputs, outputs = graph_io(proto)
        return cls(
            path=model_path,
            format=".onnx",  # what was parsed, whatever the file's name ends with
            sha256=hashlib.sha256(data).hexdigest(),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            precision=model_precision(proto),
            metadata_props=metadata_of(proto, model_path.name),
            proto=proto,
        )

    @classmethod
    def written(cls, proto: Any, path: str | os.PathLike[str]) -> Model:
        """Save ``proto`` to ``path`` and return its ``Model``, without parsing the file back: what a
        tool that edits a model it read (``quantize``'s float copy) passes down instead of the path.
        ``proto`` becomes the Model's: do not change it afterwards."""
        model_path = Path(path)
        data = proto.SerializeToString()
        model_path.write_bytes(data)
        inputs, outputs = graph_io(proto)
        return cls(
            path=model_path,
            format=".onnx",
            sha256=hashlib.sha256(data).hexdigest(),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            precision=model_precision(proto),
            metadata_props=metadata_of(proto, model_path.name),
            proto=proto,
        )

    @classmethod
    def native(
        cls,
        path: Path,
        inputs: tuple[TensorSpec, ...] = (),
        outputs: tuple[TensorSpec, ...] = (),
        precision: str = "f32",
        metadata_props: Mapping[str, str] | None = None,
    ) -> Model:
        """A file in a backend's own format (a Darknet ``.cfg``, an ncnn ``.param``), which ``onnx``
        cannot read: its path, format and hash, and the interface the backend found (or none, when
        only its runtime can say it). ``sha256`` is empty when the file cannot be read: its runtime
        then says why, in its own words."""
        from deploykit.io import file_sha256

        sha256 = file_sha256(path) if path.is_file() else ""
        return cls(
            path, path.suffix.lower(), sha256, tuple(inputs), tuple(outputs), precision, dict(metadata_props or {})
        )

    @cached_property
    def metadata(self) -> ModelMetadata:
        """The typed metadata (task, input and pre-processing, labels, recipe, weights, quantize record),
        checked when first asked for.

        Raises:
            MetadataError: a ``deploykit.*`` key holds a value of the wrong type or an impossible one.
        """
        from deploykit.metadata import read_metadata

        return read_metadata(self.metadata_props, self.path.name)

    @property
    def name(self) -> str:
        """The file's name, as messages show it."""
        return self.path.name

    def input_specs(self) -> dict[str, TensorSpec]:
        """Input name → spec, in graph order."""
        return {spec.name: spec for spec in self.inputs}

    def output_specs(self) -> dict[str, TensorSpec]:
        """Output name → spec, in graph order."""
        return {spec.name: spec for spec in self.outputs}


def parse_onnx(data: bytes, model_path: Path) -> Any:
    """``data`` (a file's bytes) parsed as an ONNX model, checked to be one (not by ``onnx.checker``).

    Raises:
        InvalidModelError: as ``load_onnx``.
    """
    import onnx

    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:
        raise _unparsable(model_path, exc) from exc
    _check_is_onnx(model, model_path)
    return model


def as_model(model: Model | str | os.PathLike[str]) -> Model:
    """``model`` itself when it is a ``Model``, else ``Model.open(model)``: what a function that takes
    a model calls once at its boundary."""
    return model if isinstance(model, Model) else Model.open(model)


def path_of(model: Model | str | os.PathLike[str]) -> Path:
    """The file of a ``Model`` or a path, without reading it (what a worker process is sent)."""
    return model.path if isinstance(model, Model) else Path(model)


def read_interface(model: Model | str | os.PathLike[str]) -> Model:
    """The ``Model`` of a path (read once) or the ``Model`` given; the name older callers use for ``as_model``.

    Raises:
        ModelNotFoundError, InvalidModelError: as ``Model.open``.
    """
    return as_model(model)
