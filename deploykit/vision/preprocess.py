"""What a caller changes in a model's own pre-processing, as one value: ``PreprocessOverrides``.

A model converted by deploykit carries its pre-processing in its metadata (``deploykit.input``), so
the pipelines need none of this. A model without it, or one whose metadata is wrong, takes an
override: ``Detector(model, preprocess=PreprocessOverrides(channel_order="BGR"))``. Built once at the
edge and passed whole; ``Preprocess.from_metadata`` decides what wins. This module checks nothing a
pipeline does not check already, and imports no runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from deploykit.validation import known_fields

FIELDS = ("input_size", "resize", "channel_order", "scale", "mean", "std")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class PreprocessOverrides:
    """Pre-processing that replaces the model's metadata; ``None`` keeps what the metadata says.

    Attributes:
        input_size: (height, width) for models with a dynamic input and no size in their metadata.
        resize: ``letterbox`` (keep aspect, pad), ``stretch`` or ``center-crop`` (classifiers).
        channel_order: ``RGB`` or ``BGR``: the order the model expects.
        scale: multiplies the 0-255 pixel values (1/255 by default).
        mean, std: per channel, subtracted then divided after ``scale``. ImageNet models: mean
            (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225).
    """

    input_size: tuple[int, int] | None = None
    resize: str | None = None
    channel_order: str | None = None
    scale: float | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("input_size", "mean", "std"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    def given(self) -> dict[str, Any]:
        """The overrides that are set (not ``None``), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name: list(value) if isinstance(value := getattr(self, f.name), tuple) else value for f in fields(self)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreprocessOverrides:
        return cls(**known_fields(cls, data))

    @classmethod
    def of(cls, value: PreprocessOverrides | Mapping[str, object] | None) -> PreprocessOverrides:
        """The value itself, one read from its ``to_dict`` form (what travels to Ray workers), or none."""
        if value is None:
            return cls()
        return value if isinstance(value, PreprocessOverrides) else cls.from_dict(value)
