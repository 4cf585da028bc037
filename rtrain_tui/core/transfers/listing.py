"""A run directory's listing, as the host program gives it: every row checked to lie
under what was asked (the host never names where files land here), for the fetch
browser (list_tree) and for a fetch (fetch.py).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rtrain_tui.core.errors import NoSuchPathError, RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transfers.channel import Stream

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection


def shown(name: bytes | str) -> str:
    """A host file name for a one-line message: quoted, every control escaped."""
    if isinstance(name, str):
        name = os.fsencode(name)
    return repr(name.decode("utf-8", "backslashreplace"))



# -- listing --------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteEntry:
    """One entry of a run dir listing, for the fetch browser."""

    path: str  # relative to the run dir (non-UTF-8 bytes as surrogate escapes)
    size: int
    is_dir: bool


@dataclass
class Listing:
    files: list[tuple[bytes, int, int]] = field(default_factory=list)  # (path, size, mtime_ns)
    dirs: list[bytes] = field(default_factory=list)
    skipped: list[tuple[bytes, str]] = field(default_factory=list)  # (path, kind)


async def read_listing(stream: Stream, run_dir: str, rel: str) -> Listing:
    listing = Listing()
    rows = 0
    rel_b = os.fsencode(rel)
    while (row := await stream.line()) != b"e":
        rows += 1
        if rows % 256 == 0:
            await asyncio.sleep(0)  # a listing already buffered parses without a wait
        try:
            _read_row(row, listing, rel_b)
        except (ValueError, IndexError):
            raise RemoteError(f"{stream.conn.alias}: the transfer program answered nonsense; "
                              "is the host's python the trainer's?") from None
        except _Refused as exc:
            if exc.why == b"listed":
                # The host names where files land here: never anywhere else (scp's
                # CVE-2019-6111 was trusting that), whatever its program was made to say.
                raise RemoteError(f"{stream.conn.alias}: the host listed {shown(exc.path)}, "
                                  f"which is not under {shown(rel)}; nothing was fetched.") from None
            if exc.why == b"outside":
                raise validate.ValidationError(
                    f"{shown(exc.path)} points outside the run directory. Fetch paths are "
                    "relative to it, e.g. 'lora_model' or 'train.log'.") from None
            raise NoSuchPathError(f"{shown(rel)} does not exist in the run directory {run_dir}.") from None
    return listing


class _Refused(Exception):
    """A listing row that ends the fetch: the host refused the path (`x outside`, `x
    missing`), or listed one that is not under what was asked (`listed`)."""

    def __init__(self, why: bytes, path: bytes) -> None:
        self.why, self.path = why, path


_SKIP_KINDS = {"fifo", "socket", "device", "special", "loop", "dangling", "unreadable"}


def _read_row(row: bytes, listing: Listing, rel: bytes) -> None:
    """One listing row into `listing` (TRANSFER_PY's format, remote_sh.py)."""
    parts = row.split(b" ")
    tag, path = parts[0], _unhex(parts[-1])
    if tag in (b"f", b"d") and not _under(path, rel):
        raise _Refused(b"listed", path)
    if tag == b"f":
        listing.files.append((path, int(parts[1]), int(parts[2])))
    elif tag == b"d":
        listing.dirs.append(path)
    elif tag == b"s":
        kind = parts[1].decode("ascii", "replace")
        listing.skipped.append((path, kind if kind in _SKIP_KINDS else "special"))
    elif tag == b"x":
        raise _Refused(parts[1], path)
    else:
        raise ValueError(row)


def _under(path: bytes, rel: bytes) -> bool:
    """`path` is `rel` or lies under it: relative, no `..`, `.` or empty part, no NUL."""
    if b"\0" in path or (rel != b"." and path != rel and not path.startswith(rel + b"/")):
        return False
    return all(part not in (b"", b".", b"..") for part in path.split(b"/"))


def _unhex(word: bytes) -> bytes:
    return b"" if word == b"-" else bytes.fromhex(word.decode())


async def list_tree(conn: HostConnection, run_dir: str, rel: str = ".",
                    python: str = validate.DEFAULT_PYTHON) -> list[RemoteEntry]:
    """Every file and directory under `rel`, recursively, each confined to the run dir.

    Symlinks that stay inside are followed (a loop is listed once); files that are not
    regular (a FIFO, a socket) are left out, as a fetch skips them.
    """
    rel = validate.check_fetch_path(rel)
    stream = await Stream.open(conn, remote_sh.transfer_command(
        python, "list", os.fsencode(run_dir), os.fsencode(rel)))
    try:
        listing = await read_listing(stream, run_dir, rel)
    finally:
        await stream.aclose()
    entries = [RemoteEntry(os.fsdecode(p), s, False) for p, s, _ in listing.files]
    entries += [RemoteEntry(os.fsdecode(p), 0, True) for p in listing.dirs]
    return sorted(entries, key=lambda e: e.path)

