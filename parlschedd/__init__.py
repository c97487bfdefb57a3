"""parlsched: a resource-aware learning scheduler for parallel applications on Linux."""

__version__ = "0.1.0"
