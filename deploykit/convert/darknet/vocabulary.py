"""What the converter knows of Darknet's vocabulary: activation names, and the cfg keys that only
matter for training (ignored knowingly). Anything outside these sets that changes the math is an
error, never a silent skip.
"""

from __future__ import annotations

ACTIVATIONS = frozenset(
    """
    elu gelu hard_mish hard_swish hardswish hardtan leaky linear loggy logistic mish ramp relie relu
    relu6 selu swish tanh
    """.split()
)

# Activations Darknet knows but this converter does not: an error, never a silent ReLU.
KNOWN_UNCONVERTED = frozenset(
    """
    lhtan normalize_channels normalize_channels_softmax normalize_channels_softmax_maxval plse revleaky
    stair
    """.split()
)

# [net] keys: training settings and the input size (read separately).
NET_KEYS = frozenset(
    """
    B1 B2 adam adversarial_lr angle aspect attention augment_speed badlabels_rejection_percentage batch
    blur burn_in center channels contrastive cudnn_half cutmix decay dynamic_minibatch ema_alpha eps
    equidistant_point exposure flip gamma gaussian_noise height hue init_sequential_subdivisions inputs
    jitter label_smooth_eps learning_rate letter_box loss_scale max_batches max_chart_loss max_crop
    max_ratio min_crop min_ratio mixup momentum mosaic mosaic_bound num_sigmas_reject_badlabels
    optimized_memory policy power random rate resize_step saturation scale scales seen
    sequential_subdivisions step steps subdivisions time_steps track try_fix_nan unsupervised
    use_cuda_graph width workspace_size_limit_MB
    """.split()
)

YOLO_TRAINING = frozenset(
    """
    beta_nms cls_normalizer counters_per_class delta_normalizer dets_for_show dets_for_track
    embedding_layer embedding_size focal_loss ignore_thresh iou_loss iou_normalizer iou_thresh
    iou_thresh_kind jitter label_smooth_eps map max max_delta nms_kind obj_normalizer objectness_smooth
    random resize show_details sim_thresh track_ciou_norm track_history_size truth_thresh
    """.split()
)

REGION_TRAINING = frozenset(
    """
    absolute bias_match class_scale coord_scale focal_loss jitter log map max noobject_scale
    object_scale random rescore sqrt thresh tree
    """.split()
)

CONV_TRAINING = frozenset(
    """
    assisted_excitation bin_output binary cbn flipped learning_rate share_index stop_backward
    stopbackward train xnor
    """.split()
)
