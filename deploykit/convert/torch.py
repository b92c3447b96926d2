"""PyTorch → ONNX behind a verification gate: a conversion whose outputs differ from PyTorch's fails.

Flow: load the source → run PyTorch on example inputs → export (dynamo or TorchScript
exporter, ``auto`` falls back from one to the other and says so) → check, infer
shapes, optionally simplify, stamp metadata → run the ONNX on the verify backends →
rename into place only when the verification passes.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.convert.report import ConversionReport
from deploykit.convert.specs import InputSpec, check_dynamic_axis, parse_input_spec
from deploykit.convert.torch_export import (
    PROTOBUF_LIMIT_BYTES,
    export_model,
    finish_model,
    output_moves,
    save_model,
    stamp_model,
)
from deploykit.convert.torch_sources import TorchSource, load_torch_source
from deploykit.errors import ConversionError, ParityError
from deploykit.io import check_onnx_output, check_outputs, commit_outputs, scratch_dir
from deploykit.model import summarize
from deploykit.validation import check_number, check_seed, check_tolerances
from deploykit.verify import OracleInfo, gate
from deploykit.verify.check import platform_notes

if TYPE_CHECKING:  # torch is imported only when a conversion runs
    import torch

EXPORTERS = ("auto", "dynamo", "torchscript")


def convert_torch(
    model: torch.nn.Module | str | os.PathLike[str],
    example_inputs: Sequence[torch.Tensor | np.ndarray] | None = None,
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
    weights_key: str | None = None,
    ignore_keys: str | None = None,
    report_path: str | os.PathLike[str] | None = None,
    platforms: str | Sequence[str] | None = None,
) -> ConversionReport:
    """Export a PyTorch model to ONNX and prove it computes what PyTorch computes.

    Args:
        model: an ``nn.Module``, ``file.py:factory``, ``package.module:factory``, a
            TorchScript archive, or a pickled module (with ``trust_pickle=True``).
        example_inputs: tensors/arrays in ``forward`` order; or give ``inputs`` specs.
        output: the ``.onnx`` path; written only when the verification against PyTorch passes.
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
        keep_on_mismatch: write the file even when the verification fails (the error is still raised).
        weights: a state_dict to load into the factory's model.
        trust_pickle: allow a pickled whole-module file.
        seed: seed for random example inputs.
        weights_key: the checkpoint key holding the state_dict (default: found automatically
            among ``state_dict``, ``model_state``, ``model``, ``net``, ``ema`` ...).
        ignore_keys: regular expression of state_dict keys to drop (listed in the report's notes).
        report_path: also write the report as JSON here, with the model: both or neither (a failed
            check writes neither unless ``keep_on_mismatch``; the error carries the report).
        platforms: where ``verify_backends`` run: ``host`` (default), ``linux/arm64`` (the target's
            builds under emulation, ``deploykit platforms add``) or several (``host,linux/arm64``);
            PyTorch, the oracle, runs on the host.

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
    check_opset(opset)
    check_tolerances(atol=atol, rtol=rtol)
    check_seed(seed)
    check_outputs(
        {"output": output_path, "report": report_path},
        inputs={"model": _source_file(model), "weights": weights},
    )
    check_onnx_output(output_path)
    emulation_notes = platform_notes(platforms) if verify_backends else []  # an unprepared target fails here
    source = load_torch_source(
        model, weights=weights, trust_pickle=trust_pickle, weights_key=weights_key, ignore_keys=ignore_keys
    )
    specs, examples = _examples(source, example_inputs, inputs, input_names, seed)
    dynamic = {k: dict(v) for k, v in (dynamic or {}).items()}
    by_name = {s.name: s for s in specs}
    for name, axes in dynamic.items():
        for axis in axes:
            check_dynamic_axis(name, axis, by_name)

    # the inputs every candidate sees are copied before forward() runs: a forward() that writes into
    # its input tensor must not change what the oracle and the exported graph are judged on
    cases = [dict(zip(by_name, (e.detach().clone().numpy() for e in examples), strict=True))]
    reference_start = time.perf_counter()
    with torch.no_grad():
        reference = _flatten_outputs(_call(source, [e.clone() for e in examples]))
    names: list[str] = list(
        output_names or (["output"] if len(reference) == 1 else [f"output_{i}" for i in range(len(reference))])
    )
    if len(names) != len(reference):
        raise ConversionError(
            f"output names | {len(names)} given ({', '.join(names)}), the model returns {len(reference)} tensors.",
            hint="give one name per returned tensor, in order.",
        )

    if dynamic:
        cases.append(_second_case(specs, dynamic, seed))
    references = [dict(zip(names, reference, strict=True))]
    with torch.no_grad():
        for case in cases[1:]:
            tensors = [torch.from_numpy(case[s.name].copy()) for s in specs]
            references.append(dict(zip(names, _flatten_outputs(_call(source, tensors)), strict=True)))
    reference_seconds = time.perf_counter() - reference_start

    param_bytes = sum(t.numel() * t.element_size() for t in source.module.state_dict().values())
    external = param_bytes >= PROTOBUF_LIMIT_BYTES
    notes: list[str] = [*source.notes, *emulation_notes]
    if external:
        notes.append(f"weights are {param_bytes / 2**30:.2f} GiB, over protobuf's 2 GiB: stored as external data")

    with scratch_dir(output_path) as scratch:
        start = time.perf_counter()
        exported, used = export_model(
            source, examples, specs, names, dynamic, opset, exporter, scratch, notes, log_path=_log_path(output_path)
        )
        model_proto = finish_model(exported, specs, dynamic, opset, notes, simplify)
        stamp_model(model_proto, source, specs, names, dynamic, opset, used, simplify)
        export_seconds = time.perf_counter() - start
        candidate = Path(scratch) / output_path.name
        save_model(model_proto, candidate, external)

        gate_start = time.perf_counter()
        oracle = OracleInfo("pytorch", True, f"torch {torch.__version__}: the source module on the same inputs")
        verdicts = gate(candidate, cases, references, oracle, verify_backends, precision=_precision(specs),
                        atol=atol, rtol=rtol, platforms=platforms)  # fmt: skip
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
            verdicts=verdicts,
            oracle=oracle,
            input_sets=[{k: list(v.shape) for k, v in case.items()} for case in cases],
        )
        report.written = report.passed or keep_on_mismatch
        if report.written:  # all or nothing: a failed verification writes no model and no report
            commit_outputs(
                output_moves(candidate, output_path, external),
                {report_path: json.dumps(report.to_dict(), indent=2, default=str)},
            )
    if not report.passed:
        raise ParityError(
            f"PyTorch → ONNX '{output_path.name}' | verification failed: {report.first_failure()}.",
            hint=report.failure_hint(
                kept=keep_on_mismatch,
                mismatch="Try --exporter torchscript/dynamo, another --opset, or looser --atol/--rtol if the "
                "difference is expected (e.g. fp16).",
            ),
        ).with_report(report)
    return report


# The TorchScript exporter writes opsets from 7; the dynamo exporter from 18 (it down-converts).
MIN_OPSET = 7


def check_opset(opset: int) -> None:
    """Refuse an opset outside what the exporters write and the installed ``onnx`` knows."""
    import onnx

    newest = onnx.defs.onnx_opset_version()
    check_number(
        "--opset",
        opset,
        low=MIN_OPSET,
        high=newest,
        integer=True,
        hint=f"the installed onnx {onnx.__version__} knows opsets up to {newest}; "
        "17 suits most runtimes, 18+ uses the dynamo exporter.",
    )


def _source_file(model: Any) -> Path | None:
    """The file a model source names (``file.py:factory`` or an archive), to keep outputs off it."""
    if not isinstance(model, str | os.PathLike):
        return None
    text = str(model)
    if Path(text).is_file():
        return Path(text)
    target = text.rpartition(":")[0]
    return Path(target) if target.endswith(".py") else None


def _log_path(output: Path) -> Path:
    return output.with_name(f"{output.name}.export.log")


def _check_example_spec(spec: InputSpec) -> None:
    """Random example data must fit in memory and, for integers, in the dtype."""
    from deploykit.inputs import check_allocation

    check_allocation(spec.name, spec.shape, spec.dtype)
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        if not (info.min <= spec.low < spec.high <= int(info.max) + 1):
            raise ConversionError(
                f"input '{spec.name}' | the value range {spec.low}..{spec.high} does not fit {spec.dtype.name} "
                f"({info.min} to {info.max}).",
                hint="give a range inside the dtype, e.g. ids:1x16:int64:0..30000.",
            )


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
        for spec in specs:
            _check_example_spec(spec)
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
