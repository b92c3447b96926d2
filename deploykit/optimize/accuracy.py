"""How much an accuracy delta proves: its interval over the held-out images, and how many images an
accuracy budget needs before a candidate can be shown to be within it.

The task metric of a reduced-precision candidate (top-1 agreement, mAP@0.5) is measured on a few
held-out images; the interval says what those few images allow. Top-1 agreement is a share of
images, so its interval is Wilson's score interval; any other metric (mAP@0.5 over detections) is
bootstrapped over the images. ``--max-drop`` is judged against the interval's pessimistic end when
the held-out images are enough for a perfect agreement to show the budget (``min_images``); with
fewer, the point estimate admits a candidate and the report marks its delta as not proven, which
``optimize`` says before the search starts. Pure functions; nothing here runs a model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Z95 = 1.959964  # two-sided 95 %
RESAMPLES = 500
SEED = 0


class AccuracyEvidenceWarning(UserWarning):
    """The held-out images are too few for the accuracy budget to be proven at the pessimistic end."""


@dataclass(frozen=True)
class DeltaInterval:
    """An accuracy delta (1 − the task metric) with its 95 % interval and the images it rests on.

    Attributes:
        delta: the point estimate.
        low, high: the interval of the delta; ``high`` is the pessimistic end.
        images: the held-out images measured.
        method: ``wilson`` (a share of images) or ``bootstrap over images``.
    """

    delta: float
    low: float
    high: float
    images: int
    method: str

    def describe(self) -> str:
        return f"{self.delta:.2%} [{self.low:.2%}, {self.high:.2%}] on {self.images} images ({self.method})"

    def to_dict(self) -> dict[str, Any]:
        return {"delta": self.delta, "low": self.low, "high": self.high, "images": self.images, "method": self.method}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeltaInterval:
        return cls(
            float(data["delta"]), float(data["low"]), float(data["high"]), int(data["images"]), str(data["method"])
        )


def wilson(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``successes / trials``."""
    if trials <= 0:
        return 0.0, 1.0
    share = successes / trials
    denominator = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def min_images(max_drop: float, z: float = Z95) -> int | None:
    """The fewest held-out images on which a perfect agreement's Wilson interval has its pessimistic
    end within ``max_drop`` (``n ≥ z²(1 − d)/d``); None for a budget of 0 (f32 answers only)."""
    if max_drop <= 0:
        return None
    return math.ceil(z * z * (1 - max_drop) / max_drop)


def share_interval(value: float, images: int) -> DeltaInterval:
    """The delta of a top-1 agreement ``value`` measured on ``images`` images, with Wilson's interval."""
    agreeing = round(value * images)
    low, high = wilson(agreeing, images)
    return DeltaInterval(round(1 - value, 6), 1 - high, 1 - low, images, "wilson")


def bootstrap_interval(
    metric: Callable[[Sequence[Any], Sequence[Any]], float],
    expected: Sequence[Any],
    found: Sequence[Any],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> DeltaInterval:
    """The delta of ``metric(expected, found)`` (per-image results) with a percentile bootstrap that
    resamples the images."""
    count = len(expected)
    value = float(metric(expected, found))
    if count < 2:
        return DeltaInterval(round(1 - value, 6), 0.0, 1.0, count, "bootstrap over images")
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(resamples):
        picks = rng.integers(count, size=count)
        values.append(float(metric([expected[i] for i in picks], [found[i] for i in picks])))
    low, high = (float(v) for v in np.quantile(values, [0.025, 0.975]))
    delta = round(1 - value, 6)
    return DeltaInterval(
        delta, max(0.0, min(1 - high, delta)), min(1.0, max(1 - low, delta)), count, "bootstrap over images"
    )


def budget_note(images: int, max_drop: float) -> str | None:
    """What ``images`` held-out images can prove against ``max_drop``; None when they suffice."""
    needed = min_images(max_drop)
    if needed is None or images >= needed:
        return None
    best = share_interval(1.0, images) if images else None
    shown = "" if best is None else f" (a perfect agreement on {images} proves a drop of at most {best.high:.1%})"
    return (
        f"{images} held-out image(s) cannot prove an accuracy drop within {max_drop:.1%}: that needs at least "
        f"{needed}{shown}; reduced precision is admitted on the point estimate and its delta marked not proven"
    )
