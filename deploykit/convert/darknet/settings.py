"""How a Darknet model becomes ONNX, as one value: ``DarknetExportSettings``.

``convert_darknet(cfg, weights, output, export, checks)`` takes it whole, and so do the oracles
that check the result (they need the head and OpenCV's threshold to compare like with like). How
the result is checked is a ``deploykit.verify.VerifySettings`` (``oracle``: auto | darknet | opencv
| none, the tolerances, the seed of the verification image, the platforms). Nothing is decided here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from deploykit.verify.settings import known_fields


@dataclass(frozen=True)
class DarknetExportSettings:
    """What ONNX graph to write.

    Attributes:
        input_size: (width, height) or ``"608x608"``; default the cfg's; a multiple of the stride.
        batch: a fixed batch size, or ``"dynamic"``.
        head: ``raw`` (each [yolo]/[region] output as Darknet leaves it) or ``decoded`` (one
            ``detections`` tensor [batch, N, 4 + 1 + classes]).
        opset: ONNX opset, 13 to 21.
        opencv_threshold: with ``head="decoded"``, zero class scores at or below it, as OpenCV 4.x does.
    """

    input_size: tuple[int, int] | str | None = None
    batch: int | str = 1
    head: str = "raw"
    opset: int = 13
    opencv_threshold: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.input_size, list):
            object.__setattr__(self, "input_size", tuple(self.input_size))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["input_size"] = list(self.input_size) if isinstance(self.input_size, tuple) else self.input_size
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DarknetExportSettings:
        return cls(**known_fields(cls, data))
