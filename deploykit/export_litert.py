"""ONNX → LiteRT ``.tflite``, for apps that ship the LiteRT interpreter without deploykit: ``export_litert``.

The export is the very conversion the ``litert`` backend runs (onnx2tf in the converter environment,
through its cache), copied out with a ``.json`` beside it (the ONNX names, the NHWC ↔ NCHW
permutation of each port, the model's metadata) and verified as written: the exported file runs on
LiteRT against the independent oracle (onnx's reference evaluator) before anything reaches the output
paths: element-wise with f32 weights; by cosine/SNR, and by the task metric on images, with f16 or
dynamic-range INT8 weights. A file that does not pass is not written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from deploykit.io import file_and_json, output_scope
from deploykit.verify.verdict import OracleInfo, Verdict

WEIGHT_PRECISIONS = {"f32": "f32", "f16": "f16", "int8": "int8"}


@dataclass
class LiteRtExport:
    """What ``export_litert`` wrote and how it was checked.

    Attributes:
        tflite, io: the written files (the ``.json`` maps ONNX names and layouts to the signature's).
        weights: ``f32``, ``f16`` or ``int8`` (dynamic range).
        oracle: who computed the reference outputs.
        verdicts: the exported file's verdict(s) against it.
        names: ONNX tensor name → signature key and layout (inputs, then outputs).
        notes: what else the reader should know (input source, no task metric ...).
    """

    tflite: Path
    io: Path
    weights: str
    oracle: OracleInfo
    verdicts: list[Verdict]
    names: dict[str, str]
    notes: list[str] = field(default_factory=list)


@output_scope()  # the outputs it checks stay this run's until it returns
def export_litert(
    model: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    weights: str = "f32",
    images: str | os.PathLike[str] | None = None,
    thresholds: Mapping[str, float | None] | None = None,
    timeout_s: float = 1800,
) -> LiteRtExport:
    """Convert ``model`` with onnx2tf and write ``OUT.tflite`` and ``OUT.json``, verified.

    Args:
        model: the ``.onnx`` file (fixed input sizes; a dynamic batch axis becomes 1).
        output: ``out/model.tflite`` (or ``out/model``).
        weights: ``f32``, ``f16`` (half the size) or ``int8`` (dynamic-range: int8 weights, float activations).
        images: an image or a folder of images to verify on (one input set each); default seeded random data.
        thresholds: overrides of ``Thresholds`` fields.
        timeout_s: per worker process (the conversion, the oracle, the exported file).

    Raises:
        OutputError: an output path that cannot be written or is the input.
        BackendUnavailableError: LiteRT is not installed, or the converter environment is not ready.
        UnsupportedModelError: onnx2tf cannot convert the model.
        ParityError: the exported file does not pass against the oracle; nothing is written.
    """
    from deploykit.backends.litert import WEIGHTS, LiteRtBackend
    from deploykit.backends.litert_convert import converted
    from deploykit.errors import UsageError
    from deploykit.io import check_outputs, commit, scratch_dir
    from deploykit.model import Model, check_model_path
    from deploykit.tasks.registry import recognise
    from deploykit.tensors import TensorSpec
    from deploykit.verify.check import judge_runs, prepare_inputs, require_passed, run_oracle
    from deploykit.verify.isolated import run_candidate
    from deploykit.verify.metrics import thresholds_for

    if weights not in WEIGHTS:
        raise UsageError(
            f"--weights '{weights}' | is not a LiteRT weight type; expected one of {', '.join(WEIGHTS)}.",
            hint="f32 (exact), f16 (half the size) or int8 (dynamic range, a quarter).",
        )
    model_path = check_model_path(model)
    tflite, io_path = file_and_json(output, ".tflite")
    check_outputs({"-o/--output (.tflite)": tflite, "-o/--output (.json)": io_path}, inputs={"the model": model_path})
    overrides = dict(thresholds or {})
    thresholds_for("f32", **overrides)  # bad values fail before anything runs
    backend = LiteRtBackend()
    backend.import_runtime()
    source = Model.open(model_path)
    converted(source, weights, timeout_s=timeout_s)  # the conversion under this call's limit; carry finds it cached
    prepared = prepare_inputs(source, images)
    with scratch_dir(tflite) as scratch:
        carried = backend.conversion.carry(source, {"weights": weights}, scratch, "model")
        assert carried is not None  # an .onnx model always converts (or raises)
        written, written_io = carried.files
        document = json.loads(written_io.read_text())
        task = None
        if prepared.source == "images":
            outputs = [TensorSpec.from_dict(t) for t in document["outputs"]]
            task = recognise({s.name: s for s in outputs}, document["metadata"])
        oracle_cases = prepared.cases[:1] if task is not None else prepared.cases
        oracle, references = run_oracle(model_path, "auto", oracle_cases, timeout_s=timeout_s)
        name = backend.name
        label = f"{name} {tflite.name}"
        exported = run_candidate(written, name, "cpu", prepared.cases, label=label, timeout_s=timeout_s)
        runs = [(exported, WEIGHT_PRECISIONS[weights])]
        if weights != "f32" and task is not None:
            # the task metric compares with a verified f32 run on every image (the oracle checks one)
            f32 = run_candidate(
                model_path,
                name,
                "cpu",
                prepared.cases,
                options={"weights": "f32"},
                label=f"{name} {model_path.name} f32",
                timeout_s=timeout_s,
            )
            runs.insert(0, (f32, "f32"))
        if references is not None:
            references = references[: len(oracle_cases)]
        verdicts = judge_runs(runs, prepared.cases, references, oracle, overrides=overrides, task=task)
        require_passed(
            verdicts,
            f"export litert '{model_path.name}' | the exported file",
            oracle,
            "check the model with 'deploykit compare -b litert'; with --weights f16/int8, pass --inputs "
            "photos/ so the task metric judges it, or relax --min-cosine/--min-snr.",
        )
        commit([(written, tflite), (written_io, io_path)])
    names = {
        t["name"]: t["key"] + (f" {tuple(t['litert_shape'])}" if t["permutation"] else "")
        for side in ("inputs", "outputs")
        for t in document[side]
    }
    notes = [prepared.note]
    if weights != "f32" and task is None:
        notes.append(
            f"no task metric: {weights} weights judged by cosine/SNR only (pass --inputs photos/ for top-1 / mAP)"
        )
    return LiteRtExport(tflite, io_path, weights, oracle, verdicts, names, notes)
