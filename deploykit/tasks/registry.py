"""The task registry: one spelling per task, looked up and recognised here."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from deploykit.errors import UsageError
from deploykit.metadata import read_metadata
from deploykit.tasks import TASKS
from deploykit.tasks.base import Task
from deploykit.tensors import TensorSpec

_loaded: dict[str, type[Task]] = {}


def task_names() -> tuple[str, ...]:
    """Every registered task name, in the order of recognition."""
    return tuple(TASKS)


def task_class(name: str) -> type[Task]:
    """The ``Task`` class registered under ``name``.

    Raises:
        UsageError: no task of that name is registered.
    """
    if name not in TASKS:
        raise UsageError(f"task '{name}' | is not one of {', '.join(TASKS)}.", hint="e.g. task='detect'.")
    if name not in _loaded:
        module, _, attribute = TASKS[name].partition(":")
        _loaded[name] = getattr(importlib.import_module(module), attribute)
    return _loaded[name]


def pipeline_tasks() -> tuple[str, ...]:
    """The tasks an app pipeline runs end to end (``Detector``, ``Classifier``)."""
    return tuple(name for name in TASKS if task_class(name).pipeline is not None)


def pipeline_task(name: str, subject: str = "task") -> type[Task]:
    """The ``Task`` class of ``name`` when an app pipeline runs it (``predict``, image requests, Ray rows).

    Raises:
        UsageError: no task of that name, or the task has no app pipeline (``embed``).
    """
    runnable = pipeline_tasks()
    if name not in runnable:
        what = "has no app pipeline" if name in TASKS else "is not a registered task"
        raise UsageError(
            f"{subject} '{name}' | {what}; an app pipeline runs {', '.join(runnable)}.",
            hint=f"e.g. --task {runnable[0]}; compare or bench judge the others.",
        )
    return task_class(name)


def recognise(outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str]) -> Task | None:
    """The task of a model, from its outputs and metadata (never from its name), or None.

    The task the metadata states is asked first; then every task in the registry's order.
    """
    stated = read_metadata(metadata).task
    order = ([stated] if stated in TASKS else []) + [name for name in TASKS if name != stated]
    for name in order:
        found = task_class(name).recognise(outputs, metadata, stated)
        if found is not None:
            return found
    return None
