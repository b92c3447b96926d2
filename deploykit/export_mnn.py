"""ONNX → an MNN ``.mnn`` file, for apps that ship MNN without deploykit: ``export_mnn``.

The export is the very conversion the MNN backend runs (MNN's converter binding, through the
converted-model cache), copied out with a ``.json`` beside it (the ONNX interface and metadata, so
``deploykit`` opens the ``.mnn`` with the ONNX names, types and task) and verified as written: the
exported file runs on MNN against the independent oracle (onnx's reference evaluator), element-wise
at f32, before anything reaches the output paths. A file that does not pass is not written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from deploykit.io import file_and_json, output_scope
from deploykit.verify.verdict import OracleInfo, Verdict


@dataclass
class MnnExport:
    """What ``export_mnn`` wrote and how it was checked.

    Attributes:
        model: the written ``.mnn`` file.
        io: the ``.json`` beside it (ONNX inputs, outputs and metadata).
        converter: the converter that made it (``mnn 3.6.1``).
        oracle: who computed the reference outputs.
        verdicts: the exported file's verdict(s) against it.
        notes: what else the reader should know (input source ...).
    """

    model: Path
    io: Path
    converter: str
    oracle: OracleInfo
    verdicts: list[Verdict]
    notes: list[str] = field(default_factory=list)


@output_scope()  # the outputs it checks stay this run's until it returns
def export_mnn(
    model: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    images: str | os.PathLike[str] | None = None,
    thresholds: Mapping[str, float | None] | None = None,
    timeout_s: float = 900,
) -> MnnExport:
    """Convert ``model`` with MNN's converter and write ``OUT.mnn`` and ``OUT.json``, verified.

    Args:
        model: the ``.onnx`` file.
        output: ``out/model.mnn`` (or ``out/model``).
        images: an image or a folder of images to verify on (one input set each); default seeded random data.
        thresholds: overrides of ``Thresholds`` fields.
        timeout_s: per worker process (the oracle, the exported file).

    Raises:
        OutputError: an output path that cannot be written or is the input.
        UnsupportedModelError, BackendUnavailableError: MNN cannot take the model.
        ParityError: the exported file does not pass against the oracle; nothing is written.
    """
    from deploykit.backends.mnn import MnnBackend
    from deploykit.backends.mnn_convert import converter_version
    from deploykit.io import check_outputs, commit, scratch_dir
    from deploykit.model import Model, check_model_path
    from deploykit.verify.check import judge_runs, prepare_inputs, require_passed, run_oracle
    from deploykit.verify.isolated import run_candidate
    from deploykit.verify.metrics import thresholds_for

    model_path = check_model_path(model)
    target, io_path = file_and_json(output, ".mnn")
    check_outputs({"-o/--output (.mnn)": target, "-o/--output (.json)": io_path}, inputs={"the model": model_path})
    overrides = dict(thresholds or {})
    thresholds_for("f32", **overrides)  # bad values fail before anything runs
    backend = MnnBackend()
    backend.import_runtime()
    onnx_model = Model.open(model_path)
    backend.conversion.converted_file(onnx_model, {})  # converted (or refused) before the inputs are prepared
    prepared = prepare_inputs(model_path, images)
    with scratch_dir(target) as scratch:
        carried = backend.conversion.carry(onnx_model, {}, scratch, "model")
        assert carried is not None  # an .onnx model always converts (or raises)
        written, written_io = carried.files
        oracle, references = run_oracle(model_path, "auto", prepared.cases, timeout_s=timeout_s)
        run = run_candidate(
            written,
            backend.name,
            backend.default_device,
            prepared.cases,
            options={"precision": "f32"},
            label=f"{backend.name} {target.name}",
            timeout_s=timeout_s,
        )
        verdicts = judge_runs([(run, "f32")], prepared.cases, references, oracle, overrides=overrides, task=None)
        require_passed(
            verdicts,
            f"export mnn '{model_path.name}' | the exported file",
            oracle,
            "check the model with 'deploykit compare -b mnn', or relax --atol/--rtol.",
        )
        commit([(written, target), (written_io, io_path)])
    notes = [prepared.note]
    return MnnExport(target, io_path, converter_version(), oracle, verdicts, notes)
