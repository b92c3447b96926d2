"""Platforms a candidate's worker can run on: ``host`` and emulated targets.

``linux/arm64`` (and ``linux/riscv64``, through the same code) run the target's builds of the
runtimes under user-mode QEMU, so their numbers, op coverage and precision defaults can be
verified against the host's oracle before the board is on the desk. Their timings say nothing
about the board's speed. ``linux/arm64:cortex-a72`` emulates another CPU than the default.

The registry is one table: the host and ``emulated.TARGETS`` (adding a target is one line there).
"""

from __future__ import annotations

from collections.abc import Sequence

from deploykit.errors import UsageError
from deploykit.platforms.base import HostPlatform, Platform, PlatformStatus
from deploykit.platforms.emulated import TARGETS, EmulatedPlatform

__all__ = ["PLATFORMS", "EmulatedPlatform", "Platform", "PlatformStatus", "get_platform", "parse_platforms"]

PLATFORMS: dict[str, Platform] = {"host": HostPlatform(), **TARGETS}


def platform_names() -> list[str]:
    return list(PLATFORMS)


def get_platform(name: str) -> Platform:
    """``host``, ``linux/arm64`` or ``linux/arm64:<qemu cpu>``.

    Raises:
        UsageError: no platform by that name (the message lists the known ones).
    """
    base, _, cpu = name.strip().lower().partition(":")
    found = PLATFORMS.get(base)
    if found is None or (cpu and not isinstance(found, EmulatedPlatform)):
        raise UsageError(
            f"platform '{name}' | is not a known platform; expected one of {', '.join(PLATFORMS)} "
            "(an emulated one may name a QEMU CPU: linux/arm64:cortex-a72).",
            hint="'deploykit platforms list' shows them and which are prepared.",
        )
    if cpu and isinstance(found, EmulatedPlatform):
        return found.with_cpu(cpu)
    return found


def parse_platforms(text: str | Sequence[str] | None) -> list[Platform]:
    """``host,linux/arm64`` → both platforms, in order, once each; None or empty → [host]."""
    parts = text.split(",") if isinstance(text, str) else list(text or [])
    names = [p.strip() for item in parts for p in item.split(",") if p.strip()]
    platforms = [get_platform(n) for n in dict.fromkeys(names)]
    return platforms or [PLATFORMS["host"]]
