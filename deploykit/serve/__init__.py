"""``deploykit serve``: models behind the KServe v2 / Open Inference Protocol, over HTTP and gRPC.

The layers, each one module: ``config`` (the frozen values: ``ServedModel``, ``BatchPolicy``,
``ServerSettings``), ``protocol`` (the tensor codec and error statuses), ``runner`` (sessions,
queue and dynamic batching of one model), ``worker`` (a session in its own process),
``repository`` (models by name, metadata), ``http`` and ``grpc_service`` (the front ends),
``pipelines`` (image in, detections out), ``metrics`` and ``server`` (the running whole).
Web frameworks and grpc are imported by the modules that need them, not here.
"""

from __future__ import annotations

from deploykit.serve.config import BatchPolicy, ServedModel, ServerSettings
from deploykit.serve.server import Server, serve

__all__ = ["BatchPolicy", "ServedModel", "Server", "ServerSettings", "serve"]
