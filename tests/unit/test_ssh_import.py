"""asyncssh's first import runs no C compiler (core/transport/ssh_import.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

# In a process of its own: asyncssh is imported once per process. A `gcc`, `cc` and `ld`
# on the PATH that only record that they ran stand in for the real ones (ctypes.util
# finds them by name); the ldconfig cache is /sbin/ldconfig's and is read as before.
FIRST_IMPORT = """
import ctypes.util, json, sys
original = ctypes.util.find_library
import rtrain_tui.core.transport.connection
import asyncssh
pq = sys.modules["asyncssh.crypto.pq"]
import inspect
from rtrain_tui.core.transport import ssh_import
print(json.dumps({"restored": ctypes.util.find_library is original,
                  "mlkem": pq.mlkem_available, "connect": callable(asyncssh.connect),
                  "source": "find_library" in inspect.getsource(pq),
                  "finder_left": any(isinstance(f, ssh_import._Finder) for f in sys.meta_path)}))
"""


def compiler_stand_ins(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """(the file each stand-in's name is appended to when it runs, an environment whose
    PATH finds the stand-ins first)."""
    ran = tmp_path / "ran"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("gcc", "cc", "ld"):
        stand_in = bin_dir / tool
        stand_in.write_text(f"#!/bin/sh\necho {tool} >> {ran}\nexit 1\n")
        stand_in.chmod(0o755)
    return ran, {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}


def test_asyncssh_first_import_through_the_connection_module_runs_no_compiler(
        tmp_path: Path) -> None:
    ran, env = compiler_stand_ins(tmp_path)
    out = subprocess.run([sys.executable, "-c", FIRST_IMPORT], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert not ran.exists(), f"ran: {ran.read_text().split()}"
    # asyncssh works as before: ML-KEM from cryptography, find_library is put back, the
    # module's source is still found, and the finder is gone once it has done its job.
    assert json.loads(out) == {"restored": True, "mlkem": True, "connect": True,
                               "source": True, "finder_left": False}


def test_without_the_finder_asyncssh_would_run_the_compiler(tmp_path: Path) -> None:
    """The stand-ins are what the first test relies on: asyncssh imported on its own does
    call them here (no liboqs in the ldconfig cache), so their silence above is ours."""
    ran, env = compiler_stand_ins(tmp_path)
    subprocess.run([sys.executable, "-c", "import asyncssh"], env=env, check=True)
    assert ran.exists() and "gcc" in ran.read_text().split()


def test_asyncssh_first_import_through_the_connection_module_prints_no_warning() -> None:
    """cryptography 51 deprecated DSA, and asyncssh's key modules touch it on import: five
    warnings on stderr, in front of every CLI command's own error line (the CLI tests that
    compare stderr failed on them) and over the TUI's screen."""
    done = subprocess.run([sys.executable, "-c", "import rtrain_tui.core.transport.connection\n"
                           "import asyncssh.crypto.dsa, asyncssh.crypto.misc"],
                          capture_output=True, text=True, check=True)
    assert done.stderr == ""


def test_other_warnings_are_still_shown() -> None:
    """Only asyncssh's DSA warning is silenced: the same words from other code still show."""
    code = ("import warnings, rtrain_tui.core.transport.connection\n"
            "warnings.warn('DSA is deprecated here too', UserWarning)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert "DSA is deprecated here too" in done.stderr
