"""The last fetch destination per host, remembered across sessions.

A small TOML file next to the run index (`fetch_dirs.toml`): `host = "path"`. It is a
convenience, so a file that cannot be read is left exactly as it is (never overwritten)
and the choice is remembered for this session only.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path

import tomli_w


class FetchDirs:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._dirs: dict[str, str] | None = None
        self._writable = True

    def _load(self) -> dict[str, str]:
        if self._dirs is None:
            try:
                data = tomllib.loads(self.path.read_text())
                self._dirs = {k: v for k, v in data.items() if isinstance(v, str)}
            except FileNotFoundError:
                self._dirs = {}
            except (OSError, ValueError, UnicodeError):
                self._dirs, self._writable = {}, False  # keep the user's file untouched
        return self._dirs

    def get(self, host: str) -> Path | None:
        value = self._load().get(host)
        return Path(value) if value else None

    def remember(self, host: str, directory: Path) -> None:
        dirs = self._load()
        if dirs.get(host) == str(directory):
            return
        dirs[host] = str(directory)
        if not self._writable:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".fetch_dirs.")
            with os.fdopen(fd, "wb") as f:
                tomli_w.dump(dirs, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only data dir: remembered for this session
