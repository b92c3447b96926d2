"""``deploykit predict``: run a detection or classification model on an image, as an app would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.errors import UsageError
from deploykit.io import atomic_path, check_outputs, one_line
from deploykit.metadata import read_metadata
from deploykit.tasks import TASKS
from deploykit.validation import check_number

from . import options as opt
from .console import console, err_console
from .paths import file_out, path_in
from .predict_stream import StreamOutputs, check_draw, open_results, run_stream

if TYPE_CHECKING:
    from deploykit.tasks.base import ResultTable, Task


def _task(model: Path, task: str) -> str:
    """The task predict runs: ``--task``, else the bundle's, else the model's metadata (``deploykit.task``),
    else, deprecated and said on stderr, the task the task plug-ins recognise in the model's outputs."""
    if task != "auto":
        return task
    from deploykit.model import read_interface
    from deploykit.tasks.registry import pipeline_tasks

    if model.is_dir():  # a bundle says its task
        from deploykit.optimize.bundle import read_bundle

        bundle = read_bundle(model, verify=False)
        if bundle.manifest.task in pipeline_tasks():
            return bundle.manifest.task
        model = bundle.model_path

    interface = read_interface(model)
    stored = read_metadata(interface.metadata_props, Path(model).name).task
    if stored is not None:
        return stored
    return _recognised_task(Path(model).name, interface)


def _recognised_task(name: str, interface: Any) -> str:
    """A model whose metadata names no task: what the task plug-ins recognise in its outputs, with a deprecation
    line (the task is recognised from metadata; this fallback goes in the next minor release)."""
    from deploykit.tasks.registry import pipeline_tasks, recognise

    runnable = pipeline_tasks()
    found = recognise({spec.name: spec for spec in interface.outputs}, interface.metadata_props)
    if found is None or found.name not in runnable:
        raise UsageError(
            f"model '{name}' | names no task in its metadata (deploykit.task), and no task with an app pipeline "
            "recognises its outputs.",
            hint=f"pass --task ({' or '.join(runnable)}).",
        )
    err_console.print(
        f"warning: model '{name}' names no task in its metadata (deploykit.task); running it as '{found.name}', "
        f"recognised from its outputs, is deprecated. Pass --task {found.name}.",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )
    return found.name


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
        None,
        "--backend",
        "-b",
        help="Backend name or alias, or BACKEND:DEVICE (default: onnxruntime, or the bundle's choice).",
    ),
    device: opt.Device = None,
    task: str = typer.Option(
        "auto",
        help=f"auto (the model's metadata deploykit.task, or the bundle's task), or the task to run: one of "
        f"{', '.join(TASKS)} that has an app pipeline.",
    ),
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
    backend, device = opt.backend_and_device(backend, device)
    kind = _task(model, task)
    settings = {"labels": labels, "conf": conf, "iou": iou, "agnostic": agnostic, "imagenet": imagenet, "top_k": top_k}
    json_path = out if out is not None and out.rstrip("/").lower().endswith(".json") else None  # one image's JSON
    if engine != "local" or (out is not None and json_path is None and not out.endswith(".jsonl")):  # rows per image
        from deploykit.distributed import Execution

        from .fleet_cmd import predict_dataset

        # a bundle travels whole: deploykit.distributed opens its backend, device, precision and threads
        predict_dataset(
            model,
            _one_path(sources, "--output FOLDER"),
            out,
            Execution(engine=engine, address=address, actors=actors, cpus_per_actor=cpus_per_actor),
            task=kind,
            backend=backend,
            device=device,
            top_k=top_k,
            cli_options=settings,
        )
        return
    from deploykit.tasks.registry import pipeline_task

    plugin = pipeline_task(kind, "--task" if task != "auto" else f"model '{model.name}': task")
    if _one_image(sources) and (out is None or json_path is not None) and not as_json and max_frames is None:
        image = path_in(sources[0])
        _predict_image(model, image, plugin, backend, device, settings, draw_path, json_path, check)
        return
    if json_path is not None:
        raise UsageError(
            f"-o '{json_path}' | writes one JSON document for one image; videos, streams, many images and --json "
            "give one JSON line per frame.",
            hint="pass -o FILE.jsonl for a file, or --json for stdout.",
        )
    _predict_stream(
        model,
        sources,
        plugin,
        backend,
        device,
        settings,
        StreamOutputs(draw_path, "-" if as_json else out, show_fps),
        max_frames=max_frames,
        every=every,
        timeout_s=timeout,
    )


def _one_path(sources: list[str], what: str) -> Path:
    from deploykit.vision.sources import VIDEO_SUFFIXES

    if len(sources) != 1:
        raise UsageError(
            f"{what} | takes one folder (or URI) of images, got {len(sources)} sources.", hint="pass one folder."
        )
    path = path_in(sources[0])
    if path.suffix.lower() in VIDEO_SUFFIXES and path.is_file():  # it would be one row saying "not an image"
        raise UsageError(
            f"{what} | writes one row per image, and '{sources[0]}' is a video.",
            hint="pass -o FILE.jsonl for one JSON line per frame (or --json for stdout).",
        )
    return path


def _one_image(sources: list[str]) -> bool:
    """One source naming one existing file that is not a video: the one-image report (table, JSON document)."""
    from deploykit.vision.sources import VIDEO_SUFFIXES

    if len(sources) != 1 or "://" in sources[0]:
        return False
    path = Path(sources[0])
    return path.exists() and not path.is_dir() and path.suffix.lower() not in VIDEO_SUFFIXES


def _predict_stream(
    model: Path,
    sources: list[str],
    task: type[Task],
    backend: str | None,
    device: str | None,
    settings: dict[str, Any],
    outputs: StreamOutputs,
    *,
    max_frames: int | None,
    every: int,
    timeout_s: float,
) -> None:
    from deploykit.vision.sources import open_sources

    if outputs.json_lines not in (None, "-"):
        check_outputs({"--output": Path(outputs.json_lines)}, inputs={"model": model})
    opened = open_sources(sources, timeout_s=timeout_s)
    pipeline = results = None
    try:
        drawn = check_draw(outputs.draw, opened, task) if outputs.draw is not None else None
        pipeline = task.open_pipeline(model, backend, device, settings)
        if outputs.json_lines not in (None, "-"):
            results = open_results(Path(outputs.json_lines), pipeline, task, settings, sources, every, opened, drawn)
    except BaseException:
        for source in opened:
            source.close()
        if pipeline is not None:
            pipeline.close()
        raise
    skip = results.done if results is not None else None
    with pipeline:
        stream = pipeline.stream(opened, **task.call_options(settings), max_frames=max_frames, every=every, skip=skip)
        run_stream(stream, task, outputs, drawn, results)


def _predict_image(
    model: Path,
    image: Path,
    task: type[Task],
    backend: str | None,
    device: str | None,
    settings: dict[str, Any],
    draw_path: Path | None,
    json_text: str | None,
    check: bool,
) -> None:
    """One image: a table of its results, and the image drawn and the JSON document where asked."""
    json_path = file_out(json_text) if json_text is not None else None
    if draw_path is not None:
        _check_draw_format(draw_path)
    check_outputs(
        {"--draw": draw_path, "--output": json_path},
        inputs={"model": model, "image": image, "--labels": settings["labels"]},
    )
    with task.open_pipeline(model, backend, device, settings) as pipeline:
        results = pipeline(image, **task.call_options(settings))
        timing = pipeline.last_timing
        ran = pipeline.session.info.backend
    if draw_path is not None and task.drawing is not None:
        _draw_image(task, image, results, draw_path)
    elif draw_path is not None:
        err_console.print(
            f"warning: --draw | the {task.name} task draws nothing; no image was written.",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    console.print(_table(task.table(results, image.name, settings)))
    if timing is not None:
        console.print(f"pre {timing.pre_ms:.1f} ms, inference {timing.infer_ms:.1f} ms, post {timing.post_ms:.1f} ms")
    verdict = _check(model, image, backend, device) if check else None
    if json_path is not None:
        payload = {
            "model": str(model),
            "image": str(image),
            "task": task.name,
            "backend": ran,
            "results": task.to_json(results),
            "timing": timing.to_dict() if timing else None,
            "verdict": verdict.to_dict() if verdict else None,
        }
        with atomic_path(json_path) as temporary:
            temporary.write_text(json.dumps(payload, indent=2))
    if verdict is not None and verdict.blocking:
        raise typer.Exit(1)


def _table(result: ResultTable) -> Table:
    table = Table(title=Text(one_line(result.title, None)))
    for column in result.columns:
        table.add_column(column)
    for row in result.rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _draw_image(task: type[Task], image: Path, results: Any, draw_path: Path) -> None:
    import cv2

    from deploykit.vision.image import load_image

    ok, encoded = cv2.imencode(draw_path.suffix, task.draw(load_image(image), results))
    if not ok:
        raise UsageError(f"--draw '{draw_path}' | OpenCV cannot encode that format.", hint="use .jpg or .png.")
    with atomic_path(draw_path) as temporary:
        temporary.write_bytes(encoded.tobytes())


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
