"""``quantize``: a float ONNX model → INT8 (QDQ) or float16, with its accuracy delta and speedup measured.

Order of work: validate everything (options, paths, model, data) → quantize in a scratch folder →
measure the accuracy delta on held-out data → (optionally) per-layer divergence and speed →
stamp the metadata → write the output atomically. Any error before the last step leaves nothing
at the output path.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import InputError, QuantizationError, UsageError
from deploykit.io import atomic_path, check_onnx_output, check_outputs, output_scope, scratch_dir
from deploykit.model import Model, as_model, check_model_path, check_onnx, has_external_data, load_onnx, path_of
from deploykit.quantize import engines, evaluate, graph
from deploykit.quantize.calibration import (
    CalibrationData,
    Sample,
    array_data,
    image_data,
)
from deploykit.quantize.results import AccuracyDelta, QuantizeReport
from deploykit.quantize.settings import QuantizeSettings
from deploykit.tasks.registry import task_class
from deploykit.vision.image import Preprocess

METADATA_KEY = "deploykit.quantize"
RANDOM_SAMPLES = 4


def parse_drop(value: str | float | None) -> float | None:
    """``1%`` → 0.01, ``0.01`` → 0.01; None stays None.

    Raises:
        UsageError: not a number, or not in (0, 1).
    """
    if value is None:
        return None
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        number = float("nan")
    if not 0 < number < 1:
        raise UsageError(
            f"--max-drop {value} | expected a drop in (0, 1) or a percentage like 1%.",
            hint="--max-drop 1% allows the task metric to fall by one point.",
        )
    return number


def pipeline_facts(model: Model | Path) -> tuple[str | None, Preprocess | None, list[str]]:
    """The pipeline of the task the model's metadata names, else the first the model fits (in the task
    registry's order: detector first), with its pre-processing and labels. A model whose metadata names
    a task without a pipeline of its own (``embed``) keeps that task, with the image pre-processing the
    first pipeline that opens it reads."""
    from deploykit.tasks.registry import pipeline_tasks

    loaded = as_model(model)  # read once: every pipeline tried opens this Model
    stated = loaded.metadata.task
    for task in [stated] if stated in pipeline_tasks() else pipeline_tasks():
        try:
            with task_class(task).pipeline_class()(loaded) as opened:
                if stated is not None and stated not in pipeline_tasks():
                    return stated, opened.preprocess, []
                return task, opened.preprocess, list(opened.labels)
        except UsageError:
            continue
    return None, None, []


def _data(
    model: Model,
    calibrate: str | os.PathLike[str] | None,
    evaluate_folder: str | os.PathLike[str] | None,
    preprocess: Preprocess | None,
    *,
    fp16: bool,
    calibration_size: int,
    held_out: float,
    seed: int,
) -> CalibrationData:
    interface, model_path = model, model.path
    names = [s.name for s in interface.inputs]
    source = calibrate if calibrate is not None else evaluate_folder
    if source is None:  # float16 without images: seeded random inputs, cosine/SNR only
        from deploykit.inputs import make_inputs

        rows = [make_inputs(interface.inputs, seed=seed + i) for i in range(RANDOM_SAMPLES)]
        return CalibrationData(
            "seeded random inputs",
            "",
            [],
            [Sample(arrays=r) for r in rows],
            names[0],
            None,
            notes=[f"no images given: cosine/SNR on {RANDOM_SAMPLES} seeded random inputs, no task metric"],
        )
    path = Path(source)
    if path.suffix.lower() == ".npz":
        data = array_data(
            path, interface.inputs, calibration_size=calibration_size, held_out=0 if fp16 else held_out, seed=seed
        )
    elif path.is_dir():
        spec = interface.inputs[0]
        if len(interface.inputs) != 1 or spec.shape is None or len(spec.shape) != 4 or preprocess is None:
            raise InputError(
                f"images '{path}' | images feed one (N, C, H, W) input; '{model_path.name}' has "
                f"{', '.join(str(s) for s in interface.inputs)}.",
                hint="pass calibration arrays in an .npz file instead.",
            )
        data = image_data(
            path,
            input_name=spec.name,
            input_dtype=spec.dtype,
            channels=spec.shape[1],
            preprocess=preprocess,
            calibration_size=calibration_size,
            held_out=0 if fp16 else held_out,
            evaluate=None if fp16 else evaluate_folder,
            seed=seed,
        )
    else:
        raise UsageError(
            f"--calibrate '{path}' | is neither a folder of images nor an .npz file"
            + (" (it does not exist)." if not path.exists() else "."),
            hint="pass a folder of real images the model will see, or an .npz of input arrays.",
        )
    if fp16:  # nothing to calibrate: every image measures the delta
        data.held_out, data.calibration = data.calibration + data.held_out, []
        data.notes = [f"float16 needs no calibration: the {len(data.held_out)} samples measure the accuracy delta"]
    return data


def _check_options(
    engine: str, method: str | None, fp16: bool, calibrate: Any, max_drop: float | None
) -> engines.QuantizeEngine:
    if fp16:
        if method is not None or engine != engines.DEFAULT_ENGINE:
            raise UsageError(
                "--fp16 | takes no --quantizer or --method: float16 conversion needs no calibration.",
                hint="drop --quantizer/--method, or drop --fp16 for INT8.",
            )
        return engines.Fp16Engine()
    if engine not in engines.ENGINES:
        why = engines.NOT_AVAILABLE.get(engine)
        raise UsageError(
            f"--quantizer '{engine}' | is not one of {', '.join(engines.ENGINES)}" + (f": {why}." if why else "."),
            hint="ort: ONNX Runtime static QDQ; nncf: OpenVINO's NNCF (pip install 'deploykit[quantize]').",
        )
    chosen = engines.QUANTIZE_ENGINES[engine]()
    if method is not None and method not in chosen.methods:
        offers = next(e for e in engines.QUANTIZE_ENGINES.values() if e.methods)
        raise UsageError(
            f"--method '{method}' | is not one of {', '.join(offers.methods)} for --quantizer {offers.name}"
            + (f" ({chosen.title} chooses its own ranges)." if not chosen.methods else "."),
            hint="minmax is the default; entropy and percentile clip outliers.",
        )
    if calibrate is None:
        raise UsageError(
            "--calibrate | INT8 needs calibration data: a folder of images or an .npz of input arrays.",
            hint="pass --calibrate photos/ (about 100 images the model will really see), or use --fp16.",
        )
    return chosen


@output_scope()  # the outputs it checks stay this run's until it returns
def quantize(
    model: Model | str | os.PathLike[str],
    output: str | os.PathLike[str],
    settings: QuantizeSettings | None = None,
    *,
    calibrate: str | os.PathLike[str] | None = None,
    evaluate_on: str | os.PathLike[str] | None = None,
    ir: str | os.PathLike[str] | None = None,
) -> QuantizeReport:
    """Quantize a float ONNX model to INT8 (QDQ, per-channel weights) or convert it to float16.

    Args:
        model: the float ``.onnx`` file, or its ``Model`` (read once).
        output: where the reduced model is written (atomically; never onto ``model``).
        settings: what to make and how to judge it (``QuantizeSettings``: ``fp16``, the
            quantizer ``engine``, its calibration ``method``, ``max_drop``, ``exclude``, speed
            measurement ...); default ``QuantizeSettings()``: INT8 by ONNX Runtime, timed on every
            available backend.
        calibrate: a folder of images (``photos/`` or ``photos/<class>/``) or an ``.npz`` of input
            arrays; images go through the model's own pre-processing. Optional with ``fp16``.
        evaluate_on: a separate folder of evaluation images instead of the held-out split.
        ir: also write OpenVINO IR (``.xml`` + ``.bin``) of the result here.

    Example:
        ``quantize("m.onnx", "m.int8.onnx", QuantizeSettings(engine="nncf", max_drop="1%"), calibrate="photos/")``

    Raises:
        UsageError, InputError, ModelError: before any work, nothing written.
        BackendUnavailableError: the engine's package is missing (the ``quantize`` extra).
        QuantizationError: the engine failed, nothing was quantized, or the drop exceeds ``max_drop``.
    """
    settings = settings or QuantizeSettings()
    fp16, engine, method, max_drop = settings.fp16, settings.engine, settings.method, settings.max_drop
    iterations, rounds, exclude, backends = settings.iterations, settings.rounds, settings.exclude, settings.backends
    model_path = check_model_path(path_of(model))
    output_path = Path(output)
    if ir is not None and Path(ir).suffix != ".xml":
        raise UsageError(f"--ir '{ir}' | expected a path ending in .xml.", hint="e.g. --ir model.int8.xml.")
    check_outputs(
        {"--output": output_path, "--ir": ir, "--ir weights": Path(ir).with_suffix(".bin") if ir else None},
        inputs={"model": model_path, "--calibrate": calibrate, "--eval": evaluate_on},
    )
    check_onnx_output(output_path, "--output")
    budget = parse_drop(max_drop)
    chosen = _check_options(engine, method, fp16, calibrate, budget)
    if iterations < 1 or rounds < 1:
        raise UsageError(
            f"--iterations {iterations} --rounds {rounds} | at least 1 of each is needed.",
            hint="e.g. --iterations 50 --rounds 3.",
        )
    loaded = as_model(model)
    check_onnx(loaded)
    # the engines edit the graph (names, opset): a copy of the model read, with its external weights
    source = load_onnx(model_path, load_external_data=True, check=False) if has_external_data(loaded.proto) else None
    if source is None:
        source = type(loaded.proto)()
        source.CopyFrom(loaded.proto)
    (graph.check_not_float16 if fp16 else graph.check_not_quantized)(source, model_path.name)
    task, preprocess, labels = pipeline_facts(loaded)
    data = _data(
        loaded,
        calibrate,
        evaluate_on,
        preprocess,
        fp16=fp16,
        calibration_size=settings.calibration_size,
        held_out=settings.held_out,
        seed=settings.seed,
    )
    needs_images = task is not None and task_class(task).quantize_budget_needs_images
    if budget is not None and (task is None or (needs_images and data.preprocess is None)):
        raise UsageError(
            "--max-drop | needs INT8 and a task metric: a classifier or detector with calibration images.",
            hint="drop --max-drop, or give images of the model's task.",
        )
    notes = list(data.notes)
    # working files beside the output: a full disk or a file-size limit (ulimit -f) on the way is said
    # for the output, by name, and nothing is left (scratch_dir)
    with scratch_dir(output_path) as scratch:
        report = _quantize_in(
            scratch,
            model_path,
            output_path,
            source,
            data,
            task=task,
            labels=labels,
            engine=chosen,
            method=method or "minmax",
            per_channel=settings.per_channel,
            exclude=exclude,
            quantize_head=settings.quantize_head,
            budget=budget,
            debug_layers=settings.debug_layers,
            measure_speed=settings.measure_speed,
            backends=backends,
            iterations=iterations,
            rounds=rounds,
            notes=notes,
            judge=settings.judge,
        )
        quantized = scratch / "quantized.onnx"
        _stamp(quantized, report)
        with atomic_path(output_path) as temporary:
            temporary.write_bytes(quantized.read_bytes())
        if ir is not None:
            _write_ir(output_path, Path(ir), scratch)
            report.ir = str(ir)
    return report


def _quantize_in(
    scratch: Path,
    model_path: Path,
    output_path: Path,
    source: Any,
    data: CalibrationData,
    *,
    task: str | None,
    labels: list[str],
    engine: engines.QuantizeEngine,
    method: str,
    per_channel: bool,
    exclude: Sequence[str],
    quantize_head: bool,
    budget: float | None,
    debug_layers: bool,
    measure_speed: bool,
    backends: Sequence[str] | None,
    iterations: int,
    rounds: int,
    notes: list[str],
    judge: str | None,
) -> QuantizeReport:
    import onnx

    prepared = source
    if engine.per_channel and per_channel:
        prepared, note = graph.upgrade_opset(source)
        notes += [note] if note else []
    if graph.name_nodes(prepared):
        notes.append("unnamed nodes were given names (op type and index) so they can be excluded and reported")
    # the float model as the engines see it, written once and passed down as a Model, not read back
    float_model = Model.written(prepared, scratch / "float.onnx")
    base_path = engine.prepare(float_model, scratch, notes)
    base = prepared if base_path == float_model.path else onnx.load(str(base_path))
    user = graph.check_node_names(base, exclude)
    keeps_head = task is not None and task_class(task).quantize_keeps_head_float
    head = graph.head_nodes(base) if keeps_head and not quantize_head else []
    excluded = list(dict.fromkeys([*head, *user]))
    reference = evaluate.run_all(float_model, data, data.held_out, judge, subject=f"model '{model_path.name}'")
    quantized_path = scratch / "quantized.onnx"
    started = time.perf_counter()
    steered = engine.accuracy_control and budget is not None
    validate = _validator(scratch, float_model, data, task, labels, reference, judge) if steered and task else None
    job = engines.EngineJob(
        base_path,
        quantized_path,
        data,
        method=method,
        per_channel=per_channel,
        exclude=excluded,
        max_drop=budget if steered else None,
        validate=validate,
    )
    kept_ops = engine.reduce(job)
    seconds = time.perf_counter() - started
    result = onnx.load(str(quantized_path))
    qdq = engine.precision == "int8"
    if qdq and graph.float_outputs(result):
        onnx.save(result, str(quantized_path))
        notes.append("graph outputs stay float: the quantized last layers hand over unrounded values")
    if qdq and head and graph.float_inputs_of(result, head):
        onnx.save(result, str(quantized_path))
        notes.append("the float head reads unrounded values from the int8 layers before it")
    if not qdq:
        count = sum(1 for n in result.graph.node if n.op_type != "Cast") - sum(kept_ops.values())
    else:
        count = graph.count_ops(result, ["QuantizeLinear"])
        if count == 0:
            raise QuantizationError(
                f"engine '{engine.name}' | quantized no node of '{model_path.name}': none of its ops "
                f"({', '.join(sorted({n.op_type for n in base.graph.node}))}) can be quantized"
                + (" outside the excluded nodes." if excluded else "."),
                hint="INT8 speeds up convolutions and matrix products; keep this model in f32 or try --fp16.",
            )
    _copy_metadata(source, quantized_path)
    accuracy = _accuracy(float_model, quantized_path, data, task, labels, reference, notes, judge)
    accuracy.max_drop = budget
    if budget is not None and accuracy.drop is not None and accuracy.drop > budget + 1e-12:
        raise QuantizationError(
            f"quantize '{model_path.name}' | the {task} metric dropped by {accuracy.drop:.2%} on "
            f"{len(data.held_out)} held-out samples; the budget is {budget:.2%}. Nothing was written.",
            hint="use --quantizer nncf (accuracy-controlled), or --debug-layers and --exclude the worst nodes.",
        )
    report = QuantizeReport(
        model=str(model_path),
        output=str(output_path),
        precision=engine.precision,
        engine=engine.name,
        method=method if engine.methods else None,
        per_channel=per_channel and engine.per_channel,
        task=task,
        calibration=data.to_dict(),
        excluded={"head": head, "user": user},
        kept_f32_ops=kept_ops,
        quantized_nodes=count,
        seconds=round(seconds, 3),
        accuracy=accuracy,
        notes=notes,
    )
    if debug_layers:
        report.layers = evaluate.layer_divergence(base, quantized_path, data, data.held_out or data.calibration)
    if measure_speed:
        samples = data.held_out or data.calibration
        report.speed = evaluate.speedup(
            float_model.path,
            quantized_path,
            data.feeds(samples[0]),
            backends,
            iterations=iterations,
            warmup=max(3, iterations // 10),
            rounds=rounds,
        )
    return report


def _accuracy(
    float_model: Model,
    quantized_path: Path,
    data: CalibrationData,
    task: str | None,
    labels: list[str],
    reference: list[dict[str, np.ndarray]],
    notes: list[str],
    judge: str | None,
) -> AccuracyDelta:
    candidate = evaluate.run_all(quantized_path, data, data.held_out, judge, subject=evaluate.REDUCED)
    accuracy = AccuracyDelta(
        samples=len(data.held_out),
        backend=evaluate.judge_label(judge),
        outputs=evaluate.output_similarity(reference, candidate) if data.held_out else [],
    )
    if not data.held_out:
        notes.append("no held-out samples (--held-out 0): no accuracy delta")
    elif task is not None:
        evidence = evaluate.reduced_model_evidence(
            float_model, quantized_path, data, labels, reference, judge, candidate
        )
        accuracy.task, accuracy.drop, more = task_class(task).reduced_delta(evidence)
        notes += more
    return accuracy


def _validator(
    scratch: Path,
    float_model: Model,
    data: CalibrationData,
    task: str,
    labels: list[str],
    reference: list[dict[str, np.ndarray]],
    judge: str | None,
) -> Any:
    """NNCF's validation function: the task metric of a candidate model (higher is better)."""
    import onnx

    def validate(candidate: Any) -> float:
        path = scratch / "candidate.onnx"  # a task's pipeline reads a file, with the float model's metadata
        onnx.save(candidate, str(path))
        _copy_metadata(float_model.proto, path)
        evidence = evaluate.reduced_model_evidence(float_model, path, data, labels, reference, judge)
        _, drop, _ = task_class(task).reduced_delta(evidence)
        return 1.0 - drop if drop is not None else 0.0

    return validate


def _copy_metadata(source: Any, path: Path) -> None:
    """The source model's metadata (pre-processing, labels, head layout) onto the reduced model."""
    import onnx

    model = onnx.load(str(path))
    present = {p.key for p in model.metadata_props}
    for prop in source.metadata_props:
        if prop.key not in present:
            model.metadata_props.add(key=prop.key, value=prop.value)
    onnx.save(model, str(path))


def _stamp(path: Path, report: QuantizeReport) -> None:
    import onnx

    model = onnx.load(str(path))
    for prop in list(model.metadata_props):
        if prop.key == METADATA_KEY:
            model.metadata_props.remove(prop)
    model.metadata_props.add(key=METADATA_KEY, value=json.dumps(report.metadata(), default=str))
    model.producer_name = "deploykit quantize"
    onnx.save(model, str(path))


def _write_ir(onnx_path: Path, xml_path: Path, scratch: Path) -> None:
    staged = scratch / "ir" / "model.xml"
    staged.parent.mkdir()
    engines.save_ir(onnx_path, staged)
    # OpenVINO finds the weights by the .xml's stem, so the pair is renamed into place together
    with atomic_path(xml_path.with_suffix(".bin")) as temporary_bin, atomic_path(xml_path) as temporary_xml:
        temporary_bin.write_bytes(staged.with_suffix(".bin").read_bytes())
        temporary_xml.write_bytes(staged.read_bytes())


def read_metadata(model: Model | str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``deploykit.quantize`` record of a quantized model, or None."""
    text = as_model(model).metadata_props.get(METADATA_KEY)
    return json.loads(text) if text else None
