"""The one device-name parser: what ``Device.parse`` reads, and how ``DeviceNames`` refuses a name."""

from __future__ import annotations

import pytest

from deploykit.backends.devices import Device, DeviceNames
from deploykit.errors import UsageError

_NAMES = DeviceNames(
    kinds=frozenset({"cpu", "cuda", "openvino"}),
    expected="cpu, cuda, cuda:N or openvino:CPU|GPU",
    indexed=frozenset({"cpu", "cuda"}),
    details={"openvino": frozenset({"CPU", "GPU"})},
    aliases={"gpu": "cuda"},
)


@pytest.mark.parametrize(
    ("text", "separator", "kind", "index", "detail"),
    [
        ("cuda:1", ":", "cuda", 1, ""),
        ("cpu", ":", "cpu", None, ""),
        (" CPU ", ":", "cpu", None, ""),
        ("vulkan:0", ":", "vulkan", 0, ""),
        ("openvino:GPU", ":", "openvino", None, "GPU"),
        ("GPU.1", ".", "gpu", 1, ""),
        ("AUTO:GPU.1,CPU", ".", "auto", None, "GPU.1,CPU"),
    ],
)
def test_parse_reads_kind_index_and_detail_and_keeps_the_text(
    text: str, separator: str, kind: str, index: int | None, detail: str
) -> None:
    device = Device.parse(text, index_separator=separator)
    assert (device.text, device.kind, device.index, device.detail) == (text, kind, index, detail)
    assert device.number == (index or 0)


def test_a_bare_name_has_no_index_or_detail() -> None:
    assert Device.parse("CPU").is_bare("cpu")
    assert not Device.parse("cpu:0").is_bare("cpu")
    assert not Device.parse("cpu:x").is_bare("cpu")


def test_names_a_backend_takes_come_back_with_the_alias_replaced() -> None:
    assert _NAMES.parse("demo", "gpu:2") == Device(text="gpu:2", kind="cuda", index=2)
    assert _NAMES.parse("demo", "openvino:gpu").detail == "gpu"


@pytest.mark.parametrize("text", ["npu", "openvino:0", "cuda:x", "cuda:-1", "openvino:NPU"])
def test_a_name_the_backend_does_not_take_is_a_usage_error_listing_the_names(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        _NAMES.parse("demo", text)
    assert str(caught.value) == (
        f"backend 'demo' | device '{text}' is not a device name; expected cpu, cuda, cuda:N or openvino:CPU|GPU. "
        "Hint: 'deploykit backends' lists the devices this machine offers."
    )
