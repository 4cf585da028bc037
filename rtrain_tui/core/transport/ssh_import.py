"""asyncssh's first import, without the C compiler it would run to look for liboqs.

On import, `asyncssh.crypto.pq` asks `ctypes.util.find_library` for liboqs (the
sntrup761 key exchange). On Linux that reads the `ldconfig -p` cache, and when the
library is not there (the usual case: ML-KEM comes from `cryptography` instead) it links
a test program with `gcc`, then runs `ld`: 30-35 ms and 20 ms of CPU in every new process
that connects anywhere (a cold `fetch`, `status`, `start`), measured on this machine.

`install()` adds a finder that lets that one module run with a `find_library` that
reads the cache only, then puts the original back. A liboqs that the dynamic loader
knows (the ldconfig cache) is found as before; one that only a compiler's search path
holds is not, and asyncssh then offers ML-KEM and curve25519 without sntrup761, as on a
machine without liboqs.

It also keeps `cryptography` (51 and later) from printing "DSA is deprecated" five times
on stderr when asyncssh's key modules are imported: every CLI command's error output and
the TUI's screen would carry it. It says nothing a user can act on (asyncssh still only
offers DSA keys someone configured), and it is silenced for asyncssh's modules only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

PROBING_MODULE = "asyncssh.crypto.pq"


class _CacheOnlyLoader(importlib.abc.Loader):
    """Runs the wrapped loader's module with `find_library` reading the ldconfig cache only."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename...: the wrapped one's
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        import ctypes.util

        cache_only = getattr(ctypes.util, "_findSoname_ldconfig", None)
        if cache_only is None:  # not glibc's layout (macOS, musl): nothing to spare
            self._loader.exec_module(module)
            return
        original = ctypes.util.find_library
        ctypes.util.find_library = cache_only
        try:
            self._loader.exec_module(module)
        finally:
            ctypes.util.find_library = original


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != PROBING_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _CacheOnlyLoader(spec.loader)
            sys.meta_path.remove(self)  # once: its job is done (the import returns here)
        return spec


_FINDER = _Finder()


def install() -> None:
    """From now on, asyncssh's first import (wherever it happens) runs no compiler and
    prints no warning about DSA."""
    warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
    if PROBING_MODULE not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
