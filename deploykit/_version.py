"""The package version, in one place (pyproject reads it; modules import it from here, never from the package top)."""

__version__ = "0.1.0"
