"""A small real segmentation network, built in PyTorch and exported to ONNX: the ``segment`` task's model.

torchvision (LRASPP, DeepLabV3) is not among deploykit's test dependencies, so the network is defined
here: a stride-2 3×3 convolution, ReLU, a 1×1 classifier over four classes (``dark``, ``red``,
``green``, ``blue``) and a bilinear upsampling back to the input size, as LRASPP's head does. Its
weights are seeded random ones plus a colour detector (each class channel reads its colour against the
other two, ``dark`` the inverse brightness), so a photo gives a mask with several real regions. The
ONNX file says ``deploykit.task = "segment"`` and its labels in its metadata.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

LABELS = ("dark", "red", "green", "blue")
SIZE = 64


def segmenter_network(seed: int = 0) -> Any:
    """The PyTorch network (eval mode): (batch, 3, 64, 64) RGB in [0, 1] → (batch, 4, 64, 64) class scores."""
    import torch

    class Segmenter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.classifier = torch.nn.Conv2d(8, len(LABELS), 1)

        def forward(self, images: Any) -> Any:
            scores = self.classifier(torch.relu(self.features(images)))
            return torch.nn.functional.interpolate(scores, scale_factor=2.0, mode="bilinear", align_corners=False)

    torch.manual_seed(seed)
    network = Segmenter().eval()
    with torch.no_grad():
        blur = torch.full((3, 3), 1 / 9)
        network.features.weight.mul_(0.1)
        network.features.bias.zero_()
        for channel in range(3):  # features 0-2: the blurred colour channels; 3-7 stay seeded random
            network.features.weight[channel, channel] += blur
        network.classifier.weight.mul_(0.1)
        colours = torch.tensor([[-2.0, -2.0, -2.0], [4, -2, -2], [-2, 4, -2], [-2, -2, 4]])
        network.classifier.weight[:, :3, 0, 0] += colours
        network.classifier.bias.copy_(torch.tensor([1.2, 0.0, 0.0, 0.0]))
    return network


def segmenter_model(path: Path, seed: int = 0) -> Path:
    """The network exported to ONNX (opset 17, dynamic batch) at ``path``, with its task and labels."""
    import onnx
    import torch

    network = segmenter_network(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            network,
            (torch.zeros(1, 3, SIZE, SIZE),),
            str(path),
            input_names=["images"],
            output_names=["scores"],
            dynamic_axes={"images": {0: "batch"}, "scores": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    model = onnx.load(str(path))
    for key, value in (("deploykit.task", "segment"), ("deploykit.labels", json.dumps(list(LABELS)))):
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return path


def torch_scores(batch: np.ndarray, seed: int = 0) -> np.ndarray:
    """The network's scores computed by PyTorch: the independent reference of the ONNX file's."""
    import torch

    with torch.no_grad():
        return segmenter_network(seed)(torch.from_numpy(batch)).numpy()
