"""``deploykit predict`` on videos, cameras, stream URLs and many images: the frame loop of the CLI.

Results stream as they come: one line per frame on the terminal, one JSON line per frame with
``--json -`` (stdout) or ``-o FILE.jsonl``, an annotated video or folder with ``--draw``. Whatever was
written is complete when the run ends early: Ctrl-C exits 130, SIGTERM 143, a damaged video 1, each
after finalising the video and the JSON lines so far.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from deploykit.errors import UsageError
from deploykit.io import check_outputs, one_line

from .console import console, err_console

if TYPE_CHECKING:
    from deploykit.tasks.base import Task

INTERRUPTED_EXIT = 130


@dataclass(frozen=True)
class StreamOutputs:
    """Where a streamed run writes: drawn frames, JSON lines (``-`` is stdout), and what it shows."""

    draw: Path | None = None
    json_lines: str | None = None
    show_fps: bool = False


def _drawn_kind(sources: list[Any]) -> str:
    """``video`` when a video, camera or stream is drawn (one source), ``images`` for image files only."""
    videos = [s for s in sources if s.kind != "images" and s.kind != "image URL"]
    if not videos:
        return "images"
    if len(sources) > 1:
        raise UsageError(
            f"--draw | a video, camera or stream draws into one video file, and {len(sources)} sources were given.",
            hint="draw one video at a time, or drop --draw and use --json - for every source.",
        )
    return "video"


def check_draw(draw: Path, sources: list[Any], task: type[Task]) -> str:
    """Refuse a --draw path that cannot be written for these sources, before the work."""
    from deploykit.vision.outputs import check_image_folder_output, check_video_output

    if task.drawing is None:
        raise UsageError(
            f"--draw | draws the results of a task that draws, and the {task.name} task draws none.",
            hint="use --json for its results.",
        )
    drawn = _drawn_kind(sources)
    if drawn == "video":
        check_video_output(draw)
    else:
        check_image_folder_output(draw)
    inputs = {f"source {i}": Path(s.path) for i, s in enumerate(sources) if hasattr(s, "path")}
    inputs.update({f"image {i}": f for i, f in enumerate(f for s in sources for f in getattr(s, "files", []))})
    if drawn == "video":
        check_outputs({"--draw": draw}, inputs=inputs)
    else:
        for name, path in inputs.items():
            if path.parent.resolve() == draw.resolve():
                raise UsageError(
                    f"--draw '{draw}' | is the folder {name} '{path}' is read from; drawing there "
                    "would overwrite the inputs.",
                    hint="choose another folder.",
                )
        _check_drawn_names(draw, [path for name, path in inputs.items() if name.startswith("image ")])
    return drawn


def _check_drawn_names(draw: Path, images: list[Path]) -> None:
    """Each image is drawn into the folder under its own name: two images of one name from different folders
    would leave one drawing, the other's overwritten."""
    first: dict[str, Path] = {}
    for path in images:
        seen = first.setdefault(path.name, path)
        if seen.resolve() != path.resolve():
            raise UsageError(
                f"--draw '{draw}' | images '{seen}' and '{path}' have the same name, {path.name!r}: one drawing "
                "would overwrite the other.",
                hint="draw each folder into a folder of its own (one run each), or rename one of the images.",
            )


def open_results(
    path: Path,
    pipeline: Any,
    task: type[Task],
    settings: dict[str, Any],
    sources: list[str],
    every: int,
    opened: list[Any],
    drawn: str | None,
) -> Any:
    """The -o FILE.jsonl of this run, resumed when a stopped run of the same command left it (see
    ``deploykit.vision.results_file``); refused when it is another run's or not deploykit's."""
    from deploykit.io import file_sha256
    from deploykit.vision.results_file import ResultsFile

    info = pipeline.session.info
    run = {
        "model": pipeline.model_path.name,
        "model_sha256": file_sha256(pipeline.model_path),
        "task": task.name,
        "backend": info.backend,
        "device": info.device,
        "precision": info.precision,
        "labels": settings["labels"],
        **{key: settings[key] for key in task.predict_settings},
        "every": every,
        "sources": sources,
    }
    results = ResultsFile(path, run).open()
    if results.resumed and any(source.live for source in opened):
        raise UsageError(
            f"--output '{path}' | holds {results.resumed} frames of a camera or stream, which cannot be resumed: a "
            "live source does not send again what was missed, and its frame numbers start again.",
            hint="write to a new file.",
        )
    if results.resumed and drawn == "video":
        raise UsageError(
            f"--draw | a resumed run ({results.resumed} frames already in '{path}') would replace the drawn video "
            "with the remaining frames only.",
            hint="drop --draw to finish the JSON lines, or write both to new files.",
        )
    if results.resumed:
        err_console.print(
            f"resuming '{path}': {results.resumed} frames already there are not run again",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
    return results


def _summary(stats: Any, where: Any) -> None:
    summary = stats.summary()
    table = Table(title=f"{summary['frames']} frames, {summary['fps']:.1f} FPS, {summary['dropped']} dropped")
    for column in ("stage", "mean ms", "p50 ms", "p90 ms"):
        table.add_column(column)
    for stage, values in summary["stages"].items():
        table.add_row(stage, f"{values['mean_ms']:.1f}", f"{values['p50_ms']:.1f}", f"{values['p90_ms']:.1f}")
    where.print(table)


@contextlib.contextmanager
def _live_line() -> Iterator[Any]:
    """A status line on a terminal's stderr, updated per frame; nothing when stderr is not a terminal."""
    if not err_console.is_terminal:
        yield lambda text: None
        return
    with err_console.status("opening the source") as status:
        yield lambda text: status.update(text)


def _progress(stats: Any) -> str:
    recent = {stage: values[-30:] for stage, values in stats.samples_ms.items()}
    stages = " ".join(f"{stage} {sum(v) / len(v):.1f}" for stage, v in recent.items() if v and stage != "wait")
    return f"{stats.frames} frames, {stats.fps:.1f} FPS, {stats.dropped} dropped; ms: {stages}"


def run_stream(stream: Any, task: type[Task], outputs: StreamOutputs, drawn: str | None, results: Any = None) -> None:
    """Consume the stream, writing every output as frames arrive (JSON lines to stdout, or into ``results``,
    the ``ResultsFile`` of -o); finalise them however the run ends."""
    from deploykit.vision.outputs import VideoWriter, make_folder, write_image

    # on a terminal the frame lines go through the console that draws the live line, so they print above it
    shared_terminal = console.is_terminal and err_console.is_terminal
    human = err_console if outputs.json_lines == "-" or shared_terminal else console
    fps = stream.sources[0].fps / stream.every if stream.sources[0].fps else None  # the drawn video plays in real time
    writer = VideoWriter(outputs.draw, fps) if drawn == "video" and outputs.draw else None
    if drawn == "images" and outputs.draw is not None:
        make_folder(outputs.draw)
    try:
        with stream, _live_line() as live:
            for result in stream:
                live(_progress(stream.stats))
                # drawn before the frame's JSON line goes out, and written right after it: a Ctrl-C during the
                # drawing (milliseconds) or the terminal's line leaves as many drawn frames as JSON lines
                drawn_image = task.draw(result.frame.image, result.results) if outputs.draw is not None else None
                if outputs.json_lines == "-":
                    sys.stdout.write(json.dumps(result.to_dict()) + "\n")  # one write per line: never half a line
                    sys.stdout.flush()
                elif results is not None:
                    results.write(result.to_dict())
                if drawn_image is not None and writer is not None:
                    writer.write(drawn_image)
                elif drawn_image is not None and outputs.draw is not None:
                    write_image(outputs.draw / result.frame.name, drawn_image)
                fps = f" {stream.stats.fps:.1f} FPS" if outputs.show_fps else ""
                human.print(
                    f"{one_line(result.frame.name, 60)}:{fps} {task.describe(result.results)}",
                    soft_wrap=True,
                    markup=False,
                    highlight=False,
                )
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED_EXIT) from None
    finally:
        if writer is not None:
            writer.close()
        if results is not None:
            results.close()
        _summary(stream.stats, err_console)
