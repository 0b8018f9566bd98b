"""dp_fl tasks: data in the real on-disk format, model and metrics for each task."""
