"""Reading Darknet ``.weights``: the header, then each layer's floats in Darknet's order.

The file is memory-mapped and read in place. Unlike Darknet and OpenCV, which accept a
truncated file silently, the size must match the cfg exactly, and every float must be finite.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deploykit.convert.darknet.layers import Layer, Network
from deploykit.errors import ConversionError
from deploykit.io import regular_file_problem, shown


@dataclass
class WeightsHeader:
    major: int
    minor: int
    revision: int
    seen: int
    size_bytes: int

    @property
    def plausible(self) -> bool:
        """Darknet writes versions 0.1.x and 0.2.x (plus >1000 as its 'transposed' flag)."""
        if self.major > 1000 or self.minor > 1000:
            return True
        return 0 <= self.major <= 2 and 0 <= self.minor <= 100 and 0 <= self.revision <= 1000

    def describe(self) -> str:
        return f"{self.major}.{self.minor}.{self.revision}"

    @property
    def transpose(self) -> bool:
        """Darknet's flag for connected weights stored transposed."""
        return self.major > 1000 or self.minor > 1000


class DarknetWeights:
    """A memory-mapped ``.weights`` file with a cursor over its floats."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        problem = regular_file_problem(self.path)
        if problem is not None:
            raise ConversionError(
                f"weights '{shown(self.path)}' | {problem}.",
                hint="pass the Darknet .weights file that belongs to the .cfg.",
            )
        size = self.path.stat().st_size
        if size < 16:
            raise ConversionError(
                f"weights '{self.path}' | is {size} bytes; "
                "a Darknet .weights file starts with a 16- or 20-byte header.",
                hint="the file is empty or truncated; download or export it again.",
            )
        with open(self.path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        major, minor, revision = struct.unpack_from("<3i", self._map, 0)
        if major * 10 + minor >= 2 and major < 1000 and minor < 1000:
            if size < 20:
                raise ConversionError(
                    f"weights '{self.path}' | the 20-byte header is cut short.", hint="the file is truncated."
                )
            (seen,) = struct.unpack_from("<Q", self._map, 12)
            offset = 20
        else:
            (seen,) = struct.unpack_from("<I", self._map, 12)
            offset = 16
        self.header = WeightsHeader(major, minor, revision, seen, offset)
        if not self.header.plausible:  # even when the sizes happen to fit: these floats are not Darknet's
            self._map.close()
            raise ConversionError(
                f"weights '{self.path.name}' | its header says Darknet version {self.header.describe()}, which no "
                "Darknet writes (0.1.x, 0.2.x, or a major version above 1000, Darknet's transposed flag): the file "
                "is not a Darknet .weights file, or its header is corrupt.",
                hint="use the .weights file that Darknet wrote for this cfg (download or export it again).",
            )
        self._offset = offset
        self.float_count = (size - offset) // 4
        self._trailing_bytes = (size - offset) % 4

    def check_size(self, network: Network) -> None:
        """The file must hold exactly the floats the cfg needs; say which layer runs out if not."""
        needed = network.parameter_count
        if needed == self.float_count and not self._trailing_bytes:
            return
        expected_bytes = self.header.size_bytes + 4 * needed
        found_bytes = self.header.size_bytes + 4 * self.float_count + self._trailing_bytes
        header_hint = None
        if not self.header.plausible:
            header_hint = (
                f"its header says Darknet version {self.header.describe()}, which no Darknet writes "
                "(0.1.x, 0.2.x): the file is not a Darknet .weights file, or its header is corrupt."
            )
        if self.float_count < needed:
            running = 0
            for layer in network.layers:
                for block, count in layer.weight_blocks:
                    if running + count > self.float_count:
                        raise ConversionError(
                            f"weights '{self.path.name}' | too short for '{Path(network.cfg.path).name}': "
                            f"{layer.where()} needs {count} floats for its {block}, only "
                            f"{self.float_count - running} remain; expected {expected_bytes} bytes "
                            f"(header {self.header.size_bytes} + 4 × {needed} floats), found {found_bytes}.",
                            hint=header_hint
                            or "the file is truncated or belongs to another cfg (e.g. another class count).",
                        )
                    running += count
        raise ConversionError(
            f"weights '{self.path.name}' | {self.float_count - needed} floats ({found_bytes - expected_bytes} bytes) "
            f"left over after every layer of '{Path(network.cfg.path).name}' is loaded; expected {expected_bytes} "
            f"bytes (header {self.header.size_bytes} + 4 × {needed} floats), found {found_bytes}.",
            hint=header_hint or "these weights belong to another cfg (a bigger network, or more classes).",
        )

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` floats, as a read-only view into the mapped file."""
        array = np.frombuffer(self._map, dtype="<f4", count=count, offset=self._offset)
        self._offset += 4 * count
        return array

    def blocks(self, layer: Layer) -> dict[str, np.ndarray]:
        """The next floats as ``layer``'s weight blocks, by name; refused when a block holds NaN or infinity
        (a model with such a weight computes NaN wherever it reaches, and a skipped verification says nothing)."""
        blocks = {name: self.take(count) for name, count in layer.weight_blocks}
        for name, block in blocks.items():
            bad = block.size - int(np.count_nonzero(np.isfinite(block)))
            if bad:
                raise ConversionError(
                    f"weights '{self.path.name}' | {layer.where()}: {bad} of its {block.size} {name} are NaN or "
                    "infinite.",
                    hint="the file is damaged, or it was saved by a training run that diverged; use weights "
                    "from before the divergence.",
                )
        return blocks

    def close(self) -> None:
        # views into the map may still exist; let the garbage collector unmap it with them
        self._map = None  # type: ignore[assignment]

    def __enter__(self) -> DarknetWeights:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_random_weights(
    network: Network,
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    gain: float = 1.0,
    residual_scale: float = 0.2,
) -> None:
    """Write a valid ``.weights`` file for ``network`` with random values that keep deep nets finite.

    Convolution and connected weights are He-scaled by ``gain`` (activations keep their
    variance along plain chains); the last layer of each residual branch is further scaled by
    ``residual_scale``, so the variance grows by only (1 + scale²) per [shortcut] instead of
    doubling. Batch-norm statistics are near identity. The header is version 0.2.0 (20 bytes).
    """
    rng = np.random.default_rng(seed)
    from deploykit.io import atomic_path

    branch_ends = {layer.index - 1 for layer in network.layers if layer.type == "shortcut"}
    with atomic_path(path) as temporary, open(temporary, "wb") as handle:
        handle.write(struct.pack("<3iQ", 0, 2, 0, 0))
        for layer in network.layers:
            layer_gain = gain * (residual_scale if layer.index in branch_ends else 1.0)
            fan_in = 1
            if layer.type == "convolutional":
                p = layer.params
                fan_in = (layer.in_shape[0] // p["groups"]) * p["size"] * p["size"]
            elif layer.type == "connected":
                fan_in = layer.in_shape[0] * layer.in_shape[1] * layer.in_shape[2]
            for block, count in layer.weight_blocks:
                if block == "weights":
                    values = rng.standard_normal(count) * layer_gain * np.sqrt(2.0 / fan_in)
                elif block == "biases":
                    values = rng.uniform(-0.1, 0.1, count)
                elif block == "scales":
                    values = rng.uniform(0.8, 1.2, count)
                elif block == "rolling_mean":
                    values = rng.uniform(-0.1, 0.1, count)
                else:  # rolling_variance
                    values = rng.uniform(0.8, 1.2, count)
                handle.write(values.astype("<f4").tobytes())
