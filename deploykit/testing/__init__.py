"""Helpers for checking your own conversions against independent implementations.

- ``deploykit.testing.darknet``: Darknet's own forward pass (Debian's ``libdarknet``) through a small
  C helper that is compiled only when asked for (``build_helper()``, ``darknet_outputs()`` or a
  conversion with ``oracle="darknet"``), into ``darknet.cache_dir()``.

Importing this package compiles and loads nothing; the library itself uses these helpers only as
oracles, never on the path that produces a model.
"""
