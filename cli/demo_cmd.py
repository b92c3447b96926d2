"""``deploykit demo``: the whole job on embedded models, no downloads.

1. export a pretrained PyTorch classifier (MobileNetV2, ImageNet weights from a package) behind
   the parity gate on every backend; 2. convert a Darknet YOLO cfg with generated weights and
   check it against Darknet itself where its library is installed; 3. classify a real photo;
   4. benchmark both models on every available backend; 5. write the report. A missing optional
   part skips its step with a one-line reason.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.markup import escape

from deploykit.errors import DeployKitError

from .console import console

PHOTO = Path("/usr/share/darknet/data/eagle.jpg")


def _step(number: int, text: str) -> None:
    console.print(f"\n[bold cyan][{number}/5][/] {text}")


def _skip(reason: str) -> None:
    console.print(f"  [yellow]skipped[/]: {escape(reason)}")


def _parity_line(report: Any) -> str:
    return ", ".join(f"{p.backend} {'pass' if p.passed else 'FAIL'}" for p in report.parity)


def _darknet_check(model: Path, cfg: Path, weights: Path) -> str:
    """Compare the converted model with Darknet's own forward pass; a sentence saying how it went."""
    import onnx

    import deploykit
    from deploykit.convert.darknet import reference
    from deploykit.convert.darknet.convert import load_network
    from deploykit.vision.yolo import decode_heads

    reason = reference.unavailable_reason()
    if reason:
        return f"Darknet reference not run: {reason}"
    net = load_network(cfg)
    heads = json.loads({p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
                       ["deploykit.darknet.heads"])  # fmt: skip
    image = np.random.default_rng(0).uniform(0, 1, (1, 3, net.height, net.width)).astype(np.float32)
    raw = reference.darknet_outputs(cfg, weights, image, [h["layer"] for h in heads])
    heads = [{**h, "output": f"{h['type']}_{h['layer']}"} for h in heads]  # decoded models name them all "detections"
    expected = decode_heads({h["output"]: raw[h["layer"]].reshape(1, -1, *h["grid"]) for h in heads}, heads)
    with deploykit.load(model) as session:
        ours = session.run({"images": image})["detections"]
    error = float(np.max(np.abs(ours - expected) / np.maximum(np.abs(expected), 1.0)))
    verdict = "[green]matches[/]" if error <= 1e-3 else "[red]DIFFERS from[/]"
    return f"{verdict} Darknet's own forward pass (libdarknet): max error {error:.1e} over {ours.size:,} values"


def demo(
    directory: Path = typer.Option(
        None, "--dir", help="Where to write models and the report (default: a new temp dir)."
    ),
    iterations: int = typer.Option(30, min=1, help="Timed runs per backend in the benchmark."),
) -> None:
    """Convert → verify → classify → benchmark → report, on embedded models (no downloads)."""
    from deploykit.bench.runner import benchmark
    from deploykit.recipes import build, get_recipe

    started = time.perf_counter()
    workdir = directory or Path(tempfile.mkdtemp(prefix="deploykit-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    console.print(f"deploykit demo in {workdir}")
    models: list[Path] = []

    _step(1, "PyTorch → ONNX: MobileNetV2 with torchvision's ImageNet weights, parity-gated on every backend")
    classifier_path = workdir / "mobilenet_v2.onnx"
    recipe = get_recipe("mobilenet_v2")
    if recipe.unavailable_reason():
        _skip(recipe.unavailable_reason() or "")
    else:
        try:
            report = build(recipe, classifier_path)
            console.print(f"  wrote {classifier_path.name}: {report.parameter_count:,} parameters, {report.exporter} "
                          f"exporter, opset {report.opset}, export {report.export_seconds:.1f} s; parity: "
                          f"{_parity_line(report)}")  # fmt: skip
            models.append(classifier_path)
        except DeployKitError as exc:
            _skip(str(exc))

    _step(2, "Darknet → ONNX: YOLOv3-tiny cfg from models/, generated weights, checked against Darknet")
    detector_path = workdir / "yolov3-tiny.onnx"
    try:
        from deploykit.convert.darknet.convert import load_network
        from deploykit.convert.darknet.weights import write_random_weights

        yolo = get_recipe("yolov3-tiny")
        cfg = yolo.file(yolo.source["cfg"])
        weights = workdir / "yolov3-tiny.weights"
        write_random_weights(load_network(cfg), weights, seed=0)
        report = build(yolo, detector_path, weights=weights)
        console.print(f"  wrote {detector_path.name}: {report.parameter_count:,} parameters in "
                      f"{report.export_seconds:.2f} s; parity: {_parity_line(report)}")  # fmt: skip
        console.print(f"  {_darknet_check(detector_path, cfg, weights)}")
        models.append(detector_path)
    except DeployKitError as exc:
        _skip(str(exc))

    _step(3, f"Classify a real photo ({PHOTO.name} from Debian's darknet package)")
    if classifier_path not in models:
        _skip("no classifier (step 1 was skipped)")
    elif not PHOTO.is_file():
        _skip(f"{PHOTO} is not installed (apt-get install darknet)")
    else:
        import deploykit

        with deploykit.Classifier(classifier_path) as classifier:
            top = classifier(PHOTO, top_k=3)
            timing = classifier.last_timing
        split = f"  (pre {timing.pre_ms:.1f} ms, inference {timing.infer_ms:.1f} ms)" if timing else ""
        console.print("  " + ", ".join(f"{c.label} {c.score:.1%}" for c in top) + split)

    _step(4, "Benchmark every model on every available backend (each configuration in its own process)")
    results = []
    for model in models:
        console.print(f"  {model.name} …")
        result = benchmark(model, iterations=iterations, warmup=3)
        results.append(result)
        console.print(result.table())

    _step(5, "Report")
    if not results:
        _skip("nothing was benchmarked")
        return
    from deploykit.bench.html import render_html
    from deploykit.io import atomic_path

    report_dir = workdir / "report"
    report_dir.mkdir(exist_ok=True)
    for result in results:
        stem = Path(result.data["model"]["path"]).stem
        result.to_json(report_dir / f"{stem}.json")
        result.to_markdown(report_dir / f"{stem}.md")
    with atomic_path(report_dir / "report.html") as temporary:
        temporary.write_text(render_html(results))
    for result in results:
        recommendation = result.data["recommendation"]
        if recommendation:
            console.print(f"  {Path(result.data['model']['path']).name}: fastest with matching outputs is "
                          f"{recommendation['label']} → {recommendation['python']}")  # fmt: skip
    console.print(f"  report: {report_dir / 'report.html'} (JSON and Markdown beside it)")
    console.print(f"\ndone in {time.perf_counter() - started:.0f} s")
