"""onnxruntime session options shared by the stages that need a session of their own."""

from __future__ import annotations

from typing import Any

from dlbricks.errors import InvalidArgumentError

__all__ = ["OPT_LEVELS", "session_options"]

#: Graph optimization levels by name, in order.
OPT_LEVELS = ("disable", "basic", "extended", "all")


def session_options(opt_level: str = "disable", threads: int = 1, *, inter_threads: int = 1,
                    optimized_path: str | None = None, profile_prefix: str | None = None,
                    external_weights: bool = False, log_severity: int = 3) -> Any:
    """SessionOptions at ``opt_level`` with ``threads`` intra-op threads.

    ``optimized_path`` saves the optimized graph there (its weights in a side file with
    ``external_weights``); ``profile_prefix`` turns on onnxruntime's profiler.
    """
    import onnxruntime as ort

    if opt_level not in OPT_LEVELS:
        raise InvalidArgumentError(f"'opt_level' must be one of {OPT_LEVELS}. Got {opt_level!r} instead.")
    levels = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    options = ort.SessionOptions()
    options.graph_optimization_level = levels[opt_level]
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = inter_threads
    options.log_severity_level = log_severity
    if optimized_path is not None:
        options.optimized_model_filepath = optimized_path
        if external_weights:
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             "weights.bin")
            options.add_session_config_entry(
                "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options
