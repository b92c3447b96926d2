"""Independent oracles for a Darknet conversion: OpenCV 4.x's own Darknet importer, and Darknet
itself (Debian's ``libdarknet``, through ``deploykit.testing.darknet``). Each turns the oracle's output
into the decoded-rows form ``[batch, N, 4 + 1 + classes]`` so any converted head (raw or decoded) can
be compared with it.

Which oracle runs is the caller's choice (``ORACLE_CHOICES``): ``auto`` asks OpenCV 4.x, then
Darknet only if its helper is already built (nothing is compiled unasked); ``opencv`` and ``darknet``
run that oracle or raise ``OracleError``; ``none`` runs none. The candidates (the converted ONNX on
each backend) run in worker processes; the verdicts come from the verification subsystem. Without an
oracle the verdicts are ``unverified`` and the oracle's detail says how to get one.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from deploykit.convert.darknet.graph import DETECTIONS_NAME, INPUT_NAME
from deploykit.convert.darknet.layers import Network
from deploykit.convert.darknet.settings import DarknetExportSettings
from deploykit.errors import OracleError, UsageError
from deploykit.verify.metrics import OutputMetrics, compare_array, thresholds_for
from deploykit.verify.settings import VerifySettings
from deploykit.verify.verdict import OracleInfo, Verdict, error_verdict, judge
from deploykit.workers import DEFAULT_TIMEOUT_S, read_arrays, run_worker, write_arrays

DarknetOracle = Literal["auto", "opencv", "darknet", "none"]
ORACLE_CHOICES: tuple[DarknetOracle, ...] = ("auto", "opencv", "darknet", "none")
_NO_OPENCV4 = "pip install 'opencv-python-headless<5' for OpenCV 4.x's importer"

OPENCV_ORACLE = "opencv-darknet"
"""How the OpenCV importer oracle is named in reports (``opencv-darknet <OpenCV version>``)."""

# OpenCV's Darknet importer zeroes class scores at or below this ([region] layers use their thresh=).
OPENCV_SCORE_THRESHOLD = 0.2


def opencv_darknet_outputs(
    cfg: Path, weights: Path, image: np.ndarray, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[dict[str, np.ndarray], str] | None:
    """OpenCV 4.x's own Darknet forward pass and OpenCV's version, or None where OpenCV has no
    importer (OpenCV 5). It runs in a worker process: a cfg that crashes OpenCV costs the oracle only.

    Raises:
        OracleError: OpenCV refused the cfg, crashed on it or did not finish within ``timeout_s``.
    """
    with tempfile.TemporaryDirectory(prefix="deploykit-opencv-darknet-") as directory:
        image_path, outputs_path = Path(directory) / "image.npz", Path(directory) / "outputs.npz"
        write_arrays(image_path, {"image": np.ascontiguousarray(image, dtype=np.float32)})
        job = {"cfg": str(cfg), "weights": str(weights), "image": str(image_path), "outputs": str(outputs_path)}
        outcome = run_worker("deploykit.convert.darknet.opencv_worker", job, timeout_s=timeout_s)
        result = outcome.result
        if result is None or result["status"] == "error":
            reason = outcome.error if result is None else result["error"]
            raise OracleError(
                f"OpenCV's Darknet importer | failed on '{Path(cfg).name}': {reason}.",
                hint="this cfg may use layers OpenCV's importer does not know.",
            )
        if result["status"] == "missing":
            return None
        return read_arrays(outputs_path), str(result["version"])


def _opencv_rows(
    decoded: np.ndarray,
    oracle: dict[str, np.ndarray],
    heads: list[dict[str, Any]],
    atol: float,
    rtol: float,
    threshold: float | None,
) -> list[OutputMetrics]:
    """Our decoded rows against OpenCV's per-head rows; OpenCV zeroes class scores ≤ its threshold,
    so where it reports 0 ours must be at most that threshold (unless we applied it too)."""
    limits = thresholds_for("f32", atol=atol, rtol=rtol)
    results: list[OutputMetrics] = []
    offset = 0
    for head in heads:
        h, w = head["grid"]
        count = h * w * len(head["anchors"])
        name = f"{head['type']}_{head['layer']}"
        expected = oracle.get(name)
        if expected is None:
            expected = list(oracle.values())[len(results)]
        expected = expected.reshape(decoded.shape[0], count, -1)
        ours = decoded[:, offset : offset + count].copy()
        offset += count
        if threshold is None:
            zeroed = expected[..., 5:] == 0
            above = ours[..., 5:] > head.get("opencv_threshold", OPENCV_SCORE_THRESHOLD) + atol
            if np.any(zeroed & above):
                metrics = compare_array(name, ours, expected, limits, reduced=False)
                metrics.passed, metrics.problem = False, "OpenCV zeroed a class score above its threshold"
                results.append(metrics)
                continue
            ours[..., 5:][zeroed] = 0.0
        results.append(compare_array(name, ours, expected, limits, reduced=False))
    return results


def _decoded(outputs: dict[str, np.ndarray], heads: list[dict[str, Any]], head: str) -> np.ndarray:
    from deploykit.vision.yolo import decode_heads

    return outputs[DETECTIONS_NAME] if head == "decoded" else decode_heads(outputs, heads)


def check_oracle_choice(oracle: str) -> DarknetOracle:
    """``oracle`` as one of ``ORACLE_CHOICES``, or a ``UsageError`` naming them."""
    for choice in ORACLE_CHOICES:
        if oracle == choice:
            return choice
    raise UsageError(
        f"oracle '{oracle}' | is not one of {', '.join(ORACLE_CHOICES)}.",
        hint="auto: OpenCV 4.x's importer, else Darknet if its helper is built; darknet: build and run "
        "Darknet's own forward pass; opencv: OpenCV 4.x's importer; none: compare the backends only.",
    )


@dataclass
class OracleOutputs:
    """What the chosen oracle computed, in the form ``verify`` compares.

    Attributes:
        info: who computed it, whether that is independent, and (without an oracle) why none ran.
        rows: Darknet's decoded rows (a detector) or its final output (a classifier), or, without an
            oracle, the first backend's, which the others are compared with.
        opencv: OpenCV's outputs per head, by layer name.
    """

    info: OracleInfo
    rows: np.ndarray | None = None
    opencv: dict[str, np.ndarray] | None = None


def _cfg_at_size(cfg: Path, directory: Path, size: tuple[int, int]) -> Path:
    """A copy of ``cfg`` whose [net] section says width, height = ``size``: Darknet runs any size its cfg says."""
    text = cfg.read_text(errors="replace")
    after_net = re.search(r"(?im)^\s*\[(?!net\]|network\])", text)
    end = after_net.start() if after_net else len(text)
    net = re.sub(r"(?im)^(\s*width\s*=).*$", rf"\g<1>{size[0]}", text[:end])
    net = re.sub(r"(?im)^(\s*height\s*=).*$", rf"\g<1>{size[1]}", net)
    path = directory / cfg.name
    path.write_text(net + text[end:])
    return path


def _darknet_rows(
    cfg: Path, weights: Path, image: np.ndarray, heads: list[dict[str, Any]], net: Network, native_size: tuple[int, int]
) -> np.ndarray:
    """Darknet's own outputs on ``image``: the heads decoded like ours (``decode_heads``), or a
    classifier's final output as one row."""
    from deploykit.testing.darknet import darknet_outputs
    from deploykit.vision.yolo import decode_heads

    layers = [h["layer"] for h in heads] or [net.layers[-1].index]
    with tempfile.TemporaryDirectory(prefix="deploykit-oracle-") as directory:
        size = (net.width, net.height)
        raw = darknet_outputs(
            cfg if size == native_size else _cfg_at_size(cfg, Path(directory), size),
            weights,
            image,
            layers,
            network=net,
        )
    if not heads:
        return raw[layers[0]].reshape(1, -1)
    named = [{**h, "output": f"{h['type']}_{h['layer']}"} for h in heads]
    return decode_heads({h["output"]: raw[h["layer"]].reshape(1, -1, *h["grid"]) for h in named}, named)


def _opencv(
    cfg: Path, weights: Path, image: np.ndarray, heads: list[dict[str, Any]], same_size: bool
) -> tuple[OracleOutputs | None, str]:
    """OpenCV 4.x's importer on ``image``, or (None, why it cannot be the oracle)."""
    if not heads:
        return None, "OpenCV's importer is compared on detector heads, and this cfg has none"
    if not same_size:
        return None, "OpenCV's importer decodes another input size than the cfg's differently"
    try:
        found = opencv_darknet_outputs(cfg, weights, image)
    except OracleError as exc:  # an OpenCV that cannot read this cfg is no oracle
        return None, f"OpenCV's Darknet importer could not run this cfg ({exc.problem[:200]})"
    if found is None:
        return None, f"OpenCV here has no Darknet importer (OpenCV 5 dropped it; {_NO_OPENCV4})"
    outputs, version = found
    info = OracleInfo(f"{OPENCV_ORACLE} {version}", True, "OpenCV's own Darknet importer, in a worker process")
    return OracleOutputs(info, opencv=outputs), ""


def _darknet(
    choice: DarknetOracle,
    cfg: Path,
    weights: Path,
    image: np.ndarray,
    heads: list[dict[str, Any]],
    net: Network,
    native_size: tuple[int, int],
) -> tuple[OracleOutputs | None, str]:
    """Darknet's own forward pass, or (None, why not). ``auto`` never compiles the helper;
    ``darknet`` builds it when needed and raises ``OracleError`` when it cannot run."""
    from deploykit.testing import darknet

    problem = darknet.unsupported_reason(cfg)
    if choice == "darknet":
        if problem:
            raise OracleError(
                f"oracle 'darknet' | {problem}, expected a cfg of the layers pjreddie's Darknet knows (YOLOv2/v3).",
                hint=f"use --oracle opencv ({_NO_OPENCV4}), or --oracle auto to convert unverified.",
            )
        rows = _darknet_rows(cfg, weights, image, heads, net, native_size)  # build errors reach the user
    else:
        problem = problem or darknet.unavailable_reason()
        if problem:
            return None, problem
        if not darknet.is_built():
            return None, (
                f"Darknet's own forward pass is not built here: pass --oracle darknet (oracle='darknet') "
                f"to build it into {darknet.cache_dir()}"
            )
        try:
            rows = _darknet_rows(cfg, weights, image, heads, net, native_size)
        except OracleError as exc:  # pjreddie's Darknet does not run every cfg
            return None, f"libdarknet could not run this cfg ({exc.message[:200]})"
    return OracleOutputs(OracleInfo("darknet", True, "Darknet's own forward pass (libdarknet)"), rows=rows), ""


def oracle_outputs(
    choice: DarknetOracle,
    cfg: Path,
    weights: Path,
    image: np.ndarray,
    heads: list[dict[str, Any]],
    net: Network,
    native_size: tuple[int, int],
) -> OracleOutputs:
    """The chosen oracle's outputs on ``image``; without one, why none ran (``info.detail``).

    Raises:
        OracleError: ``opencv`` or ``darknet`` was asked for and cannot run here or on this cfg.
    """
    if choice == "none":
        return OracleOutputs(
            OracleInfo("none", False, "no oracle asked for (oracle 'none'); backends compared with each other")
        )
    reasons = []
    if choice in ("auto", "opencv"):
        found, reason = _opencv(cfg, weights, image, heads, native_size == (net.width, net.height))
        if found:
            return found
        if choice == "opencv":
            raise OracleError(
                f"oracle 'opencv' | {reason}, expected OpenCV 4.x's readNetFromDarknet to run this cfg.",
                hint=f"{_NO_OPENCV4}, or use --oracle darknet or --oracle auto.",
            )
        reasons.append(reason)
    found, reason = _darknet(choice, cfg, weights, image, heads, net, native_size)
    if found:
        return found
    reasons.append(reason)
    detail = "no Darknet oracle ran: " + "; ".join(reasons) + "; backends compared with each other"
    return OracleOutputs(OracleInfo("none", False, detail))


def verify(
    candidate: Path,
    net: Network,
    heads: list[dict[str, Any]],
    cfg: Path,
    weights: Path,
    backends: Sequence[str],
    native_size: tuple[int, int],
    export: DarknetExportSettings,
    checks: VerifySettings,
    *,
    batch: int = 1,
) -> tuple[list[Verdict], OracleInfo]:
    """Run the converted model on each backend (a worker each) and judge it against the oracle
    chosen (``checks.oracle``, ``oracle_outputs``); without one, (``unverified``) against the first
    backend that runs. ``export`` is how the candidate was written (its head, OpenCV's threshold);
    ``checks`` holds the f32 tolerances, the seed of the random image and the platforms
    (``host,linux/arm64``: each backend on each platform; the oracle runs on the host).
    ``batch``: the candidate's fixed batch (1 for a dynamic one), as the converter built it.

    Raises:
        OracleError: ``opencv`` or ``darknet`` was asked for and cannot run (before any backend runs).
    """
    from deploykit.verify.check import gate_candidates, run_on_platform

    head, opencv_threshold, oracle = export.head, export.opencv_threshold, check_oracle_choice(checks.oracle)
    rng = np.random.default_rng(checks.seed)
    image = rng.uniform(0, 1, (1, net.channels, net.height, net.width)).astype(np.float32)
    reference = oracle_outputs(oracle, cfg, weights, image, heads, net, native_size)
    # a model converted with a fixed --batch N takes N images: the same one N times; item 0 is judged
    feeds = {INPUT_NAME: np.repeat(image, batch, axis=0)}
    limits = checks.thresholds.of("f32")
    verdicts: list[Verdict] = []
    for spec, label in gate_candidates(backends, "f32", checks.platforms):
        run = run_on_platform(candidate, spec, [feeds], checks.timeout_s, checks.isolate, label)
        info = run.info or {}
        if not run.ok:
            verdicts.append(
                error_verdict(
                    run.label, reference.info, run.error or "did not run", device=info.get("device"), hint=run.hint
                )
            )
            continue
        first = {key: value[:1] for key, value in run.outputs[0].items()}
        ours = _decoded(first, heads, head) if heads else next(iter(first.values()))
        if reference.opencv is not None:
            metrics = _opencv_rows(ours, reference.opencv, heads, limits.atol, limits.rtol, opencv_threshold)
        else:
            rows = reference.rows
            if rows is None:  # no oracle: the first backend that runs is what the others must match
                rows = ours
                reference = OracleOutputs(OracleInfo(run.label, False, reference.info.detail), rows=rows)
            # Darknet's classifier output comes flat; another size fails below as a shape mismatch
            expected = rows.reshape(ours.shape) if rows.size == ours.size else rows
            metrics = [compare_array(DETECTIONS_NAME if heads else "output", ours, expected, limits, reduced=False)]
        verdicts.append(
            judge(
                run.label,
                metrics,
                reference.info,
                limits,
                precision=info.get("precision") or "f32",
                device=info.get("device"),
            )
        )
    return verdicts, reference.info
