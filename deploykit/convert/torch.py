"""PyTorch → ONNX behind a verification gate: a conversion whose outputs differ from PyTorch's fails.

Flow: the PyTorch side (``torch_stage``: load the source, run PyTorch on the example inputs, export
with the dynamo or TorchScript exporter — ``auto`` falls back from one to the other and says so —,
check, infer shapes, optionally simplify, stamp metadata) → run the ONNX on the verify backends →
rename into place only when the verification passes. A source named by a path runs its PyTorch side
in a worker process with a time limit: the user's code can hang or crash only that worker.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.convert.report import ConversionReport
from deploykit.convert.specs import InputSpec
from deploykit.convert.torch_export import output_moves
from deploykit.convert.torch_stage import PyTorchStage, TorchExportSettings, pytorch_stage, spec_dict
from deploykit.deprecation import MovedKeywords, fold_keywords
from deploykit.errors import ConversionError, ParityError
from deploykit.io import check_onnx_output, check_outputs, commit_outputs, output_scope, scratch_dir
from deploykit.model import summarize
from deploykit.validation import check_number, check_seed, check_tolerances
from deploykit.verify import OracleInfo, gate
from deploykit.verify.check import platform_notes
from deploykit.verify.settings import VerifySettings
from deploykit.verify.verdict import weak_evidence
from deploykit.workers import read_arrays, rebuild_error, run_worker, write_arrays

if TYPE_CHECKING:  # torch is imported only when a conversion runs
    import torch

EXPORTERS = ("auto", "dynamo", "torchscript")


@output_scope()  # the outputs it checks stay this run's until it returns
def convert_torch(
    model: torch.nn.Module | str | os.PathLike[str],
    example_inputs: Sequence[torch.Tensor | np.ndarray] | None = None,
    output: str | os.PathLike[str] = "model.onnx",
    export: TorchExportSettings | None = None,
    checks: VerifySettings | None = None,
    *,
    inputs: Sequence[InputSpec | str] | None = None,
    verify_backends: Sequence[str] = (DEFAULT_BACKEND,),
    keep_on_mismatch: bool = False,
    report_path: str | os.PathLike[str] | None = None,
    **legacy: object,
) -> ConversionReport:
    """Export a PyTorch model to ONNX and prove it computes what PyTorch computes.

    Args:
        model: an ``nn.Module``, ``file.py:factory``, ``package.module:factory``, a
            TorchScript archive, or a pickled module (with ``trust_pickle=True``).
        example_inputs: tensors/arrays in ``forward`` order; or give ``inputs`` specs.
        output: the ``.onnx`` path; written only when the verification against PyTorch passes.
        export: how to export (``TorchExportSettings``): ``input_names``, ``output_names``,
            ``dynamic`` (input name → {axis: label}, e.g. ``{"images": {0: "batch"}}``), ``opset``
            (17), ``exporter`` (``dynamo``, ``torchscript`` or ``auto``: TorchScript first below
            opset 18, dynamo first from 18; the other on failure), ``simplify`` (onnxslim; the gate
            then checks the simplified model), ``trust_pickle`` (allow a pickled whole-module file),
            ``seed`` (random example inputs), ``weights`` (a state_dict to load into the factory's model),
            ``weights_key`` (the checkpoint key holding the
            state_dict; default found among ``state_dict``, ``model_state``, ``model``, ``ema`` ...)
            and ``ignore_keys`` (a regular expression of state_dict keys to drop, listed in the notes).
        checks: how the result is verified (``VerifySettings``): ``thresholds`` (atol/rtol; default
            by precision, f32: 1e-4 / 1e-3), ``timeout_s`` (the PyTorch side of a source named by a
            path, in its own worker, and each backend's worker) and ``platforms`` (``host``,
            ``linux/arm64`` under emulation, or several; PyTorch, the oracle, runs on the host).
            The precision is the one the source computes in.
        inputs: specs (``InputSpec`` or ``"name:1x3x224x224[:dtype]"``) instead of examples.
        verify_backends: backends that must reproduce PyTorch's outputs.
        keep_on_mismatch: write the file even when the verification fails (the error is still raised).
        report_path: also write the report as JSON here, with the model: both or neither (a failed
            check writes neither unless ``keep_on_mismatch``; the error carries the report).
        **legacy: the keywords of 0.1 (``weights``, ``input_names``, ``output_names``, ``dynamic``, ``opset``,
            ``exporter``, ``simplify``, ``trust_pickle``, ``seed``, ``weights_key``, ``ignore_keys``,
            ``atol``, ``rtol``): still taken in this release, with a ``DeprecationWarning`` naming
            ``export=TorchExportSettings(...)`` or ``checks=VerifySettings(...)``.

    Example:
        ``convert_torch(net, (x,), "net.onnx", TorchExportSettings(dynamic={"x": {0: "batch"}}))``

    Returns:
        the ``ConversionReport``.

    Raises:
        ConversionError: the source, the export or the checks failed; nothing is written.
        ParityError: an output differs from PyTorch's beyond tolerance.
    """
    export, checks = _with_legacy_keywords(export or TorchExportSettings(), checks or VerifySettings(), legacy)
    exporter, opset, seed, simplify = export.exporter, export.opset, export.seed, export.simplify
    atol, rtol, timeout_s, platforms = (
        checks.thresholds.atol,
        checks.thresholds.rtol,
        checks.timeout_s,
        checks.platforms,
    )
    weights = export.weights
    if exporter not in EXPORTERS:
        raise ConversionError(
            f"exporter '{exporter}' | is not one of {', '.join(EXPORTERS)}.",
            hint="auto tries the dynamo exporter, then the TorchScript one.",
        )
    output_path = Path(output)
    check_opset(opset)
    check_tolerances(atol=atol, rtol=rtol)
    check_seed(seed)
    check_number("timeout", timeout_s, low=0.0, low_open=True, hint="seconds, e.g. --timeout 900.")
    check_outputs(
        {"output": output_path, "report": report_path},
        inputs={"model": _source_file(model), "weights": weights},
    )
    check_onnx_output(output_path)
    emulation_notes = platform_notes(platforms) if verify_backends else []  # an unprepared target fails here
    settings = replace(  # what travels to the PyTorch side: the specs as dicts, the weights' absolute path
        export,
        inputs=tuple(spec_dict(s) for s in inputs or ()) or export.inputs,
        weights=str(Path(weights).resolve()) if weights is not None else None,
    )

    with scratch_dir(output_path) as scratch:
        scratch = Path(scratch).resolve()
        log_path = _log_path(output_path).resolve()
        if isinstance(model, str | os.PathLike):
            stage = _stage_in_worker(model, example_inputs, settings, scratch, output_path.name, log_path, timeout_s)
        else:  # a module object is the caller's own code, already in this process
            stage = pytorch_stage(model, example_inputs, settings, scratch, output_path.name, log_path)
        gate_start = time.perf_counter()
        oracle = OracleInfo("pytorch", True, f"torch {stage.torch_version}: the source module on the same inputs")
        at_precision = replace(checks, precision=stage.precision)
        verdicts = gate(stage.candidate, stage.cases, stage.references, oracle, verify_backends, at_precision)
        summary = summarize(stage.candidate)
        report = ConversionReport(
            source=stage.description,
            output=str(output_path),
            converter="torch",
            exporter=stage.exporter,
            opset=next((v for d, v in summary.opsets.items() if d == "ai.onnx"), opset),
            export_seconds=round(stage.export_seconds, 3),
            gate_seconds=round(stage.reference_seconds + time.perf_counter() - gate_start, 3),
            file_size_bytes=summary.size_bytes + summary.external_data_bytes,
            parameter_count=summary.parameter_count,
            external_data=stage.external,
            simplified=simplify,
            notes=[*stage.notes, *emulation_notes, *_evidence_notes(verdicts, weights)],
            op_histogram=summary.op_histogram,
            verdicts=verdicts,
            oracle=oracle,
            input_sets=[{k: list(v.shape) for k, v in case.items()} for case in stage.cases],
        )
        report.written = report.passed or keep_on_mismatch
        if report.written:  # all or nothing: a failed verification writes no model and no report
            commit_outputs(
                output_moves(stage.candidate, output_path, stage.external),
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


def _stage_in_worker(
    model: str | os.PathLike[str],
    example_inputs: Sequence[Any] | None,
    settings: TorchExportSettings,
    scratch: Path,
    output_name: str,
    log_path: Path,
    timeout_s: float,
) -> PyTorchStage:
    """The PyTorch side in its own process: the user's code cannot hang, crash or exit the command."""
    examples_path = None
    if example_inputs is not None:
        import torch

        given = (example_inputs,) if isinstance(example_inputs, np.ndarray | torch.Tensor) else example_inputs
        examples_path = scratch / "examples.npz"
        arrays = [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x) for x in given]
        write_arrays(examples_path, {f"example_{i:04d}": a for i, a in enumerate(arrays)})
    target = _absolute_source(str(model))
    job = {
        "model": target,
        "examples": str(examples_path) if examples_path else None,
        "settings": settings.to_dict(),
        "description": str(model),
        "scratch": str(scratch),
        "output_name": output_name,
        "log_path": str(log_path),
        "sys_path": [os.path.abspath(p) if p else os.getcwd() for p in sys.path],
    }
    outcome = run_worker("deploykit.convert.torch_stage", job, timeout_s=timeout_s)
    result = outcome.result
    if result is None or result.get("status") == "exit":
        reason = result["error"] if result else (outcome.error or "the worker gave no result")
        raise ConversionError(
            f"PyTorch model '{model}' | its code ended the conversion: {reason}.",
            hint="run the factory (or load the file) in plain Python to see what it does; a slow model may "
            "need a larger --timeout.",
        )
    if result["status"] == "error":
        raise rebuild_error(result["error_data"], ConversionError)
    fields = dict(result["stage"])
    fields["candidate"] = Path(fields["candidate"])
    count = int(result["count"])
    fields["cases"] = [read_arrays(scratch / f"case-{i}.npz") for i in range(count)]
    fields["references"] = [read_arrays(scratch / f"reference-{i}.npz") for i in range(count)]
    return PyTorchStage(**fields)


def _absolute_source(text: str) -> str:
    """A source as the worker must name it: a file or ``file.py:factory`` made absolute, so a worker (or a
    factory that changes directory) finds the same file; ``package.module:factory`` as given."""
    if Path(text).is_file():
        return str(Path(text).resolve())
    target, colon, factory = text.rpartition(":")
    if colon and target.endswith(".py") and Path(target).is_file():
        return f"{Path(target).resolve()}:{factory}"
    return text


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


def _tuple_or_none(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


# The 0.1 keywords of convert_torch and the settings value each moved into.
_LEGACY = (
    MovedKeywords(
        "export",
        (
            "weights",
            "input_names",
            "output_names",
            "dynamic",
            "opset",
            "exporter",
            "simplify",
            "trust_pickle",
            "seed",
            "weights_key",
            "ignore_keys",
        ),
        convert={"input_names": _tuple_or_none, "output_names": _tuple_or_none, "weights": _text_or_none},
    ),
    MovedKeywords("checks", ("atol", "rtol"), nested="thresholds"),
)


def _with_legacy_keywords(
    export: TorchExportSettings, checks: VerifySettings, legacy: dict[str, object]
) -> tuple[TorchExportSettings, VerifySettings]:
    """``export`` and ``checks`` with 0.1's keywords folded in (warned as deprecated)."""
    folded = fold_keywords("convert_torch", legacy, {"export": export, "checks": checks}, _LEGACY)
    return folded["export"], folded["checks"]


def _evidence_notes(verdicts: list[Any], weights: str | os.PathLike[str] | None) -> list[str]:
    """A note when the gate's pass proved little (outputs too small for atol), saying how to prove more."""
    weak = weak_evidence(verdicts)
    if weak is None:
        return []
    how = "convert with --weights (trained weights)" if weights is None else "check the weights load"
    return [f"{weak}. To prove more: {how}, and compare on real data ('deploykit compare model.onnx --inputs photos/')"]
