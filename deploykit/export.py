"""ONNX → a runtime's own files, for apps that ship the runtime without deploykit: ``export_ncnn``.

The export is the very conversion the ncnn backend runs (pnnx, through its cache), copied out and
verified as written: the exported ``.param``/``.bin`` pair runs on ncnn against the independent
oracle (onnx's reference evaluator) before anything reaches the output paths, element-wise at f32,
by cosine/SNR and the task metric (top-1 agreement, mAP@0.5) on images with f16 weights. A pair that
does not pass is not written; the three files are checked before the work and written together.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.errors import OutputError
from deploykit.io import output_scope
from deploykit.verify.verdict import OracleInfo, Verdict

PAIR_SUFFIXES = (".param", ".bin", ".json")


@dataclass
class NcnnExport:
    """What ``export_ncnn`` wrote and how it was checked.

    Attributes:
        param, bin, io: the written files (the ``.json`` maps ONNX names to ncnn blobs).
        weights: ``f32`` or ``f16``.
        oracle: who computed the reference outputs.
        verdicts: the exported pair's verdict(s) against it.
        names: ONNX tensor name → ncnn blob name (inputs, then outputs).
        notes: what else the reader should know (input source, no task metric ...).
    """

    param: Path
    bin: Path
    io: Path
    weights: str
    oracle: OracleInfo
    verdicts: list[Verdict]
    names: dict[str, str]
    notes: list[str] = field(default_factory=list)


def ncnn_paths(output: str | os.PathLike[str]) -> tuple[Path, Path, Path]:
    """``out/model`` or ``out/model.param`` → (``out/model.param``, ``out/model.bin``, ``out/model.json``).

    Raises:
        OutputError: the name ends in ``.bin``, ``.json`` or ``.onnx`` (which file is meant is unclear).
    """
    path = Path(output)
    if path.name.lower().endswith(".param"):
        stem = path.with_suffix("")
    elif path.suffix.lower() in (".bin", ".json", ".onnx"):
        raise OutputError(
            f"-o/--output '{path}' | names a {path.suffix} file; the export writes a .param, a .bin and a .json "
            "with one name.",
            hint=f"give the name without suffix (-o {path.with_suffix('')}) or the .param "
            f"(-o {path.with_suffix('.param')}).",
        )
    else:
        stem = path
    if not stem.name or stem.name.startswith("."):
        raise OutputError(
            f"-o/--output '{path}' | has no file name to put before .param/.bin/.json.",
            hint="e.g. -o out/model writes out/model.param, out/model.bin and out/model.json.",
        )
    base = str(stem)
    return Path(base + ".param"), Path(base + ".bin"), Path(base + ".json")


@output_scope()  # the outputs it checks stay this run's until it returns
def export_ncnn(
    model: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    fp16: bool = False,
    shapes: Sequence[str] = (),
    images: str | os.PathLike[str] | None = None,
    thresholds: Mapping[str, float | None] | None = None,
    timeout_s: float = 900,
) -> NcnnExport:
    """Convert ``model`` with pnnx and write ``OUT.param``, ``OUT.bin`` and ``OUT.json``, verified.

    Args:
        model: the ``.onnx`` file.
        output: ``out/model`` (or ``out/model.param``).
        fp16: store weights as f16 (half the size; judged by cosine/SNR, and by the task metric on ``images``).
        shapes: ``NAME:SHAPE`` for inputs with dynamic sizes (pnnx converts at fixed shapes).
        images: an image or a folder of images to verify on (one input set each); default seeded random data.
        thresholds: overrides of ``Thresholds`` fields.
        timeout_s: per worker process (the oracle, the exported pair).

    Raises:
        OutputError: an output path that cannot be written or is the input.
        UnsupportedModelError, BackendUnavailableError: ncnn or pnnx cannot take the model.
        ParityError: the exported pair does not pass against the oracle; nothing is written.
    """
    from deploykit.backends.ncnn import NcnnBackend
    from deploykit.backends.ncnn_layout import onnx_layout
    from deploykit.io import check_outputs, commit, scratch_dir
    from deploykit.model import check_model_path
    from deploykit.tasks.registry import recognise
    from deploykit.verify.check import judge_runs, prepare_inputs, require_passed, run_oracle
    from deploykit.verify.isolated import run_candidate
    from deploykit.verify.metrics import thresholds_for

    model_path = check_model_path(model)
    param, bin_path, io_path = ncnn_paths(output)
    check_outputs(
        {"-o/--output (.param)": param, "-o/--output (.bin)": bin_path, "-o/--output (.json)": io_path},
        inputs={"the model": model_path},
    )
    overrides = dict(thresholds or {})
    thresholds_for("f32", **overrides)  # bad values fail before anything runs
    NcnnBackend().import_runtime()
    shape_option = {"shape": ";".join(shapes)} if shapes else {}
    layout = onnx_layout(model_path, shape_option.get("shape"), fp16_weights=fp16)
    settings = {text.partition(":")[0]: text for text in shapes}
    prepared = prepare_inputs(
        model_path,
        images,
        shapes={name: _setting(text) for name, text in settings.items()},
    )
    with scratch_dir(param) as scratch:
        written = scratch / "model.param"
        shutil.copyfile(layout.param, written)
        shutil.copyfile(layout.bin, scratch / "model.bin")
        pair = dataclasses.replace(layout, param=written, bin=scratch / "model.bin")
        document = pair.io_document(model_path)
        (scratch / "model.json").write_text(json.dumps(document, indent=1) + "\n")
        task = None
        if prepared.source == "images":
            task = recognise({s.name: s for s in layout.specs_out}, layout.metadata)
        oracle_cases = prepared.cases[:1] if task is not None else prepared.cases
        oracle, references = run_oracle(model_path, "auto", oracle_cases, timeout_s=timeout_s)
        ncnn = NcnnBackend.name
        runs = [
            (
                run_candidate(
                    written,
                    ncnn,
                    NcnnBackend.default_device,
                    prepared.cases,
                    label=f"{ncnn} {param.name}",
                    timeout_s=timeout_s,
                ),
                "f16" if fp16 else "f32",
            )
        ]
        if fp16 and task is not None:
            # the task metric compares with a verified f32 run on every image (the oracle checks one)
            f32 = run_candidate(
                model_path,
                ncnn,
                NcnnBackend.default_device,
                prepared.cases,
                options={**shape_option, "precision": "f32"},
                label=f"{ncnn} {model_path.name} f32",
                timeout_s=timeout_s,
            )
            runs.insert(0, (f32, "f32"))
        if references is not None:
            references = references[: len(oracle_cases)]
        verdicts = judge_runs(runs, prepared.cases, references, oracle, overrides=overrides, task=task)
        require_passed(
            verdicts,
            f"export ncnn '{model_path.name}' | the exported pair",
            oracle,
            "check the model with 'deploykit compare -b ncnn'; with --fp16, pass --inputs photos/ so the "
            "task metric judges it, or relax --min-cosine/--min-snr.",
        )
        commit([(written, param), (scratch / "model.bin", bin_path), (scratch / "model.json", io_path)])
    names = {t["name"]: t["blob"] for side in ("inputs", "outputs") for t in document[side]}
    notes = [prepared.note]
    if fp16 and task is None:
        notes.append("no task metric: f16 weights judged by cosine/SNR only (pass --inputs photos/ for top-1 / mAP)")
    return NcnnExport(param, bin_path, io_path, layout.weights, oracle, verdicts, names, notes)


def _setting(text: str) -> Any:
    from deploykit.inputs import parse_input_settings

    return next(iter(parse_input_settings([text]).values()))
