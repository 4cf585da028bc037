"""The exceptions a user can act on: each message says what went wrong and what to do.

The CLI prints `str(error)` on one line and exits 1; the TUI shows it in a toast.
Anything else escaping the engine is a bug, not a user error.
"""


class RemoteError(Exception):
    """An expected failure: bad input, an unreachable host, a run that will not stop."""


class GpusBusyError(RemoteError):
    """A start found fewer free GPUs than it asked for, or a chosen one in use: `--queue`
    (the start form's "wait for free GPUs") waits for them on the host instead."""


class ValidationError(RemoteError):
    """User input that is refused before any connection is opened."""


class UnreachableError(RemoteError):
    """The host could not be reached or authenticated against."""


class PermanentError(UnreachableError):
    """A failure that retrying cannot fix: followers give up at once on it."""


class HostKeyChangedError(PermanentError):
    """The host presented a key that differs from the one on record (or none is trusted)."""


class AuthError(PermanentError):
    """The host refused every credential we offered."""


class UnknownHostError(PermanentError):
    """The name is neither an alias in the ssh config nor resolvable: a typo."""


class NoSuchRunError(RemoteError):
    """The host answered, and it has no directory for that run id (a typo, another workdir)."""


class NoSuchPathError(RemoteError):
    """The run directory is there, the path asked for in it is not (e.g. `lora_model` of a
    run that never completed)."""


class NotRegularFileError(RemoteError):
    """A run's file that is no regular file (a FIFO, a device): never opened, since opening
    a FIFO blocks the host's sftp-server, and every request behind it, until a writer comes."""


class StuckError(RemoteError):
    """The host never answered an SFTP call in time (a stuck file, a hung NFS mount); the
    channel it held was abandoned. Asking again soon would most likely wait as long."""


class IndexCorruptError(RemoteError):
    """The local run index cannot be parsed; it is left untouched."""


class IndexBusyError(RemoteError):
    """Another process has held the local run index's lock for too long; nothing was written."""
