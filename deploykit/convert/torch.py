"""PyTorch → ONNX with a parity gate: a conversion whose outputs differ from PyTorch's fails.

Flow: load the source → run PyTorch on example inputs → export (dynamo or TorchScript
exporter, ``auto`` falls back from one to the other and says so) → check, infer
shapes, optionally simplify, stamp metadata → run the ONNX on the verify backends →
rename into place only when parity holds.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.convert.parity import first_failure, run_gate
from deploykit.convert.report import ConversionReport
from deploykit.convert.specs import InputSpec, check_dynamic_axis, parse_input_spec
from deploykit.convert.torch_sources import TorchSource, load_torch_source
from deploykit.errors import ConversionError, DeployKitError, ParityError
from deploykit.io import check_output_dir
from deploykit.model import summarize

EXPORTERS = ("auto", "dynamo", "torchscript")
DYNAMO_MIN_OPSET = 18
_PROTOBUF_LIMIT_BYTES = 2**31 - 2**24  # leave room for the graph itself under protobuf's 2 GiB


def convert_torch(
    model: Any,
    example_inputs: Sequence[Any] | None = None,
    output: str | os.PathLike[str] = "model.onnx",
    *,
    inputs: Sequence[InputSpec | str] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic: Mapping[str, Mapping[int, str]] | None = None,
    opset: int = 17,
    exporter: str = "auto",
    simplify: bool = False,
    verify_backends: Sequence[str] = ("onnxruntime",),
    atol: float | None = None,
    rtol: float | None = None,
    keep_on_mismatch: bool = False,
    weights: str | Path | None = None,
    trust_pickle: bool = False,
    seed: int = 0,
) -> ConversionReport:
    """Export a PyTorch model to ONNX and prove it computes what PyTorch computes.

    Args:
        model: an ``nn.Module``, ``file.py:factory``, ``package.module:factory``, a
            TorchScript archive, or a pickled module (with ``trust_pickle=True``).
        example_inputs: tensors/arrays in ``forward`` order; or give ``inputs`` specs.
        output: the ``.onnx`` path; written only when the parity gate passes.
        inputs: specs (``InputSpec`` or ``"name:1x3x224x224[:dtype]"``) instead of examples.
        input_names: names for the inputs (default: ``forward``'s parameter names).
        output_names: names for the outputs (default ``output`` or ``output_0``, ``output_1`` ...).
        dynamic: input name → {axis: label}, e.g. ``{"images": {0: "batch"}}``.
        opset: ONNX opset to target.
        exporter: ``dynamo``, ``torchscript`` or ``auto``: TorchScript first below opset 18
            (dynamo only implements 18+), dynamo first from 18; the other on failure.
        simplify: run onnxslim on the result (the gate then checks the simplified model).
        verify_backends: backends that must reproduce PyTorch's outputs.
        atol, rtol: tolerances; default by precision (f32: 1e-4 / 1e-3).
        keep_on_mismatch: write the file even when parity fails (the error is still raised).
        weights: a state_dict to load into the factory's model.
        trust_pickle: allow a pickled whole-module file.
        seed: seed for random example inputs.

    Returns:
        the ``ConversionReport``.

    Raises:
        ConversionError: the source, the export or the checks failed; nothing is written.
        ParityError: an output differs from PyTorch's beyond tolerance.
    """
    import torch

    if exporter not in EXPORTERS:
        raise ConversionError(
            f"exporter '{exporter}' | is not one of {', '.join(EXPORTERS)}.",
            hint="auto tries the dynamo exporter, then the TorchScript one.",
        )
    output_path = Path(output)
    check_output_dir(output_path)
    source = load_torch_source(model, weights=weights, trust_pickle=trust_pickle)
    specs, examples = _examples(source, example_inputs, inputs, input_names, seed)
    dynamic = {k: dict(v) for k, v in (dynamic or {}).items()}
    by_name = {s.name: s for s in specs}
    for name, axes in dynamic.items():
        for axis in axes:
            check_dynamic_axis(name, axis, by_name)

    reference_start = time.perf_counter()
    with torch.no_grad():
        reference = _flatten_outputs(_call(source, examples))
    names: list[str] = list(
        output_names or (["output"] if len(reference) == 1 else [f"output_{i}" for i in range(len(reference))])
    )
    if len(names) != len(reference):
        raise ConversionError(
            f"output names | {len(names)} given ({', '.join(names)}), the model returns {len(reference)} tensors.",
            hint="give one name per returned tensor, in order.",
        )

    cases = [dict(zip(by_name, (e.numpy() for e in examples), strict=True))]
    if dynamic:
        cases.append(_second_case(specs, dynamic, seed))
    references = [dict(zip(names, reference, strict=True))]
    with torch.no_grad():
        for case in cases[1:]:
            tensors = [torch.from_numpy(case[s.name]) for s in specs]
            references.append(dict(zip(names, _flatten_outputs(_call(source, tensors)), strict=True)))
    reference_seconds = time.perf_counter() - reference_start

    param_bytes = sum(t.numel() * t.element_size() for t in source.module.state_dict().values())
    external = param_bytes >= _PROTOBUF_LIMIT_BYTES
    notes: list[str] = []
    if external:
        notes.append(f"weights are {param_bytes / 2**30:.2f} GiB, over protobuf's 2 GiB: stored as external data")

    with tempfile.TemporaryDirectory(prefix=".deploykit-", dir=output_path.resolve().parent) as scratch:
        start = time.perf_counter()
        exported, used = _export(source, examples, specs, names, dynamic, opset, exporter, Path(scratch), notes)
        model_proto = _finish(exported, specs, dynamic, opset, notes, simplify)
        _stamp(model_proto, source, specs, names, dynamic, opset, used, simplify)
        export_seconds = time.perf_counter() - start
        candidate = Path(scratch) / output_path.name
        _save(model_proto, candidate, external)

        gate_start = time.perf_counter()
        parity = run_gate(
            candidate, cases, references, verify_backends, atol=atol, rtol=rtol, precision=_precision(specs)
        )
        summary = summarize(candidate)
        report = ConversionReport(
            source=source.description,
            output=str(output_path),
            converter="torch",
            exporter=used,
            opset=next((v for d, v in summary.opsets.items() if d == "ai.onnx"), opset),
            export_seconds=round(export_seconds, 3),
            gate_seconds=round(reference_seconds + time.perf_counter() - gate_start, 3),
            file_size_bytes=summary.size_bytes + summary.external_data_bytes,
            parameter_count=summary.parameter_count,
            external_data=external,
            simplified=simplify,
            notes=notes,
            op_histogram=summary.op_histogram,
            parity=parity,
        )
        if report.passed or keep_on_mismatch:
            _move_into_place(candidate, output_path, external)
            report.written = True
    if not report.passed:
        raise ParityError(
            f"PyTorch → ONNX '{output_path.name}' | outputs differ {first_failure(parity)}.",
            hint=("the file was kept because of --keep-on-mismatch. " if keep_on_mismatch else "nothing was written. ")
            + "Try --exporter torchscript/dynamo, another --opset, or looser --atol/--rtol if the "
            "difference is expected (e.g. fp16).",
        ).with_report(report)
    return report


def _precision(specs: Sequence[InputSpec]) -> str:
    return "f16" if any(s.dtype == np.float16 for s in specs) else "f32"


def _forward_parameters(module: Any) -> tuple[list[str], int, int | None]:
    """forward's positional parameter names, how many are required, and the maximum (None: *args)."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return [], 0, None
    names: list[str] = []
    required = maximum = 0
    for parameter in signature.parameters.values():
        if parameter.kind == parameter.VAR_POSITIONAL:
            return names, required, None
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
            maximum += 1
            required += parameter.default is parameter.empty
    return names, required, maximum


def _examples(
    source: TorchSource,
    example_inputs: Sequence[Any] | None,
    inputs: Sequence[InputSpec | str] | None,
    input_names: Sequence[str] | None,
    seed: int,
) -> tuple[list[InputSpec], list[Any]]:
    import torch

    forward_names, required, maximum = _forward_parameters(source.module)
    if example_inputs is not None and inputs:
        raise ConversionError(
            "inputs | both example_inputs and input specs were given.",
            hint="give either example tensors or NAME:SHAPE specs.",
        )
    if example_inputs is None and not inputs:
        raise ConversionError(
            "inputs | no example inputs or input specs were given.",
            hint="pass --input NAME:SHAPE[:DTYPE] for each forward() argument, e.g. --input images:1x3x224x224.",
        )
    if example_inputs is not None:
        if isinstance(example_inputs, (torch.Tensor, np.ndarray)):
            example_inputs = (example_inputs,)
        tensors = [torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x for x in example_inputs]
        count = len(tensors)
        names = list(input_names or forward_names[:count] or [f"input_{i}" for i in range(count)])
        if len(names) < count:
            names += [f"input_{i}" for i in range(len(names), count)]
        specs = [
            InputSpec(n, tuple(t.shape), np.dtype(str(t.dtype).removeprefix("torch.")))
            for n, t in zip(names, tensors, strict=True)
        ]
    else:
        specs = [parse_input_spec(s) if isinstance(s, str) else s for s in inputs or ()]
        if input_names:
            raise ConversionError(
                "inputs | input_names given alongside named specs.",
                hint="specs already carry names (NAME:SHAPE); drop input_names.",
            )
        rng = np.random.default_rng(seed)
        tensors = [torch.from_numpy(s.example(rng)) for s in specs]
    count = len(specs)
    if count < required or (maximum is not None and count > maximum):
        expected = (
            f"{required}" if maximum == required else f"{required} to {maximum if maximum is not None else 'any'}"
        )
        raise ConversionError(
            f"inputs | {count} given ({', '.join(s.name for s in specs)}), but "
            f"{type(source.module).__name__}.forward takes {expected} "
            f"({', '.join(forward_names) or 'unknown names'}).",
            hint="give one --input per forward() argument, in order.",
        )
    if len({s.name for s in specs}) != count:
        raise ConversionError(
            f"inputs | names repeat: {', '.join(s.name for s in specs)}.",
            hint="give every input its own name.",
        )
    return specs, tensors


def _call(source: TorchSource, tensors: Sequence[Any]) -> Any:
    try:
        return source.module(*tensors)
    except Exception as exc:
        raise ConversionError(
            f"PyTorch model '{source.description}' | forward() failed on the example inputs: "
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}",
            hint="check the input shapes and dtypes (--input NAME:SHAPE:DTYPE) against what forward() expects.",
        ) from exc


def _flatten_outputs(value: Any) -> list[np.ndarray]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, Mapping):
        return [a for v in value.values() for a in _flatten_outputs(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten_outputs(v)]
    raise ConversionError(
        f"PyTorch model outputs | a {type(value).__name__} is not a tensor.",
        hint="forward() must return tensors (or tuples/lists/dicts of tensors) to export to ONNX.",
    )


def _second_case(
    specs: Sequence[InputSpec], dynamic: Mapping[str, Mapping[int, str]], seed: int
) -> dict[str, np.ndarray]:
    """Inputs whose dynamic axes have other sizes than the examples: label → doubled size."""
    sizes: dict[str, int] = {}
    for spec in specs:
        for axis, label in dynamic.get(spec.name, {}).items():
            sizes.setdefault(label, spec.shape[axis] * 2)
    rng = np.random.default_rng(seed + 1)
    case = {}
    for spec in specs:
        shape = [
            sizes[dynamic[spec.name][a]] if a in dynamic.get(spec.name, {}) else d for a, d in enumerate(spec.shape)
        ]
        case[spec.name] = spec.example(rng, shape)
    return case


@contextlib.contextmanager
def _quiet() -> Any:
    """The exporters print progress and warn loudly; keep what they say for error messages."""
    buffer = io.StringIO()
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(buffer),
            contextlib.redirect_stderr(buffer),
        ):
            warnings.simplefilter("ignore")
            yield buffer
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _export(
    source: TorchSource,
    examples: Sequence[Any],
    specs: Sequence[InputSpec],
    names: Sequence[str],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    exporter: str,
    scratch: Path,
    notes: list[str],
) -> tuple[Any, str]:
    order = [exporter]
    if exporter == "auto":
        # The dynamo exporter implements opset 18+ and down-converts unreliably, so below 18
        # the TorchScript exporter is the one that honours the asked-for opset.
        order = ["torchscript", "dynamo"] if opset < DYNAMO_MIN_OPSET else ["dynamo", "torchscript"]
    if source.kind == "torchscript" and exporter == "auto":
        order = ["torchscript"]
        notes.append("TorchScript archives go through the TorchScript exporter (torch.export cannot read them)")
    failures: list[str] = []
    for index, kind in enumerate(order):
        try:
            path = scratch / f"export-{kind}.onnx"
            if kind == "dynamo":
                _export_dynamo(source.module, examples, specs, names, dynamic, opset, path)
            else:
                _export_torchscript(source.module, examples, specs, names, dynamic, opset, path)
            import onnx

            model = onnx.load(str(path), load_external_data=True)
            if index:
                notes.append(f"exporter {order[0]} failed ({failures[0]}); used {kind}")
            return model, kind
        except DeployKitError:
            raise
        except Exception as exc:
            text = str(exc).strip()
            failures.append(f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:400])
    raise ConversionError(
        "PyTorch → ONNX | "
        + "; ".join(f"the {k} exporter failed: {f}" for k, f in zip(order, failures, strict=False))
        + ".",
        hint="an op may have no ONNX equivalent at this opset: try another --opset or --exporter, "
        "or rewrite that part of forward().",
    )


def _export_torchscript(
    module: Any,
    examples: Sequence[Any],
    specs: Sequence[InputSpec],
    names: Sequence[str],
    dynamic: Mapping[str, Mapping[int, str]],
    opset: int,
    path: Path,
) -> None:
    import torch

    with _quiet():
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
    with _quiet():
        torch.onnx.export(
            module,
            tuple(tensors),
            str(path),
            dynamo=True,
            input_names=[s.name for s in specs],
            output_names=list(names),
            dynamic_shapes=tuple(shapes) if dynamic else None,
            opset_version=opset,
            external_data=False,
            optimize=True,
            verbose=False,
        )


def _identifier(label: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in label)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"d_{cleaned}"


def _finish(
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
        if model.ByteSize() < _PROTOBUF_LIMIT_BYTES:
            onnx.checker.check_model(model)
            model = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:
        raise ConversionError(
            f"exported graph | fails the ONNX checker: {str(exc).strip().splitlines()[0]}",
            hint="try the other --exporter or another --opset.",
        ) from exc
    return model


def _stamp(
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

    from deploykit import __version__

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


def _save(model: Any, path: Path, external: bool) -> None:
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


def _move_into_place(candidate: Path, output: Path, external: bool) -> None:
    if external:
        os.replace(candidate.with_name(f"{candidate.name}.data"), output.with_name(f"{output.name}.data"))
    os.replace(candidate, output)
