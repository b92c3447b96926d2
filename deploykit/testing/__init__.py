"""Helpers for checking your own conversions against independent implementations.

- ``deploykit.testing.darknet``: Darknet's own forward pass (Debian's ``libdarknet``) through a small
  C helper that is compiled only when asked for (``build_helper()``, ``darknet_outputs()`` or a
  conversion with ``oracle="darknet"``), into ``darknet.cache_dir()``.

Importing this package compiles and loads nothing; the library itself uses these helpers only as
oracles, never on the path that produces a model.
"""

# ``import deploykit.testing as t; t.darknet`` works: the module is light (numpy and deploykit's own
# errors and io) and defers the converter and the compiler to the calls that need them.
from deploykit.testing import darknet as darknet

__all__ = ["darknet"]
