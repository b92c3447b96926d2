"""``deploykit.ray``: the Ray entry points under the short name (``deploykit.ray.predict(...)``).

The implementation lives in ``deploykit.distributed``; Ray itself is imported only when one of
these runs (a missing Ray is a ``BackendUnavailableError`` naming the ``ray`` extra).
"""

from deploykit.distributed import fleet_benchmark, predict

__all__ = ["fleet_benchmark", "predict"]
