"""PyTorch models for the converter tests, importable as factories (tests/assets/torch_models.py:NAME)."""

from __future__ import annotations

import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 5)
        # non-trivial running statistics, so folded batch norm is really tested
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(images)))
        x = torch.nn.functional.silu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))


class TokenTagger(nn.Module):
    """Two inputs: int64 token ids into an embedding, and a float mask; two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(50, 12)
        self.proj = nn.Linear(12, 4)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.proj(self.embedding(ids)) * mask.unsqueeze(-1)
        pooled = tokens.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return tokens, pooled


class SequenceLstm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 10, batch_first=True)
        self.out = nn.Linear(10, 3)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(sequence)
        return self.out(hidden)


class GuardedScale(nn.Module):
    """Data-dependent control flow: torch.export refuses it, the TorchScript tracer records one branch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.abs().max() > 1e6:  # an overflow guard real inputs never trip
            return torch.zeros_like(x)
        return torch.tanh(self.linear(x))


class NoisyModel(nn.Module):
    """Adds fresh random noise: the ONNX file can never reproduce PyTorch's numbers."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)


class UsesSvd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.svdvals(x)


def small_cnn() -> SmallCnn:
    torch.manual_seed(0)
    return SmallCnn()


def tiny_logits() -> SmallCnn:
    """A random-initialised classifier whose logits peak near 1e-8: far below f32's atol of 1e-4."""
    torch.manual_seed(0)
    model = SmallCnn()
    with torch.no_grad():
        model.head.weight.mul_(1e-8)
        model.head.bias.zero_()
    return model


def token_tagger() -> TokenTagger:
    torch.manual_seed(1)
    return TokenTagger()


def sequence_lstm() -> SequenceLstm:
    torch.manual_seed(2)
    return SequenceLstm()


def guarded_scale() -> GuardedScale:
    torch.manual_seed(3)
    return GuardedScale()


def noisy_model() -> NoisyModel:
    return NoisyModel()


def uses_svd() -> UsesSvd:
    return UsesSvd()


def broken_factory() -> nn.Module:
    raise RuntimeError("config file 'net.yaml' not found")


def not_a_module() -> dict:
    return {"weights": 1}


class NanOutputs(nn.Module):
    """Outputs NaN wherever the input is positive (part of the output): the reference says nothing there."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, torch.full_like(x, float("nan")), x * 2)


class MutatesInput(nn.Module):
    """Writes into its input tensor before using it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2.0)
        return x + 1


def nan_outputs() -> NanOutputs:
    return NanOutputs()


class InfiniteOutputs(nn.Module):
    """Divides by zero: every output is ±infinity, which any exporter reproduces and which says nothing."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / 0.0


def infinite_outputs() -> InfiniteOutputs:
    return InfiniteOutputs()


def mutates_input() -> MutatesInput:
    return MutatesInput()
