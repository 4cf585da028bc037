"""The transfer program's base: where its answers go, and the small helpers every
mode uses. Part of the host's transfer program (transfer_program.py says what it is,
and how its parts travel as one text).
"""

import os
import sys


class Output:
    """Where answers go: the process's stdout, bound in main() (tests bind a buffer).

    One object that every part writes through and none rebinds: here the parts are
    modules of their own, each importing this one; on the host they are one text."""

    def bind(self, stream):
        self.stream = stream
        self.write = stream.write
        self.flush = stream.flush


out = Output()

# Pieces of a pipe's size: a 1 MiB read allocates (and page-faults in) fresh memory each
# time and half-fills it; 64 KiB pieces took a third of the CPU (tests/benchmarks/transfer.py).
PIECE = 1 << 16
# The first line, before anything else: a login banner on stdout or another program is
# told apart from the answers.
GREETING = b"rtrain-transfer 2"


# What the pipe from sshd may hold (Linux's most for a user, by default): at the
# usual 64 KiB, sshd and this program took turns every 64 KiB, each waking the other, on
# cores they share with the client's `ssh`; a whole `start -d` of 512 MiB took 15% longer.
# Only the pipe an upload arrives on: an encoder reads the link's speed from the writes
# that find its pipe full, and the client's at 1 MiB chose too fast a level at 100 Mbit/s
# (so this program's stdout, which a fetch's encoder writes, stays as it is too).
PIPE_BYTES = 1 << 20


def widen_pipe(fd):
    """Let the pipe FD hold PIPE_BYTES where Linux allows it; else leave it as it is."""
    if not sys.platform.startswith("linux"):
        return  # F_SETPIPE_SZ's number means something else elsewhere
    try:
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (ImportError, OSError):  # not a pipe, or over the system's limit
        pass


def line(*parts):
    out.write(b" ".join(parts) + b"\n")


def hx(b):
    return (b.hex() or "-").encode()


def unhex(s):
    return b"" if s == "-" else bytes.fromhex(s)


def readn(inp, n):
    """Exactly N bytes from fd INP, fewer only at end of input."""
    parts = []
    while n:
        b = os.read(inp, min(n, PIECE))
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)

