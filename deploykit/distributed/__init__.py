"""Beyond one machine, on Ray: batch inference over image datasets and one benchmark across a fleet.

Two adapters, nothing home-made: ``predict`` runs a vision pipeline over a folder or bucket with
Ray Data (a pool of actors, each holding one session), and ``fleet_benchmark`` runs the ordinary
single-machine bench on every device node of a Ray cluster and merges the reports.

Ray is the optional extra ``ray`` and is imported only inside these functions, so importing this
package never needs it. Nothing here reimplements what the pipelines, backends or the bench do:
it only moves models, inputs and results between machines.
"""

from __future__ import annotations

from deploykit.distributed.batch import PredictSummary, predict
from deploykit.distributed.cluster import DEVICE_RESOURCE_PREFIX, require_ray
from deploykit.distributed.fleet import fleet_benchmark
from deploykit.distributed.fleet_report import DeviceOutcome, FleetReport
from deploykit.distributed.settings import Execution, PredictSettings

__all__ = [
    "DEVICE_RESOURCE_PREFIX",
    "DeviceOutcome",
    "Execution",
    "FleetReport",
    "PredictSettings",
    "PredictSummary",
    "fleet_benchmark",
    "predict",
    "require_ray",
]
