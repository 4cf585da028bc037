"""The package's version, in a module of its own: the CLI's `--version` reads it without
importing the package's `main` (which imports the CLI: a cycle)."""

__version__ = "0.1.0"
