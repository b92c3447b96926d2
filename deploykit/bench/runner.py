"""Run a benchmark: expand configurations, measure each (in its own subprocess by default),
check every configuration's outputs against a reference, pick a recommendation.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.registry import backend_names, canonical_name, get_backend
from deploykit.bench.config import SCENARIOS, BenchConfig, batch_inputs, model_batch, parse_backend_spec
from deploykit.bench.fingerprint import fingerprint
from deploykit.bench.measure import failed_row, measure
from deploykit.bench.report import SCHEMA_VERSION, BenchmarkResult
from deploykit.bench.worker import ROW_PREFIX
from deploykit.errors import DeployKitError, InputError, UsageError
from deploykit.inputs import load_arrays, save_arrays
from deploykit.model import read_interface
from deploykit.parity import parity_entry

Progress = Callable[[int, int, str], None]
_WORKER_TIMEOUT_S = 900


def default_backend_specs() -> list[str]:
    """Every available backend on each device it offers (AUTO left out: it picks one of the others)."""
    specs = []
    for name in backend_names():
        backend = get_backend(name)
        if not backend.is_available():
            continue
        specs += [f"{name}:{device}" for device in backend.devices() if device.upper() != "AUTO"]
    return specs


def expand_configs(
    backends: Sequence[str] | None,
    *,
    batches: Sequence[int] = (1,),
    threads: Sequence[int | None] = (None,),
    precision: str | None = None,
    scenario: str = "singlestream",
    streams: int = 4,
    warmup: int = 10,
    iterations: int | None = 100,
    duration_s: float | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[BenchConfig]:
    """Every combination of backend × batch × threads, validated before anything runs."""
    if scenario not in SCENARIOS:
        raise UsageError(
            f"scenario '{scenario}' | is not one of {', '.join(SCENARIOS)}.",
            hint="singlestream: one query at a time; offline: big batches; multistream: K streams.",
        )
    if duration_s is None and (iterations is None or iterations < 1):
        raise UsageError(
            f"iterations {iterations} | at least 1 timed iteration is needed.",
            hint="use --iterations 100 (or --duration 10s).",
        )
    if warmup < 0:
        raise UsageError(f"warmup {warmup} | cannot be negative.", hint="use --warmup 0 to skip it.")
    if scenario == "multistream" and streams < 1:
        raise UsageError(f"streams {streams} | at least 1 stream is needed.", hint="e.g. --streams 4.")
    configs = []
    for spec in backends or default_backend_specs():
        name, device = parse_backend_spec(spec)
        name = canonical_name(name)
        device = device or get_backend(name).default_device
        for batch in batches:
            for thread_count in threads:
                configs.append(
                    BenchConfig(
                        backend=name,
                        device=device,
                        batch=batch,
                        threads=thread_count,
                        precision=precision if name == "openvino" else None,
                        scenario=scenario,
                        streams=streams if scenario == "multistream" else 1,
                        warmup=warmup,
                        iterations=None if duration_s else iterations,
                        duration_s=duration_s,
                        options=dict(options or {}),
                    )
                )
    if not configs:
        raise UsageError("bench | no backend is available.", hint="pip install 'deploykit[all]'.")
    return configs


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _feeds_for(interface: Any, batch: int, inputs: Mapping[str, np.ndarray] | None, seed: int) -> dict[str, np.ndarray]:
    specs = {s.name: s for s in interface.inputs}
    if inputs is None:
        return batch_inputs(specs, batch, seed=seed, model_name=f"'{interface.path.name}'")
    missing = [n for n in specs if n not in inputs]
    unknown = [n for n in inputs if n not in specs]
    if missing or unknown:
        raise InputError(
            f"inputs file | has {', '.join(inputs) or 'no arrays'}; the model's inputs are {', '.join(specs)}"
            + (f" (missing {', '.join(missing)})" if missing else "")
            + (f" (not inputs: {', '.join(unknown)})" if unknown else "")
            + ".",
            hint="save one array per model input, named like the input: np.savez(path, images=x).",
        )
    from deploykit.backends.base import validate_feeds

    return validate_feeds(specs, inputs)


def load_inputs(model: Path, source: str | os.PathLike[str], batch: int) -> dict[str, np.ndarray]:
    """Feeds from a file: an .npz of arrays, or an image / a folder of images (pre-processed as the
    model's metadata says)."""
    from deploykit.vision.image import IMAGE_SUFFIXES, image_feeds

    path = Path(source)
    if path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES:
        return image_feeds(model, path, batch)
    return load_arrays(path)


def _rebatch(feeds: Mapping[str, np.ndarray] | None, batch: int) -> dict[str, np.ndarray] | None:
    """Image feeds made for one batch size, tiled or cut to another (arrays from .npz stay as given)."""
    if feeds is None:
        return None
    out = {}
    for name, array in feeds.items():
        if array.ndim == 4 and array.shape[0] != batch and array.dtype.kind == "f":
            repeats = -(-batch // array.shape[0])
            array = np.concatenate([array] * repeats)[:batch]
        out[name] = array
    return out


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name} (exit code {code})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _measure_isolated(
    model: Path, config: BenchConfig, inputs_path: Path, outputs_path: Path, cost_per_hour: float | None
) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    job = {
        "model": str(model),
        "config": config.to_dict(),
        "inputs": str(inputs_path),
        "outputs": str(outputs_path),
        "cost_per_hour": cost_per_hour,
    }
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "deploykit.bench.worker"],
            input=json.dumps(job),
            capture_output=True,
            text=True,
            timeout=_WORKER_TIMEOUT_S + (config.duration_s or 0),
            env=os.environ.copy(),
        )
    except subprocess.TimeoutExpired:
        return failed_row(config, f"the measurement did not finish within {_WORKER_TIMEOUT_S} s"), None
    lines = [line for line in completed.stdout.splitlines() if line.startswith(ROW_PREFIX)]
    if completed.returncode != 0 or not lines:
        tail = " | ".join(completed.stderr.strip().splitlines()[-3:])
        return failed_row(
            config,
            f"the isolated run {_describe_exit(completed.returncode)}" + (f"; last output: {tail}" if tail else ""),
        ), None
    row = json.loads(lines[-1][len(ROW_PREFIX) :])
    if row["status"] != "ok" or not outputs_path.exists():
        return row, None
    with np.load(outputs_path, allow_pickle=False) as archive:
        outputs = {name: archive[name] for name in archive.files}
    return row, outputs


def benchmark(
    model: str | os.PathLike[str],
    backends: Sequence[str] | None = None,
    *,
    batch: int | Sequence[int] | None = None,
    threads: int | Sequence[int] | None = None,
    precision: str | None = None,
    scenario: str = "singlestream",
    streams: int = 4,
    warmup: int = 10,
    iterations: int | None = 100,
    duration_s: float | None = None,
    inputs: str | os.PathLike[str] | Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    reference: str | None = None,
    isolate: bool = True,
    cost_per_hour: float | None = None,
    options: Mapping[str, Any] | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    progress: Progress | None = None,
) -> BenchmarkResult:
    """Benchmark a model on several backends/devices with the same inputs, and check parity.

    Args:
        model: the ``.onnx`` file.
        backends: ``BACKEND`` or ``BACKEND:DEVICE`` specs; default every available backend × device.
        batch: one size or a sweep; default the model's own (its fixed batch, or 1 if dynamic).
        threads: one count or a sweep; default the runtime's own.
        precision: OpenVINO inference precision (f32/bf16/f16); others run the model's own.
        scenario: ``singlestream`` (p90 is the headline), ``offline`` (throughput), or
            ``multistream`` (``streams`` concurrent queries on one session).
        warmup, iterations, duration_s: untimed runs, then a count or a duration of timed runs.
        inputs: an ``.npz`` file or dict of arrays; default seeded random data.
        reference: the backend spec whose outputs the others are compared with (default: the first).
        isolate: measure each configuration in its own subprocess.
        cost_per_hour: the device's price per hour, for cost per million inferences.
        options: extra backend options for every configuration.
        atol, rtol: parity tolerances (default by precision).
        progress: called as ``progress(done, total, label)``.
    """
    model_path = Path(model)
    interface = read_interface(model_path)
    if batch is None:
        batch = model_batch({s.name: s for s in interface.inputs})
    batches = [batch] if isinstance(batch, int) else list(batch)
    thread_counts: list[int | None] = [threads] if threads is None or isinstance(threads, int) else list(threads)
    configs = expand_configs(
        backends,
        batches=batches,
        threads=thread_counts,
        precision=precision,
        scenario=scenario,
        streams=streams,
        warmup=warmup,
        iterations=iterations,
        duration_s=duration_s,
        options=options,
    )
    given = load_inputs(model_path, inputs, batches[0]) if isinstance(inputs, (str, os.PathLike)) else inputs
    feeds_by_batch = {b: _feeds_for(interface, b, _rebatch(given, b), seed) for b in batches}
    reference_name = None
    if reference:
        reference_name = parse_backend_spec(reference)[0]
        reference_name = canonical_name(reference_name)

    rows: list[dict[str, Any]] = []
    outputs_by_row: list[dict[str, np.ndarray] | None] = []
    with tempfile.TemporaryDirectory(prefix="deploykit-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        inputs_paths = {}
        for b, feeds in feeds_by_batch.items():
            inputs_paths[b] = scratch / f"inputs-b{b}.npz"
            save_arrays(inputs_paths[b], feeds)
        for index, config in enumerate(configs):
            if progress:
                progress(index, len(configs), config.label())
            if isolate:
                row, outputs = _measure_isolated(
                    model_path,
                    config,
                    inputs_paths[config.batch],
                    scratch / f"outputs-{index}.npz",
                    cost_per_hour,
                )
            else:
                try:
                    row, outputs = measure(
                        model_path, config, feeds_by_batch[config.batch], cost_per_hour=cost_per_hour
                    )
                except DeployKitError as exc:
                    row, outputs = failed_row(config, str(exc)), None
            rows.append(row)
            outputs_by_row.append(outputs)
        if progress:
            progress(len(configs), len(configs), "done")

    for b in batches:
        members = [i for i, c in enumerate(configs) if c.batch == b and outputs_by_row[i] is not None]
        if not members:
            continue
        chosen = [i for i in members if configs[i].backend == reference_name] if reference_name else members
        reference_index = (chosen or members)[0]
        reference_outputs = outputs_by_row[reference_index]
        assert reference_outputs is not None
        reference_row = rows[reference_index]
        for i in members:
            if i == reference_index:
                rows[i]["parity"] = {"reference": "self", "passed": True, "outputs": []}
                continue
            outputs = outputs_by_row[i]
            assert outputs is not None
            rows[i]["parity"] = parity_entry(
                outputs,
                reference_outputs,
                configs[reference_index].label(),
                [rows[i]["session"]["precision"], reference_row["session"]["precision"]],
                atol,
                rtol,
            )

    result = BenchmarkResult(
        {
            "schema": "deploykit.bench",
            "schema_version": SCHEMA_VERSION,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "model": {
                "path": str(model_path),
                "sha256": _file_sha256(model_path),
                "inputs": [s.to_dict() for s in interface.inputs],
                "outputs": [s.to_dict() for s in interface.outputs],
            },
            "settings": {
                "scenario": scenario,
                "warmup": warmup,
                "iterations": None if duration_s else iterations,
                "duration_s": duration_s,
                "seed": seed,
                "isolated": isolate,
                "cost_per_hour": cost_per_hour,
                "inputs": "file" if given is not None else "seeded random",
            },
            "device": fingerprint(),
            "rows": rows,
            "recommendation": None,
        }
    )
    result.data["recommendation"] = result.recommend()
    return result
