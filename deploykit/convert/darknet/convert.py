"""``convert_darknet``: Darknet ``.cfg`` + ``.weights`` → ONNX, natively (no PyTorch), verified.

Verification runs the ONNX on the asked-for backends and compares with an independent oracle,
chosen by ``oracle`` (see ``oracles.py``): OpenCV 4.x's own Darknet importer, or Darknet itself
(``deploykit.testing.darknet``, compiled only when asked for). Without one the backends are compared
with each other and the report says why no oracle ran and how to get one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from onnx import helper

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.convert.darknet.graph import INPUT_NAME, build_graph
from deploykit.convert.darknet.layers import MAX_INPUT_SIDE, Network, load_networks
from deploykit.convert.darknet.layers import load_network as load_network  # the public name callers import from here
from deploykit.convert.darknet.oracles import check_oracle_choice, verify
from deploykit.convert.darknet.settings import DarknetExportSettings
from deploykit.convert.darknet.weights import DarknetWeights
from deploykit.convert.darknet.writer import write_streaming
from deploykit.convert.report import ConversionReport
from deploykit.deprecation import MovedKeywords, fold_keywords
from deploykit.errors import ConversionError, ParityError, UsageError
from deploykit.io import check_onnx_output, check_outputs, commit_outputs, output_scope, scratch_dir
from deploykit.labels import read_labels
from deploykit.validation import check_number, check_tolerances
from deploykit.verify.check import platform_notes
from deploykit.verify.settings import VerifySettings

HEADS = ("raw", "decoded")
# A fixed batch beyond this is a typo (verification runs a whole batch at once).
MAX_BATCH = 1024
MIN_OPSET, MAX_OPSET = 13, 21


def parse_size(text: str) -> tuple[int, int]:
    """``608x416`` (width x height) or ``416`` → (width, height)."""
    parts = text.lower().split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or any(v <= 0 for v in values):
        raise ConversionError(
            f"input size '{text}' | expected WIDTHxHEIGHT such as 416x416.",
            hint="pass --input-size 608x608 (multiples of the network stride).",
        )
    if any(v > MAX_INPUT_SIDE for v in values):
        raise ConversionError(
            f"input size '{text}' | a side is over {MAX_INPUT_SIDE} pixels.",
            hint="Darknet networks take inputs such as 416x416 or 608x608.",
        )
    return (values[0], values[-1])


def _metadata(
    net: Network,
    heads: list[dict[str, Any]],
    head: str,
    cfg: Path,
    weights: Path,
    labels: list[str] | None,
    opencv_threshold: float | None,
) -> dict[str, str]:
    from deploykit._version import __version__

    task = "detect" if heads else "classify"
    return {
        "deploykit.version": __version__,
        "deploykit.converter": "darknet",
        "deploykit.source": f"{cfg.name} + {weights.name}",
        "deploykit.task": task,
        "deploykit.head": head if heads else "none",
        "deploykit.darknet.heads": json.dumps(heads),
        "deploykit.input": json.dumps(
            {
                "name": INPUT_NAME,
                "size": [net.height, net.width],
                "channels": net.channels,
                "channel_order": "RGB",
                "scale": 1 / 255,
                "mean": [0, 0, 0],
                "std": [1, 1, 1],
                "resize": "letterbox",
                "pad_value": 0.5,
            }
        ),
        **({"deploykit.labels": json.dumps(labels)} if labels else {}),
        **({"deploykit.opencv_threshold": str(opencv_threshold)} if opencv_threshold is not None else {}),
    }


def _labels(path: str | os.PathLike[str] | None, net: Network) -> list[str] | None:
    if path is None:
        return None
    names = read_labels(path)
    expected = {h.params["classes"] for h in net.heads()} or {net.layers[-1].out_shape[0]}
    if len(names) not in expected:
        raise ConversionError(
            f"labels '{path}' | has {len(names)} names, the network has {sorted(expected)[0]} classes.",
            hint="pass the names file the model was trained with (e.g. coco.names for 80 classes).",
        )
    return names


# The 0.1 keywords of convert_darknet and the settings value each moved into.
_LEGACY = (
    MovedKeywords("export", ("input_size", "batch", "head", "opset", "opencv_threshold")),
    MovedKeywords("checks", ("oracle", "seed", "platforms")),
    MovedKeywords("checks", ("atol", "rtol"), nested="thresholds"),
)


@output_scope()  # the outputs it checks stay this run's until it returns
def _checked_settings(
    export: DarknetExportSettings, checks: VerifySettings, verify_backends: Sequence[str]
) -> int | None:
    """Every setting checked before any work: the head, the opset, the tolerances, OpenCV's threshold, the
    seed, the oracle against the backends; returns the batch size (None for a dynamic batch)."""
    head, opset, batch = export.head, export.opset, export.batch
    limits = checks.thresholds.of("f32")
    if head not in HEADS:
        raise ConversionError(
            f"head '{head}' | is not one of {', '.join(HEADS)}.",
            hint="raw keeps each YOLO layer's output; decoded emits one detections tensor.",
        )
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ConversionError(
            f"opset {opset} | the Darknet converter writes opsets {MIN_OPSET} to {MAX_OPSET}.",
            hint="use --opset 13 for the widest runtime support.",
        )
    check_tolerances(atol=limits.atol, rtol=limits.rtol)
    check_number(
        "--opencv-threshold", export.opencv_threshold, low=0.0, high=1.0, high_open=True, hint="OpenCV 4.x uses 0.2."
    )
    check_number("--seed", checks.seed, low=0, high=2**32 - 1, integer=True)
    oracle = check_oracle_choice(checks.oracle)
    if oracle not in ("auto", "none") and not verify_backends:
        raise UsageError(
            f"oracle '{oracle}' | asked for with no backends to verify, expected at least one backend.",
            hint="pass --verify-backends onnxruntime (or verify_backends=['onnxruntime']), or drop --oracle.",
        )
    if batch == "dynamic":
        return None
    try:
        batch_size = int(batch)
    except (TypeError, ValueError):
        batch_size = 0
    if not 0 < batch_size <= MAX_BATCH:
        raise ConversionError(
            f"batch '{batch}' | expected an integer from 1 to {MAX_BATCH}, or 'dynamic'.",
            hint="use --batch 1, or --batch dynamic to choose the batch at run time.",
        )
    return batch_size


def convert_darknet(
    cfg: str | os.PathLike[str],
    weights: str | os.PathLike[str],
    output: str | os.PathLike[str] = "model.onnx",
    export: DarknetExportSettings | None = None,
    checks: VerifySettings | None = None,
    *,
    labels: str | os.PathLike[str] | None = None,
    verify_backends: Sequence[str] = (DEFAULT_BACKEND,),
    keep_on_mismatch: bool = False,
    report_path: str | os.PathLike[str] | None = None,
    **legacy: object,
) -> ConversionReport:
    """Convert a Darknet model to ONNX and verify it.

    Args:
        cfg, weights: the Darknet ``.cfg`` and ``.weights``.
        output: the ``.onnx`` path; written atomically, only when verification passes.
        export: what graph to write (``DarknetExportSettings``: ``input_size``, ``batch``,
            ``head`` raw | decoded, ``opset`` 13 to 21, ``opencv_threshold``); default the cfg's size,
            batch 1, the raw head, opset 13.
        checks: how it is verified (``VerifySettings``): ``oracle`` — ``auto`` (OpenCV 4.x's importer
            if installed, else Darknet's own forward pass if its helper is already built, else
            ``unverified`` with the reason; never compiles anything), ``darknet`` (build
            ``deploykit.testing.darknet``'s helper if needed and run Darknet), ``opencv`` (OpenCV
            4.x's importer), ``none`` (backends compared only); ``thresholds`` (f32 atol/rtol,
            default 1e-4 / 1e-3); ``seed`` of the random verification image; ``platforms`` where
            ``verify_backends`` run (``host``, ``linux/arm64`` under emulation, or several; the
            oracle runs on the host).
        labels: a names file (one class per line) stored in the model's metadata.
        verify_backends: backends that run the result; empty to skip verification.
        keep_on_mismatch: write the file even when verification fails (the error is still raised).
        report_path: also write the report as JSON here, with the model: both or neither (a failed
            check writes neither unless ``keep_on_mismatch``; the error carries the report).
        **legacy: the keywords of 0.1 (``input_size``, ``batch``, ``head``, ``opset``,
            ``opencv_threshold``, ``oracle``, ``seed``, ``platforms``, ``atol``, ``rtol``): still taken
            in this release, with a ``DeprecationWarning`` naming ``export=DarknetExportSettings(...)``
            or ``checks=VerifySettings(...)``.

    Example:
        ``convert_darknet("yolov4-tiny.cfg", "yolov4-tiny.weights", "y.onnx", DarknetExportSettings(head="decoded"))``

    Raises:
        OutputError: an output path cannot be written, is one of the input files, or the model's
            is not named ``.onnx`` (before any work).
        UsageError: an unknown ``oracle``, or one named with no backends to verify.
        OracleError: ``darknet`` or ``opencv`` cannot run here or on this cfg (nothing is written).
        ParityError: verification failed.
    """
    export, checks = export or DarknetExportSettings(), checks or VerifySettings()
    if legacy:
        folded = fold_keywords("convert_darknet", legacy, {"export": export, "checks": checks}, _LEGACY)
        export, checks = folded["export"], folded["checks"]
    input_size, head, opset, opencv_threshold = export.input_size, export.head, export.opset, export.opencv_threshold
    batch_size = _checked_settings(export, checks, verify_backends)
    platforms = checks.platforms
    cfg_path, weights_path, output_path = Path(cfg), Path(weights), Path(output)
    check_outputs(
        {"output": output_path, "report": report_path},
        inputs={"cfg": cfg_path, "weights": weights_path, "labels": labels},
    )
    check_onnx_output(output_path)
    emulation_notes = platform_notes(platforms) if verify_backends else []  # an unprepared target fails here
    size = parse_size(input_size) if isinstance(input_size, str) else input_size
    start = time.perf_counter()
    net, native = load_networks(cfg_path, size)
    names = _labels(labels, net)
    with DarknetWeights(weights_path) as reader:
        reader.check_size(net)
        graph, lazy, heads = build_graph(net, reader, head=head, batch=batch_size, opencv_threshold=opencv_threshold)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="deploykit")
        model.ir_version = 8
        from deploykit._version import __version__

        model.producer_version = __version__
        for key, value in _metadata(net, heads, head, cfg_path, weights_path, names, opencv_threshold).items():
            entry = model.metadata_props.add()
            entry.key, entry.value = key, value
        with scratch_dir(output_path) as scratch:
            candidate = scratch / output_path.name
            size_bytes = write_streaming(model, lazy, candidate)
            export_seconds = time.perf_counter() - start
            report = ConversionReport(
                source=f"{cfg_path} + {weights_path}",
                output=str(output_path),
                converter="darknet",
                exporter="deploykit darknet",
                opset=opset,
                export_seconds=round(export_seconds, 3),
                file_size_bytes=size_bytes,
                parameter_count=net.parameter_count,
                op_histogram=_histogram(graph),
            )
            if verify_backends:
                gate_start = time.perf_counter()
                report.verdicts, report.oracle = verify(
                    candidate,
                    net,
                    heads,
                    cfg_path,
                    weights_path,
                    verify_backends,
                    (native.width, native.height),
                    export,
                    checks,
                    batch=batch_size or 1,
                )
                report.notes += [f"oracle: {report.oracle.name} — {report.oracle.detail}", *emulation_notes]
                report.gate_seconds = round(time.perf_counter() - gate_start, 3)
            report.written = report.passed or keep_on_mismatch
            if report.written:  # all or nothing: a failed verification writes no model and no report
                commit_outputs(
                    [(candidate, output_path)], {report_path: json.dumps(report.to_dict(), indent=2, default=str)}
                )
    if not report.passed:
        raise ParityError(
            f"Darknet → ONNX '{output_path.name}' | verification failed: {report.first_failure()}.",
            hint=report.failure_hint(
                kept=keep_on_mismatch,
                mismatch="Please report this with the cfg: it is a converter bug or an unsupported Darknet variant.",
            ),
        ).with_report(report)
    return report


def _histogram(graph: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))
