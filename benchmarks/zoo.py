"""A model zoo nobody here tuned on: torchvision and timm architectures, converted and compared on every backend.

Each architecture is random-initialised with realistic output scales (BatchNorm statistics
recomputed on random images, all-zero layers re-drawn), converted with ``convert_torch`` (its gate
runs every backend against PyTorch) and then checked with ``compare`` against onnx's reference
evaluator. Each architecture runs in its own subprocess with a time limit; one JSON line per
architecture, then a Markdown table of verdicts (pass / unverified / fail / degenerate / error).

torchvision and timm are not part of deploykit's pinned stack. The package index serves
torchvision 0.28.0 (the release for torch 2.13) only as a CUDA build, whose C++ ops (``nms``,
``roi_align``) do not load next to the CPU torch: ``import torchvision`` then fails with "operator
torchvision::nms does not exist", and timm imports torchvision. ``make zoo`` installs both, without
dependencies, into ``build/zoo``; this script defines the C++ ops' schemas before torchvision is
imported and gives ``nms`` a Python CPU kernel, so every architecture without ``roi_align``
(Faster R-CNN, Mask R-CNN) builds and exports (the ONNX export maps ``nms`` to NonMaxSuppression).

Run: ``make zoo`` (or ``PYTHONPATH=build/zoo .venv/bin/python benchmarks/zoo.py [NAME ...]``).
Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("onnxruntime", "openvino", "opencv", "ncnn")
TIMEOUT_S = 900

# name: (library, constructor name, input side, keyword arguments)
ZOO: dict[str, tuple[str, str, int, dict[str, Any]]] = {
    "mobilenet_v2": ("torchvision", "mobilenet_v2", 224, {}),
    "mobilenet_v3_small": ("torchvision", "mobilenet_v3_small", 224, {}),
    "mobilenet_v3_large": ("torchvision", "mobilenet_v3_large", 224, {}),
    "resnet18": ("torchvision", "resnet18", 224, {}),
    "resnet50": ("torchvision", "resnet50", 224, {}),
    "efficientnet_b0": ("torchvision", "efficientnet_b0", 224, {}),
    "shufflenet_v2_x1_0": ("torchvision", "shufflenet_v2_x1_0", 224, {}),
    "squeezenet1_1": ("torchvision", "squeezenet1_1", 224, {}),
    "mnasnet1_0": ("torchvision", "mnasnet1_0", 224, {}),
    "regnet_y_400mf": ("torchvision", "regnet_y_400mf", 224, {}),
    "convnext_tiny": ("torchvision", "convnext_tiny", 224, {}),
    "lraspp_mobilenet_v3_large": ("torchvision.segmentation", "lraspp_mobilenet_v3_large", 256,
                                  {"weights_backbone": None}),
    "deeplabv3_mobilenet_v3_large": ("torchvision.segmentation", "deeplabv3_mobilenet_v3_large", 256,
                                     {"weights_backbone": None, "aux_loss": False}),
    "ssdlite320_mobilenet_v3_large": ("torchvision.detection", "ssdlite320_mobilenet_v3_large", 320,
                                      {"weights_backbone": None}),
    "mobilevit_xxs": ("timm", "mobilevit_xxs", 256, {}),
    "efficientformerv2_s0": ("timm", "efficientformerv2_s0", 224, {}),
    "levit_128s": ("timm", "levit_128s", 224, {}),
    "tiny_vit_5m_224": ("timm", "tiny_vit_5m_224", 224, {}),
    "fastvit_t8": ("timm", "fastvit_t8", 256, {}),
    "repvit_m0_9": ("timm", "repvit_m0_9", 224, {}),
    "mobileone_s0": ("timm", "mobileone_s0", 224, {}),
    "ghostnet_100": ("timm", "ghostnet_100", 224, {}),
}  # fmt: skip

_TORCHVISION_OPS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, bool aligned) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
    "SymInt width) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, "
    "SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
    "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, "
    "SymInt groups, SymInt offset_groups, bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
)
_LIBRARIES: list[Any] = []


def _nms(dets: Any, scores: Any, iou_threshold: float) -> Any:
    """Greedy NMS as torchvision's CPU kernel computes it: indices kept, by decreasing score."""
    import torch

    order = scores.argsort(descending=True)
    x1, y1, x2, y2 = dets.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for position in range(len(order)):
        if suppressed[position]:
            continue
        i = order[position]
        keep.append(i)
        rest = order[position + 1 :]
        width = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
        height = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
        inter = width * height
        suppressed[position + 1 :] |= inter / (area[i] + area[rest] - inter) > iou_threshold
    return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long)


def import_torchvision() -> Any:
    """torchvision with its C++ ops' schemas defined here (its CUDA build's library cannot load)."""
    import torch

    try:
        import torchvision

        return torchvision
    except (RuntimeError, ImportError):
        for name in [m for m in sys.modules if m.startswith("torchvision")]:
            del sys.modules[name]
    library = torch.library.Library("torchvision", "DEF")
    for schema in _TORCHVISION_OPS:
        library.define(schema)
    library.impl("nms", _nms, "CPU")
    _LIBRARIES.append(library)
    import torchvision
    import torchvision.extension

    torchvision.extension._has_ops = _has_ops  # the schemas are here; only nms has a kernel
    return torchvision


def _has_ops() -> bool:
    """torchvision's check, answered yes (a def, not a lambda: TorchScript compiles it when tracing NMS)."""
    return True


def realistic(model: Any, side: int) -> Any:
    """Random weights with realistic scales: all-zero layers re-drawn, BatchNorm statistics recomputed."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if isinstance(module, (nn.Linear, nn.Conv2d)) and weight is not None and not weight.any():
                nn.init.normal_(weight, 0.0, 0.01)
        norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        model.eval()
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # a cumulative average over the passes below
            norm.train()
        for _ in range(4):
            model(torch.randn(2, 3, side, side))
        model.eval()
    return model


def build(name: str) -> tuple[Any, int]:
    library, constructor, side, kwargs = ZOO[name]
    torchvision = import_torchvision()
    if library == "timm":
        import timm

        model = timm.create_model(constructor, pretrained=False)
    else:
        namespace = torchvision.models
        for part in library.split(".")[1:]:
            namespace = getattr(namespace, part)
        model = getattr(namespace, constructor)(weights=None, **kwargs)
    return realistic(model, side), side


def run_one(name: str, scratch: Path) -> dict[str, Any]:
    """Convert one architecture (gate: every backend against PyTorch), then compare it against onnx-reference."""
    import torch

    from deploykit.convert.torch import TorchExportSettings, convert_torch
    from deploykit.errors import DeployKitError
    from deploykit.verify import VerifySettings, compare

    row: dict[str, Any] = {"model": name}
    started = time.perf_counter()
    model, side = build(name)
    row["parameters"] = sum(p.numel() for p in model.parameters())
    output = scratch / f"{name}.onnx"
    try:
        report = convert_torch(model, (torch.randn(1, 3, side, side),), output, verify_backends=BACKENDS,
                               export=TorchExportSettings(input_names=["images"]), keep_on_mismatch=True)  # fmt: skip
        row["convert"] = {v.candidate: v.status for v in report.verdicts}
        row["convert_notes"] = [n for n in report.notes if "proved little" in n]
    except DeployKitError as exc:
        row["convert"] = {"error": exc.message}
        report = getattr(exc, "report", None)
        if report is not None:
            row["convert"] = {v.candidate: v.status for v in report.verdicts}
            row["convert_reasons"] = {v.candidate: v.explanation for v in report.verdicts if v.status != "pass"}
    row["convert_seconds"] = round(time.perf_counter() - started, 1)
    if output.is_file():
        checked = compare(output, list(BACKENDS), VerifySettings(precision="f32"))
        row["oracle"] = checked.oracle.name
        row["compare"] = {v.candidate: v.status for v in checked.verdicts}
        row["compare_reasons"] = {v.candidate: v.explanation for v in checked.verdicts if v.status != "pass"}
    row["seconds"] = round(time.perf_counter() - started, 1)
    row["largest_worker_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per architecture, one column per backend: the gate's verdict / compare's verdict."""
    header = "| model | " + " | ".join(BACKENDS) + " | s |\n|---|" + "---|" * len(BACKENDS) + "---|"
    lines = [header]
    for row in rows:
        cells = []
        for backend in BACKENDS:
            gate = next((s for c, s in (row.get("convert") or {}).items() if c.startswith(backend)), "-")
            checked = next((s for c, s in (row.get("compare") or {}).items() if c.startswith(backend)), "-")
            cells.append(f"{gate} / {checked}")
        lines.append(f"| {row['model']} | " + " | ".join(cells) + f" | {row.get('seconds', '-')} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="architectures (default: all)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per architecture")
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="deploykit-zoo-") as scratch:
            print(json.dumps(run_one(args.one, Path(scratch))), flush=True)
        return 0
    rows = []
    started = time.perf_counter()
    for name in args.names or list(ZOO):
        try:
            done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True,
                                  timeout=args.timeout, env=os.environ.copy())  # fmt: skip
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"model": name, "error": done.stderr.strip()[-400:]}
        except subprocess.TimeoutExpired:
            row = {"model": name, "error": f"did not finish within {args.timeout:g} s"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{table(rows)}\n\nwall time {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
