"""The cipher rule both SSH clients follow: AES-GCM first where this CPU has AES
instructions, unless the ssh config names its own Ciphers (asyncssh's connection,
connection.py; the system `ssh`, openssh_pipe.py).
"""

from __future__ import annotations

# asyncssh puts chacha20-poly1305 first; its ChaCha20 runs in software while AES-GCM uses
# the CPU's AES instructions: 30-40 % more throughput on uploads and fetches here. The
# server picks the first of ours that it supports, so nothing is lost where it has no GCM.
GCM_FIRST = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
              "aes128-ctr", "aes192-ctr", "aes256-ctr")


def aes_is_fast() -> bool:
    """Whether this CPU has AES instructions (x86 AES-NI, the ARMv8 crypto extension)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith(("flags", "Features")) and " aes" in line for line in f)
    except OSError:
        return platform.machine().lower() in ("arm64", "x86_64", "amd64")  # macOS: all have it

