"""``deploykit predict``: run a detection or classification model on an image, as an app would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.errors import UsageError
from deploykit.io import atomic_path, check_outputs, one_line
from deploykit.metadata import read_metadata
from deploykit.validation import check_number

from . import options as opt
from .console import console
from .paths import file_out, path_in
from .predict_stream import StreamOutputs, check_draw, open_results, run_stream


def _task(model: Path, task: str) -> str:
    if task != "auto":
        return task
    from deploykit.model import read_interface

    if model.is_dir():  # a bundle says its task
        from deploykit.optimize.bundle import read_bundle

        bundle = read_bundle(model, verify=False)
        if bundle.manifest.task in ("detect", "classify"):
            return bundle.manifest.task
        model = bundle.model_path

    interface = read_interface(model)
    stored = read_metadata(interface.metadata_props, Path(model).name).task
    if stored is not None:
        return stored
    outputs = interface.outputs
    shape = outputs[0].shape if len(outputs) == 1 else None
    if shape is not None and (len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1))):
        return "classify"
    return "detect"


def _check_draw_format(path: Path) -> None:
    """Refuse a --draw path whose extension OpenCV cannot encode, before any work."""
    import cv2

    if not path.suffix or not cv2.haveImageWriter(str(path)):
        raise UsageError(
            f"--draw '{path}' | OpenCV cannot write images with extension '{path.suffix or '(none)'}'.",
            hint="use .jpg or .png (also .bmp, .tiff, .webp).",
        )


def predict(
    model: Path = typer.Argument(
        ..., parser=path_in, help="The .onnx file, or a bundle folder (deploykit optimize -o)."
    ),
    sources: list[str] = typer.Argument(
        ...,
        help="Image or video files, folders, quoted globs ('photos/*.jpg'), camera indices (0, /dev/video0), "
        "rtsp:// or http(s):// URLs (streams or images).",
        show_default=False,
    ),
    backend: str = typer.Option(
        None, "--backend", "-b", help="Backend name or alias (default: onnxruntime, or the bundle's choice)."
    ),
    device: opt.Device = None,
    task: str = typer.Option("auto", help="auto | detect | classify (auto reads the model's metadata)."),
    labels: Path = typer.Option(None, parser=path_in, help="Class names file (default: from the model's metadata)."),
    conf: float = typer.Option(0.25, parser=opt.FRACTION, help="Detection: minimum score."),
    iou: float = typer.Option(0.45, parser=opt.FRACTION, help="Detection: NMS IoU threshold."),
    agnostic: bool = typer.Option(False, "--agnostic", help="Detection: NMS across classes."),
    top_k: int = typer.Option(5, "--top-k", parser=opt.COUNT, help="Classification: how many classes to show."),
    imagenet: bool = typer.Option(
        False, "--imagenet", help="Classification: ImageNet mean/std (default: the model's metadata, else none)."
    ),
    draw_path: Path = typer.Option(
        None,
        "--draw",
        readable=False,
        parser=path_in,
        help="Detection: draw boxes into this image file; a video's frames into a video (.mp4, .avi, .mkv); "
        "many images into this folder.",
    ),
    as_json: opt.Json = False,
    max_frames: int = typer.Option(
        None, "--max-frames", parser=opt.COUNT, help="Stop after this many frames (all sources together)."
    ),
    every: int = typer.Option(1, "--every", parser=opt.COUNT, help="Take every N-th frame of each source."),
    show_fps: bool = typer.Option(False, "--show-fps", help="Show the running FPS on each frame's line."),
    timeout: float = typer.Option(
        10.0,
        "--timeout",
        metavar="DURATION",
        parser=opt.Duration(),
        help="How long a URL or camera may take to open, or to send its next frame (10s, 500ms).",
    ),
    engine: str = typer.Option("local", "--engine", help="local | ray: with --output, where a folder of images runs."),
    address: str = typer.Option(
        None, "--address", parser=opt.ray_address, help="--engine ray: cluster to join (default: a local Ray)."
    ),
    actors: int = typer.Option(
        None, "--actors", parser=opt.COUNT, help="--engine ray: actors (default: cluster CPUs / per actor)."
    ),
    cpus_per_actor: float = typer.Option(
        None,
        "--cpus-per-actor",
        parser=opt.Number(low=0, low_open=True, high=4096),
        help="--engine ray: CPUs (= threads) per actor (default 1, or the bundle's threads).",
    ),
    out: str = typer.Option(
        None,
        "--output",
        "-o",
        help="FILE.jsonl: one JSON line per frame; FILE.json: one image's JSON document; a folder (or URI): "
        "one JSON row per image (resumable).",
    ),
    check: bool = typer.Option(
        False, "--check", help="Also verify this backend/device on the image against onnx's reference evaluator."
    ),
) -> None:
    """Detect objects or classify images, videos, cameras and streams; print the results (and draw/save them)."""
    from deploykit.vision.pipelines import check_thresholds

    check_thresholds(conf=conf, iou=iou, prefix="--")
    check_number("--top-k", top_k, low=1, integer=True, hint="ask for 1 or more classes, e.g. --top-k 5.")
    check_number("--max-frames", max_frames, low=1, integer=True, hint="a positive number of frames, e.g. 100.")
    check_number("--every", every, low=1, integer=True, hint="1 takes every frame, 2 every second one ...")
    kind = _task(model, task)
    json_path = out if out is not None and out.rstrip("/").lower().endswith(".json") else None  # one image's JSON
    if engine != "local" or (out is not None and json_path is None and not out.endswith(".jsonl")):  # rows per image
        from .fleet_cmd import predict_dataset

        # a bundle travels whole: deploykit.distributed opens its backend, device, precision and threads
        cli_options = {"labels": labels, "conf": conf, "iou": iou, "agnostic": agnostic, "imagenet": imagenet}
        predict_dataset(model, _one_path(sources, "--output FOLDER"), out, task=kind, engine=engine,
                        address=address, actors=actors, cpus_per_actor=cpus_per_actor, backend=backend,
                        device=device, top_k=top_k, cli_options=cli_options)  # fmt: skip
        return
    if kind not in ("detect", "classify"):
        raise UsageError(f"task '{task}' | is not auto, detect or classify.", hint="e.g. --task detect.")
    settings = {"labels": labels, "conf": conf, "iou": iou, "agnostic": agnostic, "imagenet": imagenet,
                "top_k": top_k}  # fmt: skip
    if _one_image(sources) and (out is None or json_path is not None) and not as_json and max_frames is None:
        image = path_in(sources[0])
        _predict_image(model, image, kind, backend, device, settings, draw_path, json_path, check)
        return
    if json_path is not None:
        raise UsageError(
            f"-o '{json_path}' | writes one JSON document for one image; videos, streams, many images and --json "
            "give one JSON line per frame.",
            hint="pass -o FILE.jsonl for a file, or --json for stdout.",
        )
    _predict_stream(model, sources, kind, backend, device, settings,
                    StreamOutputs(draw_path, "-" if as_json else out, show_fps),
                    max_frames=max_frames, every=every, timeout_s=timeout)  # fmt: skip


def _one_path(sources: list[str], what: str) -> Path:
    if len(sources) != 1:
        raise UsageError(f"{what} | takes one folder (or URI) of images, got {len(sources)} sources.",
                         hint="pass one folder.")  # fmt: skip
    return path_in(sources[0])


def _one_image(sources: list[str]) -> bool:
    """One source naming one existing file that is not a video: the one-image report (table, JSON document)."""
    from deploykit.vision.sources import VIDEO_SUFFIXES

    if len(sources) != 1 or "://" in sources[0]:
        return False
    path = Path(sources[0])
    return path.exists() and not path.is_dir() and path.suffix.lower() not in VIDEO_SUFFIXES


def _pipeline(model: Path, kind: str, backend: str | None, device: str | None, settings: dict[str, Any]) -> Any:
    import deploykit
    from deploykit.vision.preprocess import IMAGENET_MEAN, IMAGENET_STD

    if kind == "detect":
        return deploykit.Detector(model, backend, device, labels=settings["labels"], conf=settings["conf"],
                                  iou=settings["iou"], agnostic=settings["agnostic"])  # fmt: skip
    imagenet = settings["imagenet"]
    preprocess = deploykit.PreprocessOverrides(mean=IMAGENET_MEAN, std=IMAGENET_STD) if imagenet else None
    return deploykit.Classifier(model, backend, device, labels=settings["labels"], preprocess=preprocess)


def _predict_stream(
    model: Path, sources: list[str], kind: str, backend: str | None, device: str | None, settings: dict[str, Any],
    outputs: StreamOutputs, *, max_frames: int | None, every: int, timeout_s: float,
) -> None:  # fmt: skip
    from deploykit.vision.sources import open_sources

    if outputs.json_lines not in (None, "-"):
        check_outputs({"--output": Path(outputs.json_lines)}, inputs={"model": model})
    opened = open_sources(sources, timeout_s=timeout_s)
    pipeline = results = None
    try:
        drawn = check_draw(outputs.draw, opened, kind) if outputs.draw is not None else None
        pipeline = _pipeline(model, kind, backend, device, settings)
        if outputs.json_lines not in (None, "-"):
            results = open_results(Path(outputs.json_lines), pipeline, kind, settings, sources, every, opened, drawn)
    except BaseException:
        for source in opened:
            source.close()
        if pipeline is not None:
            pipeline.close()
        raise
    skip = results.done if results is not None else None
    with pipeline:
        if kind == "detect":
            stream = pipeline.stream(opened, max_frames=max_frames, every=every, skip=skip)
        else:
            stream = pipeline.stream(opened, top_k=settings["top_k"], max_frames=max_frames, every=every, skip=skip)
        run_stream(stream, outputs, drawn, results)


def _predict_image(
    model: Path, image: Path, kind: str, backend: str | None, device: str | None, settings: dict[str, Any],
    draw_path: Path | None, json_text: str | None, check: bool,
) -> None:  # fmt: skip
    """One image: a table of its results, and the image drawn and the JSON document where asked."""
    import deploykit

    json_path = file_out(json_text) if json_text is not None else None
    if draw_path is not None:
        _check_draw_format(draw_path)
    check_outputs({"--draw": draw_path, "--output": json_path},
                  inputs={"model": model, "image": image, "--labels": settings["labels"]})  # fmt: skip
    top_k = settings["top_k"]
    if kind == "detect":
        with _pipeline(model, kind, backend, device, settings) as detector:
            detections = detector(image)
            timing = detector.last_timing
            ran = detector.session.info.backend
        table = Table(title=f"{len(detections)} detections in {image.name}")
        for column in ("label", "score", "x1", "y1", "x2", "y2"):
            table.add_column(column)
        for d in detections:
            table.add_row(Text(one_line(d.label)), f"{d.score:.3f}", *(f"{v:.1f}" for v in d.xyxy))
        results = [d.to_dict() for d in detections]
        if draw_path is not None:
            import cv2

            from deploykit.vision.image import load_image

            drawn = deploykit.draw(load_image(image), detections)
            ok, encoded = cv2.imencode(draw_path.suffix, drawn)
            if not ok:
                raise UsageError(f"--draw '{draw_path}' | OpenCV cannot encode that format.", hint="use .jpg or .png.")
            with atomic_path(draw_path) as temporary:
                temporary.write_bytes(encoded.tobytes())
    else:
        with _pipeline(model, kind, backend, device, settings) as classifier:
            classes = classifier(image, top_k=top_k)
            timing = classifier.last_timing
            ran = classifier.session.info.backend
        table = Table(title=f"top {top_k} for {image.name}")
        for column in ("rank", "label", "class", "probability"):
            table.add_column(column)
        for rank, c in enumerate(classes, start=1):
            table.add_row(str(rank), Text(one_line(c.label)), str(c.class_id), f"{c.score:.4f}")
        results = [c.to_dict() for c in classes]
    console.print(table)
    if timing is not None:
        console.print(f"pre {timing.pre_ms:.1f} ms, inference {timing.infer_ms:.1f} ms, post {timing.post_ms:.1f} ms")
    verdict = _check(model, image, backend, device) if check else None
    if json_path is not None:
        payload = {"model": str(model), "image": str(image), "task": kind, "backend": ran, "results": results,
                   "timing": timing.to_dict() if timing else None,
                   "verdict": verdict.to_dict() if verdict else None}  # fmt: skip
        with atomic_path(json_path) as temporary:
            temporary.write_text(json.dumps(payload, indent=2))
    if verdict is not None and verdict.blocking:
        raise typer.Exit(1)


def _check(model: Path, image: Path, backend: str | None, device: str | None) -> Any:
    """The backend's outputs on this image against the independent oracle; the verdict, printed."""
    from deploykit.verify import VerifySettings, compare

    if model.is_dir():  # a bundle: its model file on its backend and device
        from deploykit.optimize.bundle import read_bundle

        bundle = read_bundle(model)
        model, backend, device = bundle.model_path, bundle.manifest.backend, bundle.manifest.device
    backend = backend or DEFAULT_BACKEND
    spec = f"{backend}:{device}" if device else backend
    report = compare(model, [spec], VerifySettings(precision=None), inputs=image)
    verdict = report.verdicts[0]
    console.print(f"check: {verdict.describe()}", soft_wrap=True)
    return verdict
