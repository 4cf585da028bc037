"""File transfers over the host's shared SFTP channel.

Every file lands under a temporary `.part` name and is renamed only once its size and
SHA-256 match the source, so an interrupted transfer never leaves a file that looks
complete. Fetches are confined to the run directory: the path is checked before any
connection (validate.check_fetch_path) and again on the host after symlinks resolve.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import posixpath
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rtrain_tui.core import remote_sh, validate
from rtrain_tui.core.errors import RemoteError

if TYPE_CHECKING:
    import asyncssh

    from rtrain_tui.core.connection import HostConnection

# progress(label, bytes done, bytes total)
Progress = Callable[[str, int, int], None]
CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


async def remote_sha256(conn: HostConnection, path: str) -> str:
    """SHA-256 of one remote file by absolute path, via the host's shell."""
    directory, name = posixpath.split(path)
    return (await _remote_sums(conn, directory, [name])).get(name, "")


async def upload_file(
    conn: HostConnection, sftp: asyncssh.SFTPClient, local: Path, remote: str,
    progress: Progress | None = None, digest: str | None = None,
) -> None:
    """Upload `local` to `remote` via `remote.part`; rename after size and hash match.

    `digest` is the local file's SHA-256 when the caller already has it.
    """
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
    except (asyncssh.Error, OSError) as exc:
        raise RemoteError(f"{conn.alias}: upload of {local} failed: {exc}") from None
    # Hashing reads the whole file: in a thread, so the TUI keeps drawing meanwhile.
    digest = digest or await asyncio.to_thread(sha256_file, local)
    if attrs.size != size or await remote_sha256(conn, tmp) != digest:
        await sftp.remove(tmp)
        raise RemoteError(f"{conn.alias}: upload of {local} arrived corrupted; start again.")
    await sftp.posix_rename(tmp, remote)
    if progress:
        progress(label, size, size)


async def ship_dataset(
    conn: HostConnection, sftp: asyncssh.SFTPClient, local: Path, run_dir: str,
    progress: Progress | None = None,
) -> None:
    """Put the dataset in the run dir under its own name, uploading it only once per host.

    Datasets are kept by content in `<workdir>/.datasets/<sha256>`, written there only
    after their size and hash were verified, so a file of that name *is* that content:
    a second run on the same data links it instead of sending gigabytes again.
    """
    import asyncssh

    digest = await asyncio.to_thread(sha256_file, local)
    size = local.stat().st_size
    cache_dir = posixpath.join(posixpath.dirname(run_dir), ".datasets")
    cached = posixpath.join(cache_dir, digest)
    try:
        already = (await sftp.stat(cached)).size == size
    except asyncssh.SFTPNoSuchFile:
        already = False
    if already:
        if progress:
            progress(f"{local.name} (already on the host)", size, size)
    else:
        await sftp.makedirs(cache_dir, exist_ok=True)
        await upload_file(conn, sftp, local, cached, progress, digest=digest)
    out = await conn.run(remote_sh.link_or_copy(cached, posixpath.join(run_dir, local.name)))
    if out.strip() != "linked=1":
        raise RemoteError(f"{conn.alias}: could not place {local.name} in {run_dir}: {out.strip()[:200]}")


@dataclass(frozen=True)
class RemoteEntry:
    """One entry of a run dir listing, for the fetch browser."""

    path: str  # relative to the run dir
    size: int
    is_dir: bool


async def _confined(sftp: asyncssh.SFTPClient, run_dir: str, path: str, shown: str) -> str:
    """Resolve `path` on the host; refuse it if it leaves the run dir (symlinks too)."""
    import asyncssh

    try:
        real_root = await sftp.realpath(run_dir)
        real = await sftp.realpath(path)
        await sftp.stat(real)
    except asyncssh.SFTPNoSuchFile:
        raise RemoteError(f"{shown!r} does not exist in the run directory {run_dir}.") from None
    except asyncssh.SFTPError as exc:
        raise RemoteError(f"cannot read {shown!r} in {run_dir}: {exc.reason}") from None
    if real != real_root and not real.startswith(real_root.rstrip("/") + "/"):
        raise validate.ValidationError(
            f"{shown!r} points outside the run directory. Fetch paths are relative to it, "
            "e.g. 'lora_model' or 'train.log'."
        )
    return real


async def list_tree(sftp: asyncssh.SFTPClient, run_dir: str, rel: str = ".") -> list[RemoteEntry]:
    """Every file and directory under `rel`, recursively, each confined to the run dir."""
    rel = validate.check_fetch_path(rel)
    root = await _confined(sftp, run_dir, posixpath.join(run_dir, rel), rel)
    entries: list[RemoteEntry] = []
    top = await sftp.stat(root)
    if not stat_mod.S_ISDIR(top.permissions or 0):
        return [RemoteEntry(rel, top.size or 0, False)]
    await _walk(sftp, run_dir, root, "" if rel == "." else rel, entries)
    return entries


async def _walk(sftp: asyncssh.SFTPClient, run_dir: str, real_dir: str, rel: str,
                entries: list[RemoteEntry]) -> None:
    for name in sorted(await sftp.listdir(real_dir)):
        if name in (".", ".."):
            continue
        child_rel = posixpath.join(rel, name) if rel else name
        real = await _confined(sftp, run_dir, posixpath.join(real_dir, name), child_rel)
        attrs = await sftp.stat(real)
        if stat_mod.S_ISDIR(attrs.permissions or 0):
            entries.append(RemoteEntry(child_rel, 0, True))
            await _walk(sftp, run_dir, real, child_rel, entries)
        else:
            entries.append(RemoteEntry(child_rel, attrs.size or 0, False))


async def fetch(
    conn: HostConnection, run_dir: str, rel: str, out: Path,
    progress: Progress | None = None,
) -> Path:
    """Fetch a file or directory from the run dir into `out`; returns the local path."""
    import asyncssh

    rel = validate.check_fetch_path(rel)
    sftp = await conn.sftp()
    files = [e for e in await list_tree(sftp, run_dir, rel) if not e.is_dir]
    name = posixpath.basename(rel) if rel != "." else posixpath.basename(run_dir)
    dest = out / name
    sums = await _remote_sums(conn, run_dir, [e.path for e in files])
    total = sum(e.size for e in files)
    done = 0
    out.mkdir(parents=True, exist_ok=True)
    single = len(files) == 1 and files[0].path == rel
    if not single:
        dest.mkdir(parents=True, exist_ok=True)
    for entry in files:
        inner = posixpath.relpath(entry.path, rel) if rel != "." else entry.path
        target = dest if single else dest / inner
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        base = done

        def handler(_s: bytes, _d: bytes, got: int, _t: int, base: int = base) -> None:
            if progress:
                progress(rel, base + got, total)

        try:
            await sftp.get(posixpath.join(run_dir, entry.path), str(tmp), progress_handler=handler)
        except (asyncssh.Error, OSError) as exc:
            tmp.unlink(missing_ok=True)
            raise RemoteError(f"fetch of {entry.path!r} failed: {exc}") from None
        if (tmp.stat().st_size != entry.size
                or await asyncio.to_thread(sha256_file, tmp) != sums.get(entry.path)):
            tmp.unlink(missing_ok=True)
            raise RemoteError(
                f"{entry.path!r} arrived corrupted or changed during the fetch; fetch again."
            )
        os.replace(tmp, target)
        done += entry.size
        if progress:
            progress(rel, done, total)
    return dest


async def _remote_sums(conn: HostConnection, run_dir: str, rel_paths: list[str]) -> dict[str, str]:
    if not rel_paths:
        return {}
    out = await conn.run(remote_sh.checksums(run_dir, rel_paths), timeout=600)
    sums = {}
    for line in out.splitlines():
        digest, _, path = line.partition("  ")
        if path:
            sums[path] = digest
    return sums
