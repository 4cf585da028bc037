"""A 1 MiB tmpfs: a disk that is (nearly) full, for the tests of what a full disk does.

Mounting needs root, which the tests have (CI runs as root). Without it the test fails
saying so, never skips: a suite that quietly skips its full-disk tests hides them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    """Mount a `size` tmpfs on the existing directory `path` for the duration."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs on {path} (the full-disk tests need root): "
                    f"{r.stderr.strip()}", pytrace=False)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
