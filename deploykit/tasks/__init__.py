"""Tasks: what a model's answers mean, and how two runs' answers are compared.

A task (``detect``, ``classify``, ``embed``) is one self-contained module holding a ``Task``
subclass: how to recognise a model of that kind from its outputs and metadata, how to decode its
outputs, how to compare a candidate's answers with the reference's, the metric's name and its
default threshold, and, for a task an app runs, its pipeline and how its results render. ``TASKS``
below is the one table of them, one spelling each; adding a task is
one module and one line here (docs/architecture.md, "Add a task").

This module must stay import-free: ``deploykit.metadata`` reads the task names from it.
"""

from __future__ import annotations

# name → "module:class", imported when first used; the order is the order of recognition
TASKS: dict[str, str] = {
    "detect": "deploykit.tasks.detect:DetectTask",
    "classify": "deploykit.tasks.classify:ClassifyTask",
    "embed": "deploykit.tasks.embed:EmbedTask",
    "segment": "deploykit.tasks.segment:SegmentTask",
}
