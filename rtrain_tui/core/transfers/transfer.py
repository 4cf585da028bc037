"""File transfers: datasets up, adapters, checkpoints and logs back, every byte verified.

Bulk data travels over one exec channel per transfer, to a small Python program that
runs on the host with the trainer's interpreter (`host/transfer_program.py`; the host has
it by definition). Why not SFTP: the host then hashes in the same pass that reads or
writes the bytes (SFTP needs a second full read on the host, serially), and many small
files cost no round trip each. A dataset big enough to pay for a second login reaches
that program through the system's `ssh` instead of asyncssh (openssh_pipe.py), with a
fallback. Measured against scp and `ssh tar` in `tests/benchmarks/transfer.py`.

Every file lands under a temporary name and is renamed into place only once the bytes
that arrived hash to what the host hashed (a SHA-256 each side, in the same pass as the
copy), so an interrupted transfer never leaves a file that looks complete; a cancelled
one removes its temporary files. Fetches are confined to the run directory: the path
is checked before any connection (validate.check_fetch_path) and again on the host,
after symlinks resolve. Client memory stays bounded: data moves in ≤ 1 MiB pieces under
the channel's flow control.

Here: the dataset store (store_dataset, ship_dataset, place_dataset) and small files over
SFTP (upload_file). Beside it, each with one reason to change: channel.py (the exec
channel to the host program, and a big upload's early `ssh`), upload.py (one file sent
whole, verified), delta.py (a file sent as the chunks the host lacks), listing.py (a run
directory's confined listing) and fetch.py (files landed here, verified). Callers import
the public names from here.
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.safety import validate
from rtrain_tui.core.transfers import delta
from rtrain_tui.core.transfers.channel import CHUNK, EarlyBulk, Progress
from rtrain_tui.core.transfers.fetch import fetch
from rtrain_tui.core.transfers.listing import RemoteEntry, list_tree
from rtrain_tui.core.transfers.upload import free_kb, no_space, recv_command
from rtrain_tui.core.transport import cold_ssh

if TYPE_CHECKING:
    from rtrain_tui.core.transport.connection import HostConnection

# Callers (engine.py, the TUI, the tests, the benchmarks) import these from here,
# wherever each lives now.
__all__ = [
    "EarlyBulk", "Progress", "RemoteEntry", "early_command", "early_store", "fetch",
    "list_tree", "place_dataset", "remote_sha256", "sha256_file", "ship_dataset",
    "store_dataset", "upload_file",
]

FREE_MARGIN = 1 << 20  # leave this much beyond the dataset itself


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


async def upload_file(
    conn: HostConnection, sftp: Any, local: Path, remote: str,
    progress: Progress | None = None, digest: str | None = None,
) -> None:
    """Upload a small file (a config) over SFTP via `remote.part`; rename once verified."""
    import asyncssh

    tmp = remote + ".part"
    size = local.stat().st_size
    label = local.name

    def handler(_src: bytes, _dst: bytes, done: int, total: int) -> None:
        if progress:
            progress(label, done, total)

    if progress:
        progress(label, 0, size)
    try:
        await sftp.put(str(local), tmp, progress_handler=handler)
        attrs = await sftp.stat(tmp)
    except (asyncssh.Error, OSError, RemoteError) as exc:
        try:
            await sftp.remove(tmp)
        except (asyncssh.Error, OSError, RemoteError):
            pass
        free = await free_kb(conn, posixpath.dirname(remote))
        if free is not None and free * 1024 < size + 64 * 1024:
            raise no_space(conn, posixpath.dirname(remote)) from None
        raise RemoteError(f"{conn.alias}: upload of {local} failed: {exc}") from None
    digest = digest or await asyncio.to_thread(sha256_file, local)
    if attrs.size != size or await remote_sha256(conn, tmp) != digest:
        await sftp.remove(tmp)
        raise RemoteError(f"{conn.alias}: upload of {local} arrived corrupted; start again.")
    await sftp.posix_rename(tmp, remote)
    if progress:
        progress(label, size, size)


async def remote_sha256(conn: HostConnection, path: str) -> str:
    """SHA-256 of one remote file by absolute path, via the host's shell."""
    directory, name = posixpath.split(path)
    out = await conn.run(remote_sh.checksums(directory, [name]), timeout=600)
    digest, _, got = out.strip().partition("  ")
    return digest if got == f"./{name}" else ""


async def ship_dataset(
    conn: HostConnection, sftp: Any, local: Path, run_dir: str,
    progress: Progress | None = None, python: str = validate.DEFAULT_PYTHON,
) -> delta.Shipped:
    """Put the dataset in the run dir under its own name, uploading it only once per host.

    Datasets are kept by content in `<workdir>/.datasets/<sha256>`, published there only
    after their hash was verified on the host, so a file of that name *is* that
    content: a second run on the same data links it instead of sending gigabytes again.
    Each upload writes a temporary name of its own, so concurrent starts with the same
    new data never collide; the first to verify publishes, the others find it there. A
    new dataset close to a stored one sends only the chunks that differ (delta.py).
    Returns how it went (for tests and benchmarks: how many bytes it sent).
    """
    workdir = posixpath.dirname(run_dir)
    shipped = await _store(conn, local, workdir, progress, python)
    # Placed while its manifest is still being written: neither waits for the other.
    failed = True
    try:
        await place_dataset(conn, local.name, workdir, shipped.digest, run_dir)
        failed = False
    finally:
        await delta.settle(shipped.manifest, abandon=failed)
    return shipped


def early_command(local: Path, workdir: str, python: str = validate.DEFAULT_PYTHON) -> str:
    """The host program that receives `local` into the store of `workdir` as the user gave
    it: a leading `~` is expanded there, as the login shell does (early_store)."""
    store = posixpath.join(workdir.rstrip("/") or "/", ".datasets")
    return recv_command(python, store, local.stat().st_size)


async def early_store(conn: HostConnection, local: Path, workdir: str,
                      python: str = validate.DEFAULT_PYTHON,
                      spawned: cold_ssh.Spawned | None = None) -> EarlyBulk:
    """A big dataset's bulk `ssh … recv` (early_command), started before `workdir` is
    resolved (a round trip). Handed to store_dataset (`early`) with the resolved workdir.
    `spawned`: that `ssh`, started already, before `conn` was made (cold_ssh.py)."""
    if spawned is not None:
        return EarlyBulk.adopt(conn, spawned)
    return await EarlyBulk.start(conn, early_command(local, workdir, python), local.stat().st_size)


async def store_dataset(
    conn: HostConnection, local: Path, workdir: str,
    progress: Progress | None = None, python: str = validate.DEFAULT_PYTHON,
    later: list[asyncio.Future[None]] | None = None, early: EarlyBulk | None = None,
) -> delta.Shipped:
    """Have `local` in the host's store `<workdir>/.datasets/<sha256>` (an absolute
    workdir), sent only when it is not there yet; how it went (its SHA-256, linked,
    whole or a delta, the bytes on the wire).

    Needs no run dir: a start sends the dataset while its preflight and run dir are
    still under way (engine.py), and a store entry is only ever verified content.
    The write of the dataset's chunk manifest (delta.py), when one is due, is waited for
    here, or, given `later`, appended to it still under way: the caller goes on (places
    the dataset, launches) and settles it (`delta.settle`) before it is done.
    `early`: the bulk channel early_store started for this dataset and workdir (ended
    here when the upload does not take it).
    """
    shipped = await _store(conn, local, workdir, progress, python, early)
    if later is None:
        await delta.settle(shipped.manifest)
    elif shipped.manifest is not None:
        later.append(shipped.manifest)
    return shipped


async def _store(conn: HostConnection, local: Path, workdir: str, progress: Progress | None,
                 python: str, early: EarlyBulk | None = None) -> delta.Shipped:
    """store_dataset, saying how the dataset went: linked, whole or as a delta."""
    cache_dir = posixpath.join(workdir, ".datasets")
    size = local.stat().st_size
    command = recv_command(python, cache_dir, size)
    # A big dataset's bulk channel logs in beside the check: most go whole.
    if early is None:
        early = await EarlyBulk.start(conn, command, size)
    else:
        early.stands_for(command, size)
    try:
        shipped = await _store_checked(conn, local, workdir, cache_dir, size, progress, python,
                                       early)
    finally:
        await early.close()
    return replace(shipped, size=size)



async def _store_checked(conn: HostConnection, local: Path, workdir: str, cache_dir: str,
                         size: int, progress: Progress | None, python: str,
                         early: EarlyBulk) -> delta.Shipped:
    """_store from the store's check on; `early` may carry the whole upload's channel."""
    facts = await conn.run(remote_sh.upload_prepare(
        cache_dir, size, posixpath.join(workdir, delta.CHUNKS_DIR)))
    free_kb = same = None
    twins = set()
    manifests = 0
    for row in facts.splitlines():
        key, _, value = row.partition("=")
        if key == "free_kb" and value.strip().isdigit():
            free_kb = int(value)
        elif key == "same":
            twins.add(value.strip())
        elif key == "manifests" and value.strip().isdigit():
            manifests = int(value)
    digest = ""  # known below: hashed when a stored twin may match, else by the upload
    if twins:  # a stored dataset of this very size: worth hashing first to skip the upload
        digest = await asyncio.to_thread(sha256_file, local)
        same = digest in twins
    if same:
        shipped = delta.Shipped(digest, "linked", 0)
        if progress:
            progress(f"{local.name} (already on the host)", size, size)
    else:
        if free_kb is not None and free_kb * 1024 < size + FREE_MARGIN:
            raise no_space(conn, workdir, f": {local.name} needs {_mib(size)}, "
                                           f"{_mib(free_kb * 1024)} free")
        shipped = await delta.ship_new(conn, local, cache_dir, size, progress, python, workdir,
                                       manifests, early)
    return shipped


async def place_dataset(conn: HostConnection, name: str, workdir: str, digest: str,
                        run_dir: str) -> None:
    """Link the stored dataset `digest` into `run_dir` as `name` (copied where links fail)."""
    cached = posixpath.join(workdir, ".datasets", digest)
    out = await conn.run(remote_sh.link_or_copy(cached, posixpath.join(run_dir, name)))
    if out.strip() != "linked=1":
        if "No space" in out:
            raise no_space(conn, workdir)
        raise RemoteError(f"{conn.alias}: could not place {name} in {run_dir}: {out.strip()[:200]}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"

