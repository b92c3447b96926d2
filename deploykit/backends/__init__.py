"""Runtime backends behind one interface; see ``base`` for the contract."""

from deploykit.backends.base import Backend, Session, SessionInfo
from deploykit.backends.options import OptionSpec
from deploykit.backends.registry import all_backends, backend_names, get_backend

__all__ = ["Backend", "OptionSpec", "Session", "SessionInfo", "all_backends", "backend_names", "get_backend"]
