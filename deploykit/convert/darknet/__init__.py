"""Darknet → ONNX: cfg parser, weights reader, graph builder, streaming writer."""
