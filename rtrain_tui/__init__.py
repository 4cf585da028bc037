"""rtrain-tui: start, watch, fetch from and stop fine-tuning runs on SSH GPU hosts."""

__version__ = "0.1.0"
