"""What a quantized model costs and gains: accuracy delta on held-out data, per-layer divergence, speedup.

The accuracy delta compares the quantized model with the float model it came from, on the
held-out samples, with the task metric the model's task measures (``Task.reduced_delta``: top-1 agreement for
classifiers, mAP@0.5 against the float detections for detectors ...) plus cosine and SNR per output.
Both models run through a ``Session`` of one judge backend: the registry's default (ONNX Runtime
on the CPU, which executes QDQ graphs in int8) unless another is named.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.errors import DeployKitError
from deploykit.quantize.calibration import CalibrationData, Sample
from deploykit.quantize.results import (
    LayerDivergence,
    OutputSimilarity,
    SpeedComparison,
    SpeedRounds,
    SpeedRow,
)
from deploykit.tasks.base import ReducedModelEvidence
from deploykit.verify.metrics import cosine_snr

if TYPE_CHECKING:
    from deploykit.backends.base import Backend
    from deploykit.bench.rows import Row
    from deploykit.model import Model

REDUCED = "the reduced model"  # how a refusal of the quantized (or float16) candidate names it
DEBUG_LAYER_SAMPLES = 8
TOP_LAYERS = 10


def similarity(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """Cosine similarity and SNR (dB) of two arrays, as ``deploykit.verify.metrics.cosine_snr``
    computes them; where the cosine is undefined (an all-zero array) it is 1.0 for equal arrays
    (infinite SNR) and 0.0 otherwise, so a report always holds a number."""
    with np.errstate(all="ignore"):  # a figure that is no number is the caller's to refuse, not a warning
        cosine, snr_db = cosine_snr(reference, candidate)
    return {"cosine": float(snr_db == math.inf) if cosine is None else cosine, "snr_db": snr_db}


def judge_backend(judge: str | None = None) -> Backend:
    """The backend that runs both models for the accuracy delta: ``judge``, or the registry's default."""
    from deploykit.backends.registry import default_backend, get_backend

    return default_backend() if judge is None else get_backend(judge)


def run_all(
    model: Any, data: CalibrationData, samples: Sequence[Sample], judge: str | None, *, subject: str
) -> list[dict[str, np.ndarray]]:
    """Every output of ``model`` (a ``Model``, a path or a ModelProto) for each sample, through a
    ``Session`` of the judge backend on its default device (``judge_backend``), asked for f32
    inference precision where the backend takes one: a device's bf16 default would blur the float
    reference (the int8 layers of a QDQ model still run in int8). ``subject`` is how a refusal names
    the model (``model 'm.onnx'``, ``the reduced model``): the caller knows which one it passes."""
    with contextlib.ExitStack() as stack:
        if hasattr(model, "SerializeToString"):  # NNCF's candidates are in memory
            import onnx

            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="deploykit-judge-")))
            onnx.save(model, str(scratch / "candidate.onnx"))
            model = scratch / "candidate.onnx"
        backend = judge_backend(judge)
        try:
            session = stack.enter_context(backend.open(model, **backend.precision_options("f32")))
        except DeployKitError as exc:  # the judge's refusal: a sequence output fp16 left as float ...
            from deploykit.errors import QuantizationError

            raise QuantizationError(
                f"{subject} | backend '{backend.name}' cannot load it to measure its accuracy: {exc.problem}",
                hint="exclude the nodes it names from quantization (--exclude), or keep the model in float32; "
                "nothing was written.",
            ) from exc
        return [session.run(feeds) for feeds in data.iter_feeds(samples)]


def judge_label(judge: str | None = None) -> str:
    """Where the accuracy delta ran, as the report says it: ``<backend> <device>``."""
    backend = judge_backend(judge)
    return f"{backend.name} {backend.default_device}"


def output_similarity(
    reference: Sequence[Mapping[str, np.ndarray]], candidate: Sequence[Mapping[str, np.ndarray]]
) -> list[OutputSimilarity]:
    """Cosine and SNR per output over all samples together."""
    from deploykit.errors import QuantizationError
    from deploykit.verify.metrics import degeneracy

    rows = []
    for name in reference[0]:
        ref = np.concatenate([r[name].ravel() for r in reference])
        cand = np.concatenate([c[name].ravel() for c in candidate])
        if ref.dtype.kind == "f" and (said := degeneracy(ref.astype(np.float64))) and not np.isfinite(ref).all():
            raise QuantizationError(  # by deploykit's own rules a NaN/infinite reference says nothing
                f"output '{name}' | the float model's reference is degenerate on the held-out samples ({said}); "
                "the accuracy of the reduced model cannot be measured against it.",
                hint="check the model (a division by zero?) and the calibration images; nothing was written.",
            )
        measured = similarity(ref, cand)
        rows.append(OutputSimilarity(name, measured["cosine"], measured["snr_db"]))
    return rows


def reduced_model_evidence(
    float_model: Model,
    reduced_path: Path,
    data: CalibrationData,
    labels: Sequence[str],
    reference: Sequence[Mapping[str, np.ndarray]],
    judge: str | None,
    reduced_outputs: Sequence[Mapping[str, np.ndarray]] | None = None,
) -> ReducedModelEvidence:
    """What the task measures a reduced model with (``Task.reduced_delta``): both models' held-out
    outputs (the reduced model's run on first ask, unless given), the images and their class folders,
    and the judge backend with its f32 options."""
    from functools import cache

    from deploykit.verify.metrics import thresholds_for

    backend = judge_backend(judge)

    @cache
    def outputs() -> Sequence[Mapping[str, np.ndarray]]:
        if reduced_outputs is not None:
            return reduced_outputs
        return run_all(reduced_path, data, data.held_out, judge, subject=REDUCED)

    return ReducedModelEvidence(
        float_model=float_model,
        reduced_model=reduced_path,
        cases=list(data.iter_feeds(data.held_out)),
        reference=reference,
        reduced_outputs=outputs,
        images=[s.image for s in data.held_out if s.image is not None],
        image_classes=[s.label for s in data.held_out],
        labels=list(labels),
        judge_backend=backend.name,
        judge_options=backend.precision_options("f32"),
        thresholds=thresholds_for("int8"),
    )


def _float_tensors(model: Any) -> dict[str, Any]:
    """Name → value info of every float tensor produced by a node, after shape inference."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    infos = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    # value_info can outlive its tensor (a quantizer that folds an activation into its producer)
    produced = {output for node in model.graph.node for output in node.output}
    return {
        name: info for name, info in infos.items() if name in produced and info.type.tensor_type.elem_type in floats
    }


def _as_consumed(model: Any) -> dict[str, str]:
    """Tensor → the DequantizeLinear output its consumers read, where a Q→DQ pair follows it.

    That is what the next layer sees; the tensor itself can differ for reasons that vanish in
    the Q→DQ pair (ORT folds a Clip/Relu into its producer and lets the quantization range clip).
    """
    quantized_from = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    return {
        quantized_from[n.input[0]]: n.output[0]
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in quantized_from
    }


_SNR_CAP_DB = 100.0  # identical tensors have infinite SNR; above f32 rounding (~100 dB) counts as exact


def _capped(snr_db: float) -> float:
    return max(min(snr_db, _SNR_CAP_DB), -_SNR_CAP_DB)


def layer_divergence(
    base: Any, candidate_path: Path, data: CalibrationData, samples: Sequence[Sample]
) -> list[LayerDivergence]:
    """The nodes whose outputs diverge most between the float and the reduced model.

    Every float tensor a node of the reference produces, and that the candidate also has (QDQ and
    float16 conversion keep tensor names), becomes an extra output of both; SNR per tensor over
    the samples. Ranked by the SNR a node loses relative to its worst input (the error it adds),
    then by its own SNR: the top ``TOP_LAYERS`` are the best candidates for ``--exclude``.
    ``base`` is the float model the engine quantized, as a ModelProto (copied here, not changed).
    """
    import onnx

    reference = type(base)()
    reference.CopyFrom(base)
    candidate = onnx.load(str(candidate_path))
    reference_floats = _float_tensors(reference)
    candidate_floats = _float_tensors(candidate)
    seen_as = _as_consumed(candidate)
    graph_outputs = {o.name for o in reference.graph.output}
    producers = {}
    for node in reference.graph.node:
        for output in node.output:
            if output in reference_floats and output in candidate_floats:
                producers[output] = node
    present = {o.name for o in reference.graph.output}
    reference.graph.output.extend(reference_floats[name] for name in producers if name not in present)
    # a quantized graph input: what the first layers read is its Q→DQ copy, not the input itself
    quantized_inputs = [i.name for i in reference.graph.input if i.name in seen_as]
    present = {o.name for o in candidate.graph.output}
    for name in [*producers, *quantized_inputs]:
        exposed = seen_as.get(name, name)
        if exposed not in present:
            candidate.graph.output.append(
                candidate_floats[name]
                if exposed == name
                else onnx.helper.make_tensor_value_info(exposed, onnx.TensorProto.FLOAT, None)
            )
            present.add(exposed)
    used = list(samples[:DEBUG_LAYER_SAMPLES])
    with tempfile.TemporaryDirectory(prefix="deploykit-layers-") as scratch:
        paths = []
        for label, model in (("reference", reference), ("candidate", candidate)):
            path = Path(scratch) / f"{label}.onnx"
            onnx.save(model, str(path))
            paths.append(path)
        reference_runs = run_all(paths[0], data, used, None, subject="the float model with its layers as outputs")
        candidate_runs = run_all(paths[1], data, used, None, subject="the reduced model with its layers as outputs")
    snr = {}
    for name in quantized_inputs:
        given = np.concatenate([data.feeds(sample)[name].ravel() for sample in used])
        seen = np.concatenate([c[seen_as[name]].ravel() for c in candidate_runs])
        snr[name] = similarity(given, seen)["snr_db"]
    for name in producers:
        ref = np.concatenate([r[name].ravel() for r in reference_runs])
        cand = np.concatenate([c[seen_as.get(name, name)].astype(np.float32).ravel() for c in candidate_runs])
        snr[name] = similarity(ref, cand)["snr_db"]
    producer_of = {output: node for node in reference.graph.node for output in node.output}
    upstream: dict[str, float] = {}

    def signal_in(tensor: str) -> float:
        """SNR of a tensor, or of the nearest measured tensors above it; graph inputs and
        weights are the same in both models, so they start from a perfect signal."""
        if tensor in snr:
            return _capped(snr[tensor])
        if tensor not in upstream:
            node = producer_of.get(tensor)
            upstream[tensor] = (
                min((signal_in(i) for i in node.input if i), default=_SNR_CAP_DB) if node else _SNR_CAP_DB
            )
        return upstream[tensor]

    rows = []
    for name, node in producers.items():  # graph inputs are not nodes: no row of their own
        worst_input = min((signal_in(i) for i in node.input if i), default=_SNR_CAP_DB)
        added = worst_input - _capped(snr[name])
        rows.append(
            LayerDivergence(
                node=node.name,
                op_type=node.op_type,
                tensor=name,
                snr_db=round(snr[name], 2) if math.isfinite(snr[name]) else snr[name],
                snr_lost_db=round(added, 2),
                graph_output=name in graph_outputs,
            )
        )
    rows.sort(key=lambda r: (-r.snr_lost_db, r.snr_db))
    return rows[:TOP_LAYERS]


def speedup(
    reference: Path,
    candidate: Path,
    feeds: Mapping[str, np.ndarray],
    backends: Sequence[str] | None,
    *,
    iterations: int,
    warmup: int,
    rounds: int = 3,
) -> SpeedComparison:
    """p50 latency of both models on each backend, each configuration in its own worker process.

    The two models alternate for ``rounds`` rounds and each configuration's p50 is the median of
    its rounds, so a machine whose load changes during the measurement slows both alike.
    OpenVINO runs with the f32 inference precision for both models, so the ratio is the
    quantization's own (not bf16's). A configuration where the candidate is slower is flagged
    and never recommended.
    """
    from deploykit.bench.plan import BenchPlan
    from deploykit.bench.runner import benchmark

    runs: list[list[list[Row]]] = [[], []]  # model → round → rows
    for _ in range(rounds):
        for index, model in enumerate((reference, candidate)):
            plan = BenchPlan(
                backends=None if backends is None else tuple(backends),
                precision="f32",
                iterations=iterations,
                warmup=warmup,
                isolate=True,
            )
            result = benchmark(model, plan, inputs=dict(feeds))
            runs[index].append(result.rows)
    rows = []
    # the same backend specs expand to the same configurations, in the same order, every time
    for position, base in enumerate(runs[0][0]):
        measured = [[r[position] for r in model_runs] for model_runs in runs]
        errors = sorted({str(r.error) for model_rows in measured for r in model_rows if not r.ok})
        if errors:
            rows.append(SpeedRow(base.label, "error", error="; ".join(errors)))
            continue
        f32, reduced = ([r.latency_ms("p50_ms") for r in model_rows] for model_rows in measured)
        f32_p50, p50 = float(np.median(f32)), float(np.median(reduced))
        rows.append(
            SpeedRow(
                base.label,
                "slower than f32" if f32_p50 / p50 < 1 else "ok",
                f32_p50_ms=f32_p50,
                p50_ms=p50,
                speedup=f32_p50 / p50,
                rounds=SpeedRounds(f32, reduced),
                session_precision=measured[1][0].precision,  # what the runtime reports running
            )
        )
    faster = [r for r in rows if r.status == "ok"]
    best = min(faster, key=lambda r: math.inf if r.p50_ms is None else r.p50_ms) if faster else None
    return SpeedComparison(
        iterations=iterations,
        rounds=rounds,
        rows=rows,
        recommended=best.configuration if best else None,
        best_speedup=max((r.speedup for r in faster if r.speedup is not None), default=None),
    )
