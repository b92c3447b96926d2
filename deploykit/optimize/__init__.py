"""``optimize``: the fastest configuration that still gives the right answer, as a bundle.

``search`` runs the search (``candidates``: the image split, the variants and candidates;
``rounds``: screening and successive halving; ``answer``: the ranking of what was measured),
``ranking`` holds the one ranking rule (bootstrap intervals; ties to the simpler setup) that
``bench`` uses too, ``results`` the typed report, ``html`` its page, ``manifest`` the bundle's
``deploykit.json`` and the writing of the folder, ``bundle`` its one reader (``read_bundle``) and
openers.

The package and its function share the name, so the package itself is callable:
``deploykit.optimize("model.onnx", "photos/", output="deploy/")`` is ``optimize(...)``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from deploykit.optimize.accuracy import AccuracyEvidenceWarning, DeltaInterval
from deploykit.optimize.bundle import Bundle, BundleManifest, BundleWarning, open_bundle, read_bundle
from deploykit.optimize.plan import OptimizePlan
from deploykit.optimize.ranking import DECISION_RULE, Interval, RankEntry, Ranking, bootstrap_interval, rank
from deploykit.optimize.results import (
    Baseline,
    CandidateResult,
    GroundTruth,
    OptimizeReport,
    OptimizeSettings,
    RoundResult,
    Variant,
)
from deploykit.optimize.search import SearchProgress, optimize


class _CallablePackage(types.ModuleType):
    # a function bound as deploykit.optimize would hide this package from 'import deploykit.optimize.x'
    def __call__(self, *args: Any, **kwargs: Any) -> OptimizeReport:
        return optimize(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = [
    "DECISION_RULE",
    "AccuracyEvidenceWarning",
    "Baseline",
    "Bundle",
    "BundleManifest",
    "BundleWarning",
    "CandidateResult",
    "DeltaInterval",
    "GroundTruth",
    "Interval",
    "OptimizePlan",
    "OptimizeReport",
    "OptimizeSettings",
    "RankEntry",
    "Ranking",
    "RoundResult",
    "SearchProgress",
    "Variant",
    "bootstrap_interval",
    "open_bundle",
    "optimize",
    "rank",
    "read_bundle",
]
