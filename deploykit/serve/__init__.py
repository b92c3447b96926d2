"""``deploykit serve``: models behind the KServe v2 / Open Inference Protocol, over HTTP and gRPC.

The layers, each one module: ``config`` (the frozen values: ``ServedModel``, ``BatchPolicy``,
``ServerSettings``), ``protocol`` (the tensor codec and error statuses), ``runner`` (sessions,
queue and dynamic batching of one model), ``worker`` (a session in its own process),
``repository`` (models by name, metadata, loading and unloading), ``folders`` (what a load may
find), ``model_config`` (Triton's configuration of a model), ``http`` and ``grpc_service`` (the front ends),
``pipelines`` (image in, detections out), ``metrics`` and ``server`` (the running whole).
Web frameworks and grpc are imported by the modules that need them, not here.
The package and its function share the name, so the package itself is callable:
``deploykit.serve(["model.onnx"])`` is ``serve(...)``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from deploykit.serve.config import BatchPolicy, RaySettings, ServedModel, ServerSettings
from deploykit.serve.server import Server, serve


class _CallablePackage(types.ModuleType):
    # a function bound as deploykit.serve would hide this package from 'import deploykit.serve.x'
    def __call__(self, *args: Any, **kwargs: Any) -> None:
        serve(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = ["BatchPolicy", "RaySettings", "ServedModel", "Server", "ServerSettings", "serve"]
