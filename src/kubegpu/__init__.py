"""kubegpu: the NVIDIA GPU node stack for Kubernetes, in Python."""

__version__ = "0.1.0"
