"""Batch inference: a vision pipeline over a folder (or bucket) of images, locally or on Ray Data.

``engine="ray"`` reads the files with ``ray.data.read_binary_files`` and maps batches through a pool
of actors; each actor opens the pipeline once, with the backend's thread count set to the actor's
CPUs (Ray sets OMP_NUM_THREADS=1 in workers, and runtimes left to guess oversubscribe the cores).
The model travels through Ray's object store, so nodes need no shared file system.
``engine="local"`` runs the same row builder in this process. Both write the same rows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.distributed.cluster import check_resources, connect, quiet_console, require_ray
from deploykit.distributed.rows import ARRAY_SUFFIXES, TASKS, Predictor
from deploykit.distributed.settings import Execution, PredictSettings
from deploykit.distributed.store import ResultStore, is_uri, list_sources, read_bytes
from deploykit.errors import BackendError, UsageError
from deploykit.io import file_sha256, special_file_problem
from deploykit.model import Model, check_model_path
from deploykit.vision.pipelines import _read_labels

Progress = Callable[[int, int], None]
ENGINES = ("local", "ray")


@dataclass
class PredictSummary:
    """What one batch-inference run did.

    Attributes:
        engine: ``local`` or ``ray``.
        total: images in the source.
        skipped: images that already had a row in the output (resumed run).
        processed: rows written by this run.
        errors: of those, rows with ``status == "error"``.
        actor_crashes: how often an actor crashed; Ray restarted (or Ray Data replaced) it and retried
            the batch it held. Rows made by a restarted actor say ``"restarted": true``.
        actors: Ray actors in the pool (1 for local).
        startup_s: seconds to start or join Ray (0 for local).
        elapsed_s: seconds from the first image read to the last row written.
        out: the output folder.
    """

    engine: str
    total: int
    skipped: int
    processed: int = 0
    errors: int = 0
    actor_crashes: int = 0
    actors: int = 1
    startup_s: float = 0.0
    elapsed_s: float = 0.0
    out: str = ""

    @property
    def images_per_s(self) -> float:
        return self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def count(self, rows: list[dict[str, Any]]) -> None:
        self.processed += len(rows)
        self.errors += sum(row["status"] == "error" for row in rows)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "images_per_s": self.images_per_s}


def model_files(model: Path, backend: str | None = None, options: Mapping[str, Any] | None = None) -> dict[str, bytes]:
    """What a worker needs of the model, by file name: every file it is made of as ``backend`` opens it
    with ``options`` (``deploykit.backends.registry.model_files``: an exported ``.mnn`` or ``.tflite``
    with the ``.json`` beside it that records the ONNX names, types and metadata, a Darknet ``.cfg`` with
    the ``.weights`` its option names ...). They travel into one folder, so their names must differ.

    Raises:
        UsageError: two of the files have the same name.
    """
    from deploykit.backends.registry import model_files as files_of

    paths = files_of(model, backend, options)
    names = [path.name for path in paths]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(
            f"model '{model.name}' | its files travel to the workers into one folder, and {', '.join(twice)} "
            f"names two of them ({', '.join(str(p) for p in paths if p.name in twice)}).",
            hint="rename one of them.",
        )
    return {path.name: path.read_bytes() for path in paths}


def options_naming_files(options: Mapping[str, Any], files: Mapping[str, bytes], model: Path) -> dict[str, str]:
    """The options whose value is the path of one of the model's other files (OpenCV's Darknet ``weights``),
    with that file's name: on a node they name its copy beside the model's (``options_on_this_node``)."""
    return {
        key: Path(value).name
        for key, value in options.items()
        if isinstance(value, (str, os.PathLike)) and Path(value).name in files and Path(value).name != model.name
    }


def options_on_this_node(options: Mapping[str, Any], named: Mapping[str, str], model_here: Path) -> dict[str, Any]:
    """``options`` with each option of ``named`` pointing to the copy of its file on this node."""
    return {**options, **{key: str(model_here.parent / name) for key, name in named.items()}}


def model_on_this_node(files: dict[str, bytes], name: str) -> Path:
    """The model's files on this node, the model's path returned: one copy per model per node, each file
    written atomically, the folder named by a digest of them all."""
    digest = hashlib.sha256()
    for file_name in sorted(files):
        digest.update(file_name.encode() + b"\0" + hashlib.sha256(files[file_name]).digest())
    folder = Path(tempfile.gettempdir()) / "deploykit-models" / digest.hexdigest()[:16]
    for file_name, data in files.items():
        path = folder / file_name
        if not path.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.replace(temporary, path)
    return folder / name


class _RayPredictActor:
    """A Ray Data callable class: one pipeline per actor, one JSON row per image."""

    def __init__(self, model: Any, model_name: str, settings: dict[str, Any], named: dict[str, str]) -> None:
        import ray

        files = ray.get(model[0])  # the reference is wrapped in a list so Ray does not resolve it eagerly
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        here = model_on_this_node(files, model_name)
        options = options_on_this_node(settings["backend_options"], named, here)
        self.predictor = Predictor(here, restarted=restarted, **{**settings, "backend_options": options})

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        rows = self.predictor.rows([str(p) for p in batch["path"]], [bytes(b) for b in batch["bytes"]])
        return {"row": np.array([json.dumps(row) for row in rows], dtype=object)}


def _actor_crashes(ray: Any) -> int:
    """How often this job's batch-inference actors crashed, from Ray's actor table: restarts, plus
    actors that died with their worker or node (Ray Data may replace such an actor instead).

    ``ray.util.state`` would say the same but needs the dashboard, which deploykit does not start;
    the GCS table is read directly instead (0 if a Ray version lacks it).
    """
    try:
        from ray._private import state

        actors = state.actors()
    except Exception:  # a private API: if it moves, the count is lost, never the job
        return 0
    job = ray.get_runtime_context().get_job_id()
    crashes = 0
    for actor in actors.values():
        if actor.get("JobID") != job or _RayPredictActor.__name__ not in str(actor.get("ActorClassName")):
            continue
        died = actor.get("State") == "DEAD" and re.search(r"reason: (WORKER|NODE)_DIED", str(actor.get("DeathCause")))
        crashes += int(actor.get("NumRestarts") or 0) + bool(died)
    return crashes


def _ray_batches(
    ray: Any,
    model: Path,
    paths: list[str],
    settings: dict[str, Any],
    actors: int,
    cpus_per_actor: float,
    batch_size: int,
) -> Generator[list[dict[str, Any]], None, None]:
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # deploykit draws one bar for the whole job
    quiet_console("ray.data")  # its execution plan and "progress bars disabled" notes, on every run
    files = model_files(model, settings["backend"], settings["backend_options"])
    named = options_naming_files(settings["backend_options"], files, model)
    model_ref = ray.put(files)
    # Reading files is I/O: read tasks reserve no CPU, else they would wait for the cores the actors hold.
    dataset = ray.data.read_binary_files(paths, include_paths=True, num_cpus=0, concurrency=actors)
    # Ray Data restarts a crashed actor and retries its batch (max_restarts/max_task_retries -1 by default).
    dataset = dataset.map_batches(
        _RayPredictActor,
        fn_constructor_kwargs={"model": [model_ref], "model_name": model.name, "settings": settings, "named": named},
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor,
    )
    # URIs lose their scheme in Ray's path column; rows name the file as the user gave it.
    scheme = paths[0].split("://", 1)[0] + "://" if is_uri(paths[0]) else ""
    batches: Any = iter(dataset.iter_batches(batch_size=None, batch_format="numpy"))
    try:
        for batch in batches:
            rows = [json.loads(text) for text in batch["row"]]
            for row in rows:
                if scheme and not row["path"].startswith(scheme):
                    row["path"] = scheme + row["path"]
            yield rows
    finally:
        batches.close()  # stops and joins Ray Data's executor thread, before Ray shuts down (predict)


def _read_error(path: str, exc: OSError) -> str:
    return f"input '{path}' | cannot be read: {exc}."


def _unreadable(path: str) -> str | None:
    """Why a local input cannot be opened, or None (URIs are left to Ray and pyarrow). A FIFO, a device
    or a socket in the folder is named by kind, never opened (a FIFO blocks, /dev/zero never ends)."""
    if is_uri(path):
        return None
    problem = special_file_problem(path)
    if problem is not None:
        return f"input '{path}' | {problem}; expected an image file."
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return _read_error(path, exc)


def _local_batches(
    model: Path, paths: list[str], settings: dict[str, Any], batch_size: int
) -> Iterator[list[dict[str, Any]]]:
    predictor = Predictor(model, **settings)
    try:
        for start in range(0, len(paths), batch_size):
            rows = []
            for path in paths[start : start + batch_size]:
                try:
                    unreadable = _unreadable(path)
                    if unreadable is not None:
                        rows.append(predictor.error_row(path, unreadable))
                        continue
                    data = read_bytes(path)
                except OSError as exc:  # unreadable (permissions, vanished): a row that says so
                    rows.append(predictor.error_row(path, _read_error(path, exc)))
                    continue
                rows.append(predictor.row(path, data))
            yield rows
    finally:
        predictor.close()


def predict(
    model: Model | str | os.PathLike[str],
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    settings: PredictSettings | None = None,
    execution: Execution | None = None,
    *,
    progress: Progress | None = None,
) -> PredictSummary:
    """Run a Detector or Classifier over every image of ``source`` (or a plain session over every
    ``.npy``/``.npz`` with ``task="tensor"``); write one row per file into ``out``.

    Args:
        model: the ``.onnx`` file (on this machine; Ray ships it to the workers) or its ``Model``, or a bundle folder
            (``deploykit optimize -o``): its model file, on its backend, device, precision, threads
            and options.
        source: a file, a folder, or a folder URI (``s3://bucket/frames/``).
        out: the output folder (local or URI); rows already there are skipped (resumable).
        settings: how each row is made (``PredictSettings``: ``task`` detect | classify | tensor,
            ``backend``, ``device``, ``top_k``, ``pipeline_options``, ``backend_options``); default
            ``PredictSettings()``: detection on ONNX Runtime (or the bundle's configuration).
        execution: where the work runs (``Execution``: ``engine`` ray | local, ``address``,
            ``actors``, ``cpus_per_actor``, ``batch_size``); default ``Execution()``: a local Ray.
        progress: called as ``progress(done, total)`` after each batch.

    Returns:
        a ``PredictSummary``; the rows are in ``out/part-*.jsonl``.

    Raises:
        UsageError: an option cannot be used. BackendUnavailableError: ``engine="ray"`` without Ray.
    """
    settings, execution = settings or PredictSettings(), execution or Execution()
    task, backend, device, top_k = settings.task, settings.backend, settings.device, settings.top_k
    engine, address, actors, batch_size = execution.engine, execution.address, execution.actors, execution.batch_size
    cpus_per_actor = execution.cpus_per_actor
    backend_options = dict(settings.backend_options)
    model = model.path if isinstance(model, Model) else model  # workers are sent the file (a URI stays text)
    if not is_uri(model) and os.path.isdir(model):  # a bundle: exactly its chosen configuration
        from deploykit.optimize.bundle import bundle_configuration

        model, backend, device, backend_options = bundle_configuration(
            model, backend=backend, device=device, **backend_options
        )
    backend = backend or DEFAULT_BACKEND
    given = backend_options.get("threads")
    threads = int(given) if isinstance(given, (int, float)) and given > 0 else None
    cpus_per_actor = cpus_per_actor if cpus_per_actor is not None else float(threads or 1)
    model_path = check_model_path(model)  # the one model-path check: missing, a folder, a FIFO or a device
    if engine == "ray":
        require_ray()  # before any work: a missing extra is the first thing to say
    if engine not in ENGINES:
        raise UsageError(f"engine '{engine}' | is not local or ray.", hint="--engine local runs in this process.")
    if task not in TASKS:
        raise UsageError(f"task '{task}' | is not {', '.join(TASKS[:-1])} or {TASKS[-1]}.", hint="e.g. --task detect.")
    if cpus_per_actor <= 0 or (actors is not None and actors < 1) or batch_size < 1:
        raise UsageError(
            f"actors {actors}, cpus per actor {cpus_per_actor}, batch size {batch_size} | must be positive.",
            hint="e.g. --actors 2 --cpus-per-actor 1.",
        )
    if not is_uri(out) and not is_uri(source) and Path(out).resolve() == Path(source).resolve():
        what = "folder" if Path(source).is_dir() else "file"
        raise UsageError(
            f"--output '{out}' | is the input {what}; expected a folder for the result rows.",
            hint="write the rows into another folder, e.g. --output results/ (or -o FILE.jsonl for JSON lines).",
        )
    pipeline_options = dict(settings.pipeline_options)
    labels = pipeline_options.get("labels")
    if isinstance(labels, (str, os.PathLike)):
        # a names file on this machine travels as its list of names: workers may not see the file
        pipeline_options["labels"] = _read_labels(labels, {})
    paths = list_sources(source, ARRAY_SUFFIXES if task == "tensor" else None)
    store = ResultStore(out)
    with store.exclusive():  # one run at a time per folder: two would write every row twice
        row_settings: dict[str, Any] = {
            "task": task,
            "backend": backend,
            "device": device,
            "top_k": top_k,
            "pipeline_options": pipeline_options,
            "backend_options": backend_options,
        }
        # a resume keeps only rows the same model and settings made (never another model's rows)
        store.claim({"model_sha256": file_sha256(model_path), **{k: v for k, v in row_settings.items()}})
        done = store.done_paths()
        pending = [p for p in paths if p not in done]
        summary = PredictSummary(engine=engine, total=len(paths), skipped=len(paths) - len(pending), out=str(out))
        if progress:
            progress(0, len(pending))
        if not pending:
            return summary
        if engine == "local":
            started = time.perf_counter()
            _drain(
                store.write_rows(_counted(_local_batches(model_path, pending, row_settings, batch_size), summary)),
                progress,
                len(pending),
            )
            summary.elapsed_s = time.perf_counter() - started
            return summary
        # Open the pipeline here once before starting Ray, so a bad model, task or label file is a clear
        # error now rather than an actor that dies on every node. It also writes the rows of local files
        # that cannot be read, which would otherwise fail Ray's whole read.
        probe = Predictor(model_path, **row_settings)
        unreadable = {path: reason for path in pending if (reason := _unreadable(path))}
        first_rows = [probe.error_row(path, reason) for path, reason in unreadable.items()]
        probe.close()
        readable = [path for path in pending if path not in unreadable]
        if address is None and cpus_per_actor > (os.cpu_count() or 1):  # a local Ray has this machine's CPUs
            raise UsageError(
                f"--cpus-per-actor {cpus_per_actor:g} | this machine has {os.cpu_count() or 1} CPU(s), so no actor of "
                "a local Ray could ever be placed (Ray would wait forever).",
                hint=f"pass --cpus-per-actor {os.cpu_count() or 1} or less, or --address a larger cluster.",
            )
        started = time.perf_counter()
        with connect(address) as ray:
            summary.startup_s = time.perf_counter() - started
            check_resources(ray, cpus_per_actor=cpus_per_actor)
            cpus = float(ray.cluster_resources().get("CPU", 1))
            summary.actors = actors or max(1, math.floor(cpus / cpus_per_actor))
            row_settings["threads"] = threads or max(1, math.ceil(cpus_per_actor))
            started = time.perf_counter()
            ray_rows = _ray_batches(ray, model_path, readable, row_settings, summary.actors, cpus_per_actor, batch_size)
            batches = itertools.chain([first_rows], ray_rows if readable else [])
            crashes_before = _actor_crashes(ray)
            try:
                _drain(store.write_rows(_counted(batches, summary)), progress, len(pending))
            except ray.exceptions.RayError as exc:
                raise BackendError(
                    f"ray job | failed after {summary.processed} of {len(pending)} rows: {exc}",
                    hint="the rows written so far are kept; run the same command again to resume.",
                ) from exc
            finally:
                # Before Ray shuts down (leaving ``connect``): a Ctrl-C leaves this generator suspended and
                # referenced by the traceback, and Ray Data's executor thread, still running, then called
                # into a shut-down Ray ("The core worker has already been shutdown": exit 1, or SIGSEGV).
                ray_rows.close()
            summary.elapsed_s = time.perf_counter() - started
            summary.actor_crashes = _actor_crashes(ray) - crashes_before
        return summary


def _counted(batches: Iterator[list[dict[str, Any]]], summary: PredictSummary) -> Iterator[list[dict[str, Any]]]:
    for rows in batches:
        summary.count(rows)
        yield rows


def _drain(written: Iterator[int], progress: Progress | None, total: int) -> None:
    for done in written:
        if progress:
            progress(done, total)
