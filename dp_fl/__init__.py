"""dp_fl: user-level differentially private federated learning on TensorFlow Federated."""

# Compared between the training process and its remote workers (`runtime.worker_stamp`): a
# worker of another dp_fl release is refused. Raise it with every release.
__version__ = "0.2.0"
