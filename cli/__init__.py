"""The ``deploykit`` command-line app (installed as ``deploykit.cli``)."""
