"""The exporting half of PyTorch → ONNX: run torch's dynamo or TorchScript exporter quietly,
then check the graph, name its dynamic axes, simplify, stamp metadata and save it.

``deploykit.convert.torch`` decides what to export and judges the result; this module only
produces the ONNX model.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.convert.specs import InputSpec
from deploykit.convert.torch_sources import TorchSource
from deploykit.errors import ConversionError, DeployKitError
from deploykit.io import FULL_ERRNOS, atomic_path

DYNAMO_MIN_OPSET = 18
PROTOBUF_LIMIT_BYTES = 2**31 - 2**24  # leave room for the graph itself under protobuf's 2 GiB


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """Text without terminal colour codes (torch.export colours its summaries)."""
    return _ANSI.sub("", text)


@contextlib.contextmanager
def _redirect_descriptors(sink: Any) -> Any:
    """Send the process's own stdout/stderr (C++ code prints there, past sys.stdout) to ``sink``."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in saved:
            os.close(descriptor)


@contextlib.contextmanager
def _quiet(log: list[str] | None = None) -> Any:
    """The exporters print progress and warn loudly, from Python and from C++: keep all of it off
    the console, and append it (without colour codes) to ``log`` for ``<output>.export.log``."""
    buffer = io.StringIO()
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [logger.level for logger in loggers]
    with tempfile.TemporaryFile(mode="w+b") as native:
        try:
            for logger in loggers:
                logger.setLevel(logging.ERROR)
            with (
                warnings.catch_warnings(),
                _redirect_descriptors(native),
                contextlib.redirect_stdout(buffer),
                contextlib.redirect_stderr(buffer),
            ):
                warnings.simplefilter("ignore")
                yield buffer
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)
            native.seek(0)
            captured = buffer.getvalue() + native.read().decode("utf-8", "replace")
            if log is not None and captured.strip():
                log.append(strip_ansi(captured))


def export_model(
    source: TorchSource,
    examples: Sequence[Any],
    specs: Sequence[InputSpec],
    names: Sequence[str],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    exporter: str,
    scratch: Path,
    notes: list[str],
    *,
    log_path: Path | None = None,
) -> tuple[Any, str]:
    """Export with the asked-for exporter (``auto``: one, then the other), quietly.

    When every exporter fails, what they printed is written to ``log_path`` and the error names it.
    """
    order = [exporter]
    if exporter == "auto":
        # The dynamo exporter implements opset 18+ and down-converts unreliably, so below 18
        # the TorchScript exporter is the one that honours the asked-for opset.
        order = ["torchscript", "dynamo"] if opset < DYNAMO_MIN_OPSET else ["dynamo", "torchscript"]
    if source.kind == "torchscript" and exporter == "auto":
        order = ["torchscript"]
        notes.append("TorchScript archives go through the TorchScript exporter (torch.export cannot read them)")
    failures: list[str] = []
    log: list[str] = []
    for index, kind in enumerate(order):
        try:
            path = scratch / f"export-{kind}.onnx"
            if kind == "dynamo":
                _export_dynamo(source.module, examples, specs, names, dynamic, opset, path, log)
            else:
                _export_torchscript(source.module, examples, specs, names, dynamic, opset, path, log)
            import onnx

            model = onnx.load(str(path), load_external_data=True)
            if kind == "dynamo":
                name_outputs(model, names, notes)
                check_exported(model)
            if index:
                notes.append(f"exporter {order[0]} failed ({failures[0]}); used {kind}")
            return model, kind
        except DeployKitError as exc:
            if len(order) == 1 or not isinstance(exc, ConversionError):
                raise
            failures.append(exc.message)
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
                raise  # out of room is no exporter's failure: scratch_dir names the output
            text = strip_ansi(str(exc)).strip()
            failures.append(f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:400])
            log.append(f"--- {kind} exporter: {type(exc).__name__}\n{strip_ansi(str(exc))}\n")
    where = ""
    if log_path is not None and log:
        with contextlib.suppress(DeployKitError, OSError), atomic_path(log_path) as temporary:
            temporary.write_text("\n".join(log))
            where = f" The exporters' full output is in {log_path}."
    raise ConversionError(
        "PyTorch → ONNX | "
        + "; ".join(f"the {k} exporter failed: {f}" for k, f in zip(order, failures, strict=False))
        + ".",
        hint="an op may have no ONNX equivalent at this opset: try another --opset or --exporter, "
        "or rewrite that part of forward()." + where,
    )


def check_exported(model: Any) -> None:
    """The ONNX checker on a fresh export, so ``auto`` can still fall back to the other exporter."""
    import onnx

    if model.ByteSize() >= PROTOBUF_LIMIT_BYTES:
        return
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ConversionError(
            f"exported graph | fails the ONNX checker: {str(exc).strip().splitlines()[0]}",
            hint="try the other --exporter or another --opset.",
        ) from exc


def _graph_value_names(graph: Any) -> set[str]:
    from onnx import AttributeProto

    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                names |= _graph_value_names(attribute.g)
            elif attribute.type == AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    names |= _graph_value_names(subgraph)
    return names


def _rename_value(graph: Any, old: str, new: str) -> None:
    """Rename a value everywhere it appears, subgraphs included."""
    from onnx import AttributeProto

    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.name == old:
            value.name = new
    for tensor in graph.initializer:
        if tensor.name == old:
            tensor.name = new
    for node in graph.node:
        for field_values in (node.input, node.output):
            for i, name in enumerate(field_values):
                if name == old:
                    field_values[i] = new
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                _rename_value(attribute.g, old, new)
            elif attribute.type == AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    _rename_value(subgraph, old, new)


def name_outputs(model: Any, names: Sequence[str], notes: list[str]) -> None:
    """Give the graph outputs the asked-for names; an internal value already called that is
    renamed first (the dynamo exporter names values after modules, e.g. ``embedding``)."""
    graph = model.graph
    for output, wanted in zip(list(graph.output), names, strict=False):
        if output.name == wanted:
            continue
        current = output.name
        if wanted in _graph_value_names(graph):
            taken = _graph_value_names(graph)
            replacement = next(
                f"{wanted}_internal_{i}" for i in range(len(taken) + 1) if f"{wanted}_internal_{i}" not in taken
            )
            _rename_value(graph, wanted, replacement)
            notes.append(f"output name '{wanted}' was an internal value of the export: renamed it '{replacement}'")
        _rename_value(graph, current, wanted)


def _export_torchscript(
    module: Any,
    examples: Sequence[Any],
    specs: Sequence[InputSpec],
    names: Sequence[str],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    path: Path,
    log: list[str] | None = None,
) -> None:
    import torch

    with _quiet(log):
        torch.onnx.export(
            module,
            tuple(examples),
            str(path),
            dynamo=False,
            input_names=[s.name for s in specs],
            output_names=list(names),
            dynamic_axes={k: dict(v) for k, v in dynamic.items()} or None,
            opset_version=opset,
            do_constant_folding=True,
        )


def _export_dynamo(
    module: Any,
    examples: Sequence[Any],
    specs: Sequence[InputSpec],
    names: Sequence[str],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    path: Path,
    log: list[str] | None = None,
) -> None:
    import torch

    dims: dict[str, Any] = {}
    shapes = []
    tensors = []
    rng = np.random.default_rng(0)
    for spec, example in zip(specs, examples, strict=True):
        axes = dynamic.get(spec.name, {})
        shapes.append(
            {a: dims.setdefault(label, torch.export.Dim(_identifier(label))) for a, label in axes.items()} or None
        )
        if any(example.shape[a] == 1 for a in axes):
            # torch.export specialises size-1 dims to constants: trace with 2 where the axis is dynamic
            widened = [2 if a in axes and d == 1 else d for a, d in enumerate(example.shape)]
            example = torch.from_numpy(spec.example(rng, widened))
        tensors.append(example)
    # Outputs are named afterwards (name_outputs): the exporter may already use a name internally.
    with _quiet(log):
        torch.onnx.export(
            module,
            tuple(tensors),
            str(path),
            dynamo=True,
            input_names=[s.name for s in specs],
            dynamic_shapes=tuple(shapes) if dynamic else None,
            opset_version=opset,
            external_data=False,
            optimize=True,
            verbose=False,
        )


def _identifier(label: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in label)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"d_{cleaned}"


def finish_model(
    model: Any,
    specs: Sequence[InputSpec],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    notes: list[str],
    simplify: bool,
) -> Any:
    """Check the export, name dynamic dims as asked, infer shapes, simplify if asked."""
    import onnx

    renames: dict[str, str] = {}
    graph_inputs = {i.name: i for i in model.graph.input}
    for spec in specs:
        value = graph_inputs.get(spec.name)
        if value is None:
            raise ConversionError(
                f"exported graph | has no input '{spec.name}' (it has {', '.join(graph_inputs) or 'none'}).",
                hint="an input that forward() never uses is dropped by the exporter; remove it from --input.",
            )
        dims = value.type.tensor_type.shape.dim
        for axis, label in dynamic.get(spec.name, {}).items():
            dim = dims[axis]
            if dim.HasField("dim_value"):
                raise ConversionError(
                    f"exported graph | axis {axis} of '{spec.name}' is fixed to {dim.dim_value}, "
                    f"not dynamic '{label}'.",
                    hint="forward() makes that size a constant (e.g. a reshape with a literal size); "
                    "rewrite it with x.shape[...] or try the other --exporter.",
                )
            if dim.dim_param and dim.dim_param != label:
                renames[dim.dim_param] = label
            dim.dim_param = label
    for value in list(model.graph.output) + list(model.graph.input):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in renames:
                dim.dim_param = renames[dim.dim_param]
    got_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), opset)
    if got_opset != opset:
        notes.append(f"asked for opset {opset}, the exporter wrote opset {got_opset}")
    if simplify:
        try:
            import onnxslim
        except ImportError as exc:
            raise ConversionError(
                "simplify | onnxslim is not installed.", hint="pip install onnxslim, or drop --simplify."
            ) from exc
        with _quiet():
            model = onnxslim.slim(model)
    try:
        if model.ByteSize() < PROTOBUF_LIMIT_BYTES:
            onnx.checker.check_model(model)
            model = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:
        raise ConversionError(
            f"exported graph | fails the ONNX checker: {str(exc).strip().splitlines()[0]}",
            hint="try the other --exporter or another --opset.",
        ) from exc
    return model


def stamp_model(
    model: Any,
    source: TorchSource,
    specs: Sequence[InputSpec],
    names: Sequence[str],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    exporter: str,
    simplify: bool,
) -> None:
    import torch

    from deploykit._version import __version__

    model.producer_name = "deploykit"
    model.producer_version = __version__
    entries = {
        "deploykit.version": __version__,
        "deploykit.converter": f"torch {torch.__version__} ({exporter} exporter)",
        "deploykit.source": source.description,
        "deploykit.source_sha256": source.sha256(),
        "deploykit.export_options": json.dumps(
            {
                "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype.name} for s in specs],
                "outputs": list(names),
                "dynamic": {k: {str(a): v for a, v in axes.items()} for k, axes in dynamic.items()},
                "opset": opset,
                "exporter": exporter,
                "simplify": simplify,
            },
            sort_keys=True,
        ),
    }
    kept = [p for p in model.metadata_props if p.key not in entries]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in entries.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def save_model(model: Any, path: Path, external: bool) -> None:
    import onnx

    if external:
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=f"{path.name}.data",
        )
    else:
        onnx.save_model(model, str(path))


def output_moves(candidate: Path, output: Path, external: bool) -> list[tuple[Path, Path]]:
    """The renames that put a finished export in place (its external data file first)."""
    moves = (
        [(candidate.with_name(f"{candidate.name}.data"), output.with_name(f"{output.name}.data"))] if external else []
    )
    return [*moves, (candidate, output)]
