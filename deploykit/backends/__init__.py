"""Runtime backends behind one interface; see ``base`` for the contract and ``traits`` for what a
backend declares about itself besides opening models."""

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo
from deploykit.backends.devices import Device, DeviceNames
from deploykit.backends.options import OptionSpec
from deploykit.backends.registry import all_backends, backend_names, get_backend
from deploykit.backends.traits import LoadWording, OraclePolicy, RawRuntime, RuntimePackage, SearchTraits

__all__ = [
    "Backend",
    "Device",
    "DeviceNames",
    "LoadWording",
    "OpenRequest",
    "OptionSpec",
    "OraclePolicy",
    "RawRuntime",
    "RuntimePackage",
    "SearchTraits",
    "Session",
    "SessionInfo",
    "all_backends",
    "backend_names",
    "get_backend",
]
