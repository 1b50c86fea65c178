"""The version of llamacore and llamaserve (one distribution): the one place it is written."""

__version__ = "0.1.0"
