"""Independent oracles for a Darknet conversion: OpenCV 4.x's own Darknet importer, and Darknet
itself (Debian's ``libdarknet``). Each turns the oracle's output into the decoded-rows form
``[batch, N, 4 + 1 + classes]`` so any converted head (raw or decoded) can be compared with it.

The candidates (the converted ONNX on each backend) run in worker processes; the verdicts come
from the verification subsystem. Without either oracle the verdicts are ``unverified``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.convert.darknet.graph import DETECTIONS_NAME, INPUT_NAME
from deploykit.convert.darknet.layers import Network
from deploykit.verify.isolated import run_candidate
from deploykit.verify.metrics import OutputMetrics, compare_array, thresholds_for
from deploykit.verify.verdict import OracleInfo, Verdict, error_verdict, judge

# OpenCV's Darknet importer zeroes class scores at or below this ([region] layers use their thresh=).
OPENCV_SCORE_THRESHOLD = 0.2


def opencv_darknet_outputs(cfg: Path, weights: Path, image: np.ndarray) -> dict[str, np.ndarray] | None:
    """OpenCV 4.x's own Darknet forward pass, or None where OpenCV has no importer (OpenCV 5)."""
    try:
        import cv2
    except ImportError:
        return None
    if not hasattr(cv2.dnn, "readNetFromDarknet"):
        return None
    net = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    net.setInput(image)
    names = list(net.getUnconnectedOutLayersNames())
    return dict(zip(names, net.forward(names), strict=True))


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


def _libdarknet_rows(cfg: Path, weights: Path, image: np.ndarray, heads: list[dict[str, Any]]) -> np.ndarray:
    """Darknet's own head outputs on ``image``, decoded like ours (``decode_heads``)."""
    from deploykit.convert.darknet import reference
    from deploykit.vision.yolo import decode_heads

    raw = reference.darknet_outputs(cfg, weights, image, [h["layer"] for h in heads])
    named = [{**h, "output": f"{h['type']}_{h['layer']}"} for h in heads]
    return decode_heads({h["output"]: raw[h["layer"]].reshape(1, -1, *h["grid"]) for h in named}, named)


def _decoded(outputs: dict[str, np.ndarray], heads: list[dict[str, Any]], head: str) -> np.ndarray:
    from deploykit.vision.yolo import decode_heads

    return outputs[DETECTIONS_NAME] if head == "decoded" else decode_heads(outputs, heads)


def verify(
    candidate: Path,
    net: Network,
    heads: list[dict[str, Any]],
    head: str,
    cfg: Path,
    weights: Path,
    backends: Sequence[str],
    atol: float,
    rtol: float,
    seed: int,
    opencv_threshold: float | None,
    native_size: tuple[int, int],
) -> tuple[list[Verdict], OracleInfo]:
    """Run the converted model on each backend (a worker each) and judge it against OpenCV 4's
    importer, else Darknet itself, else (``unverified``) against the first backend that runs."""
    from deploykit.backends.registry import canonical_name, get_backend
    from deploykit.model import read_interface

    rng = np.random.default_rng(seed)
    image = rng.uniform(0, 1, (1, net.channels, net.height, net.width)).astype(np.float32)
    # a model converted with a fixed --batch N takes N images: the same one N times; item 0 is judged
    batch = next((d for d in (read_interface(candidate).inputs[0].shape or (1,))[:1] if isinstance(d, int)), 1)
    feeds = {INPUT_NAME: np.repeat(image, batch, axis=0)}
    runs = []
    for requested in backends:
        name = canonical_name(requested)
        backend = get_backend(name)
        run = run_candidate(candidate, name, backend.default_device, [feeds],
                            options=backend.precision_options("f32"), label=name)  # fmt: skip
        run.outputs = [{k: v[:1] for k, v in outputs.items()} for outputs in run.outputs]
        runs.append(run)
    limits = thresholds_for("f32", atol=atol, rtol=rtol)
    oracle, expected, opencv = _oracle(cfg, weights, image, heads, native_size, (net.width, net.height))
    verdicts: list[Verdict] = []
    reference: np.ndarray | None = None
    for run in runs:
        info = run.info or {}
        if not run.ok:
            verdicts.append(error_verdict(run.label, oracle, run.error or "did not run", device=info.get("device")))
            continue
        if not heads:  # a classifier cfg: raw outputs only, compared across backends
            outputs_ref = reference if reference is not None else None
            decoded = next(iter(run.outputs[0].values()))
        else:
            decoded = _decoded(run.outputs[0], heads, head)
            outputs_ref = expected
        if opencv is not None:
            metrics = _opencv_rows(decoded, opencv, heads, atol, rtol, opencv_threshold)
        else:
            if outputs_ref is None and reference is None:
                reference = decoded
                oracle = OracleInfo(run.label, False, oracle.detail)
            target = outputs_ref if outputs_ref is not None else reference
            assert target is not None
            metrics = [compare_array(DETECTIONS_NAME if heads else "output", decoded, target, limits, reduced=False)]
        verdicts.append(judge(run.label, metrics, oracle, limits, precision=info.get("precision") or "f32",
                              device=info.get("device")))  # fmt: skip
    return verdicts, oracle


# What pjreddie's Darknet (Debian's libdarknet) does not implement: it reads such cfgs without an
# error and computes something else, so it is no oracle for them.
_ALEXEYAB_ONLY = ("group_id", "scale_x_y", "new_coords", "mish", "swish", "hard_mish", "hardswish", "gelu", "[sam]",
                  "[scale_channels]", "[reorg3d]", "[local_avgpool]", "[implicit_", "[conv_lstm]")  # fmt: skip


def _beyond_pjreddie(cfg: Path) -> str | None:
    text = cfg.read_text(errors="replace").lower()
    found = sorted({word for word in _ALEXEYAB_ONLY if word in text})
    if found:
        return f"Debian's libdarknet (pjreddie's Darknet) does not implement {', '.join(found)} used by this cfg"
    return None


def _oracle(
    cfg: Path,
    weights: Path,
    image: np.ndarray,
    heads: list[dict[str, Any]],
    native_size: tuple[int, int],
    size: tuple[int, int],
) -> tuple[OracleInfo, np.ndarray | None, dict[str, np.ndarray] | None]:
    """(who, Darknet's decoded rows, OpenCV's per-head outputs): the first oracle that runs here."""
    reasons = []
    if native_size != size:
        reasons.append("OpenCV's importer decodes another input size than the cfg's differently")
    elif heads:
        try:
            outputs = opencv_darknet_outputs(cfg, weights, image)
        except Exception as exc:  # an OpenCV that cannot read this cfg is no oracle
            outputs = None
            reasons.append(f"OpenCV's Darknet importer failed on this cfg ({type(exc).__name__})")
        else:
            if outputs is None:
                reasons.append("OpenCV here has no Darknet importer (OpenCV 5 dropped it)")
        if outputs is not None:
            import cv2

            return OracleInfo(f"opencv-darknet {cv2.__version__}", True, "OpenCV's own Darknet importer"), None, outputs
    if heads:
        from deploykit.convert.darknet import reference

        problem = reference.unavailable_reason() or _beyond_pjreddie(cfg)
        if problem is None:
            try:
                rows = _libdarknet_rows(cfg, weights, image, heads)
                return OracleInfo("darknet", True, "Darknet's own forward pass (libdarknet)"), rows, None
            except Exception as exc:  # pjreddie's Darknet does not know every layer (mish, ...)
                reasons.append(f"libdarknet could not run this cfg ({str(exc)[:160]})")
        else:
            reasons.append(problem)
    detail = "no Darknet oracle ran: " + "; ".join(reasons or ["not a detector cfg"])
    return OracleInfo("none", False, detail + "; backends compared with each other"), None, None
