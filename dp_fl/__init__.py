"""dp_fl: user-level differentially private federated learning on TensorFlow Federated."""
