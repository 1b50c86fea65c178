"""llamaserve: an OpenAI-compatible server for many GGUF models from one config file.

Models load on first use, unload when idle, share a loaded base between LoRA aliases, and
several stay resident under a model-count or memory budget.
"""

from llamacore import __version__

__all__ = ["__version__"]
