"""Fixtures shared by the CLI tests."""

from tests.fuzz.harness import tiny  # noqa: F401  (the tiny assets, built once per session)
