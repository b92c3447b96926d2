"""``load``: open a model (a ``Model``, a file or a bundle folder) on a backend and device, in this process.

It lives below the package top so that the library's own modules (vision pipelines, serving,
batch inference) open sessions without importing ``deploykit`` itself; ``deploykit.load`` is this.
A bundle folder is opened by ``deploykit.optimize.bundle`` (imported only for a folder): the one
arrow from here up, named in ``.importlinter``.
"""

from __future__ import annotations

import os

from deploykit.backends.base import Session
from deploykit.backends.options import OptionValue
from deploykit.backends.registry import DEFAULT_BACKEND, get_backend
from deploykit.model import Model


def load(
    model: Model | str | os.PathLike[str],
    backend: str | None = None,
    device: str | None = None,
    *,
    allow_fallback: bool = False,
    **options: OptionValue,
) -> Session:
    """Load a model on a backend and device.

    Args:
        model: a ``Model`` (``deploykit.model.Model.open``: read once, not again here), the path of an
            ``.onnx`` file (or a Darknet ``.cfg`` for OpenCV 4.x), or a bundle folder
            written by ``deploykit optimize -o``: then its chosen model file opens on its chosen
            backend, device, precision and threads (``deploykit.optimize.bundle.open_bundle``).
        backend: ``onnxruntime``/``ort`` (the default), ``openvino``/``ov``, ``opencv``/``cv`` or a plug-in.
        device: the backend's device name; its default device (the CPU) when omitted.
        allow_fallback: run on the CPU when the device cannot be used and report it in
            ``session.info.fallback``; otherwise that is a ``DeviceUnavailableError``.
        **options: backend options, e.g. ``threads=2`` or OpenVINO's ``precision="f32"``.

    Returns:
        an open ``Session``; use it as a context manager. The session runs the runtime in this
        process: a runtime that crashes ends it (``deploykit run`` and ``compare`` use worker
        processes instead; see docs/conformance.md).
    """
    if not isinstance(model, Model) and os.path.isdir(model):
        from deploykit.optimize.bundle import open_bundle

        return open_bundle(model, backend=backend, device=device, allow_fallback=allow_fallback, **options)
    return get_backend(backend or DEFAULT_BACKEND).open(model, device, allow_fallback=allow_fallback, **options)
