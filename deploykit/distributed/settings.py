"""``deploykit.distributed.predict``'s settings as values: what each row is made with
(``PredictSettings``) and where the work runs (``Execution``).

Built once at the edge (``deploykit predict --engine ray`` builds both from its options) and passed
whole: ``predict(model, source, output, settings, execution)``. A resumed run keeps only rows made
with the same ``PredictSettings``. ``predict`` checks the values; this module decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from deploykit.backends.options import OptionValue
from deploykit.verify.settings import known_fields, options_to_dict


@dataclass(frozen=True)
class PredictSettings:
    """How each row is made.

    Attributes:
        task: a task with an app pipeline (``detect``, ``classify``, ``segment`` ...) or ``tensor``.
        backend, device: where each worker runs the model (default ONNX Runtime, or the bundle's).
        top_k: classification: classes per row.
        pipeline_options: Detector/Classifier keyword arguments (``labels`` as a list, ``conf``, ...).
        backend_options: further backend options.
    """

    task: str = "detect"
    backend: str | None = None
    device: str | None = None
    top_k: int = 5
    pipeline_options: Mapping[str, object] = field(default_factory=dict)
    backend_options: Mapping[str, OptionValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pipeline_options", dict(self.pipeline_options or {}))
        object.__setattr__(self, "backend_options", dict(self.backend_options or {}))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["backend_options"] = options_to_dict(self.backend_options)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PredictSettings:
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class Execution:
    """Where and how wide the work runs.

    Attributes:
        engine: ``ray`` (Ray Data, actor pool) or ``local`` (this process).
        address: Ray cluster to join (``ray://HEAD:10001``, ``auto``); default a local Ray.
        actors: size of the actor pool; default every CPU of the cluster / ``cpus_per_actor``.
        cpus_per_actor: CPUs each actor reserves (default: the ``threads`` option, else 1); the
            backend gets as many threads unless the ``threads`` option (or the bundle) says otherwise.
        batch_size: images per Ray batch (and per part-file write).
    """

    engine: str = "ray"
    address: str | None = None
    actors: int | None = None
    cpus_per_actor: float | None = None
    batch_size: int = 16

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Execution:
        return cls(**known_fields(cls, data))
