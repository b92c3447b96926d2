"""Pre- and post-processing for apps: letterbox, normalisation, YOLO decoding, NMS, top-k."""
