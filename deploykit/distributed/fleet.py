"""Fleet benchmark: the single-machine bench on every device node of a Ray cluster, at once.

Each device joins the cluster with a custom resource ``deploykit-device:<name>`` of capacity 1
(``deploykit fleet join`` or ``ray start --resources``). One Ray task per device, pinned by that
resource, runs ``deploykit.bench.runner.benchmark`` there; the bench still measures every
configuration in its own subprocess, so a runtime crash costs one row, and a node that dies or
times out costs one column. The reports come back with their device fingerprints and are merged
into a ``FleetReport``.
"""

from __future__ import annotations

import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from deploykit.bench import judging
from deploykit.bench.report import BenchmarkReport
from deploykit.distributed.batch import model_files, model_on_this_node
from deploykit.distributed.cluster import DEVICE_RESOURCE_PREFIX, connect
from deploykit.distributed.fleet_report import DeviceOutcome, FleetReport
from deploykit.errors import ModelNotFoundError, ReportError, ResourceError, UsageError
from deploykit.model import Model, path_of

if TYPE_CHECKING:
    from deploykit.bench.plan import BenchPlan


Progress = Callable[[int, int, str], None]
DEFAULT_DEVICE_TIMEOUT_S = 1800.0


def device_name(fingerprint: dict[str, Any] | None = None) -> str:
    """A resource-safe name for this device from its fingerprint: host, then CPU (or GPU) model."""
    if fingerprint is None:
        from deploykit.bench.fingerprint import cpu_info, gpu_info

        fingerprint = {"hostname": platform.node(), "cpu": cpu_info(), "gpus": gpu_info()}
    gpus = fingerprint.get("gpus") or []
    hardware = gpus[0]["name"] if gpus else fingerprint["cpu"]["model"]
    hardware = re.sub(r"\((r|tm)\)|\b(cpu|processor)\b|@.*$", "", str(hardware), flags=re.IGNORECASE)
    text = f"{fingerprint.get('hostname') or 'device'} {hardware}"
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def fleet_devices(ray: Any) -> dict[str, str]:
    """Device name → node id, for every alive node that carries a ``deploykit-device:*`` resource."""
    devices = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for resource in node.get("Resources", {}):
            if resource.startswith(DEVICE_RESOURCE_PREFIX):
                devices[resource[len(DEVICE_RESOURCE_PREFIX) :]] = node["NodeID"]
    return devices


def _bench_on_device(model: list[Any], model_name: str, original_path: str, plan: dict[str, Any]) -> dict:
    """Runs inside the Ray task on the device node: the ordinary bench, on a local copy of the model.

    ``plan`` is ``BenchPlan.to_dict()``: plain data across Ray, read back here."""
    import ray

    from deploykit.bench.plan import BenchPlan
    from deploykit.bench.runner import benchmark

    # Ray pins OMP_NUM_THREADS=1 in workers; the bench must see the device as a deployed app would.
    os.environ.pop("OMP_NUM_THREADS", None)
    path = model_on_this_node(ray.get(model[0]), model_name)
    result = benchmark(path, BenchPlan.from_dict(plan))
    result.model.path = original_path  # the report names the user's file, not the node's copy
    judging.judge(result)
    return result.to_dict()  # plain data across Ray: the head may run another deploykit


def _reason(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else 'no message'}"[:500]


def fleet_benchmark(
    model: Model | str | os.PathLike[str],
    address: str | None = None,
    plan: BenchPlan | None = None,
    *,
    devices: Sequence[str] | None = None,
    device_timeout_s: float = DEFAULT_DEVICE_TIMEOUT_S,
    progress: Progress | None = None,
) -> FleetReport:
    """Benchmark ``model`` on every device node of a Ray cluster and merge the reports.

    Args:
        model: the ``.onnx`` file on this machine, or its ``Model`` (the file is shipped to the nodes
            through Ray's object store).
        address: the cluster (``ray://HEAD:10001``, ``HEAD:6379``, ``auto``); ``None`` joins the Ray
            this process is already connected to, or starts a local one.
        plan: the ``BenchPlan`` every device runs (default ``BenchPlan()``), shipped as
            ``plan.to_dict()``; inputs are seeded random data, the same on every device.
        devices: device names to run on (default: every node with a ``deploykit-device:*`` resource).
            A name no alive node carries becomes a failed column.
        device_timeout_s: a device whose bench has not finished this long after the start is cancelled
            and becomes a failed column.
        progress: called as ``progress(done, total, device)`` when a device finishes.

    Raises:
        ResourceError: the cluster has no device node.
        UsageError: a setting cannot be used.
    """
    model_path = path_of(model)
    if not model_path.is_file():
        raise ModelNotFoundError(f"model '{model}' | no such file.", hint="pass the path of an .onnx file.")
    if device_timeout_s <= 0:
        raise UsageError(f"device timeout {device_timeout_s} s | must be positive.", hint="e.g. --device-timeout 30m.")
    from deploykit.bench.plan import BenchPlan

    settings = (plan or BenchPlan()).to_dict()
    with connect(address) as ray:
        known = fleet_devices(ray)
        if not known:
            raise ResourceError(
                f"ray cluster '{address or 'local'}' | no node carries a '{DEVICE_RESOURCE_PREFIX}<name>' resource.",
                hint="on each device: deploykit fleet join --address HEAD:6379 "
                f"(or ray start --address HEAD:6379 --resources '{{\"{DEVICE_RESOURCE_PREFIX}NAME\": 1}}').",
            )
        chosen = list(devices) if devices else sorted(known)
        outcomes: dict[str, DeviceOutcome] = {}
        model_ref = ray.put(model_files(model_path))
        remote = ray.remote(_bench_on_device)
        pending: dict[Any, str] = {}
        for name in chosen:
            if name not in known:
                reason = f"no alive node carries resource '{DEVICE_RESOURCE_PREFIX}{name}'"
                outcomes[name] = DeviceOutcome(name, "failed", f"{reason} (known: {', '.join(sorted(known))})")
                continue
            task = remote.options(resources={DEVICE_RESOURCE_PREFIX + name: 1}, num_cpus=0, max_retries=0)
            pending[task.remote([model_ref], model_path.name, str(model_path), settings)] = name
        started = time.monotonic()
        deadline = started + device_timeout_s
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                for ref, name in pending.items():
                    ray.cancel(ref, force=True)
                    outcomes[name] = DeviceOutcome(
                        name, "failed", f"did not finish within {device_timeout_s:g} s", node=known[name]
                    )
                break
            ref = ready[0]
            name = pending.pop(ref)
            try:
                report = BenchmarkReport.from_dict(ray.get(ref), f"device {name}")
                outcomes[name] = DeviceOutcome(
                    name, "ok", None, node=known[name], report=report, elapsed_s=time.monotonic() - started
                )
            except (ray.exceptions.RayError, ReportError) as exc:  # a device with another deploykit's report
                outcomes[name] = DeviceOutcome(
                    name, "failed", _reason(exc), node=known[name], elapsed_s=time.monotonic() - started
                )
            if progress:
                progress(len(outcomes), len(chosen), name)
    return FleetReport.build(model_path, [outcomes[name] for name in chosen], settings, device_timeout_s)
