"""Uploads: a full disk is named, concurrent starts share one stored dataset (issue 8)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.transfers import upload
from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Cli, write_config
from tests.small_disk import small_tmpfs
from tests.sshd import SshHosts


def dataset(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.write(os.urandom(size))
    return path


@pytest.fixture
def small_disk(workdir: str) -> Iterator[Path]:
    """The workdir on a 1 MiB tmpfs: a host whose disk is (nearly) full."""
    Path(workdir).mkdir(parents=True)
    with small_tmpfs(Path(workdir)) as disk:
        yield disk


def test_start_refuses_early_when_the_dataset_cannot_fit(cli: Cli, tmp_path: Path, small_disk: Path) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = dataset(tmp_path / "d.jsonl", 2 << 20)
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", str(small_disk),
            "--run-id", "full", "--no-follow")
    last = r.err.strip().splitlines()[-1]
    assert r.rc == 1 and "Traceback" not in r.err, r.err
    assert last.startswith("rtrain-tui: gpu is not ready: no space left: the config and dataset "
                           "need 2.0 MiB, "), last
    assert last.endswith("is free in the workdir; free some space on gpu")
    # Refused by the preflight: nothing was made on the host.
    assert list(small_disk.iterdir()) == []


def test_a_start_with_a_dataset_the_host_stores_needs_no_room_for_it(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    """The second run on the same data links the stored copy: a disk with less room left
    than the dataset takes it (a big dataset on a disk that holds it once)."""
    Path(workdir).mkdir(parents=True)
    with small_tmpfs(Path(workdir), "4m") as disk:
        config = write_config(tmp_path / "c.yaml", steps=1)
        data = dataset(tmp_path / "d.jsonl", 2 << 20)
        r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", str(disk),
                "--run-id", "one", "--no-follow")
        assert r.rc == 0, r.err
        # The disk fills: room for a config and a run's files, not for the dataset again.
        (disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(disk).free - (1 << 20)))
        r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", str(disk),
                "--run-id", "two", "--no-follow")
        assert r.rc == 0, r.err
        assert (disk / "two" / "d.jsonl").read_bytes() == data.read_bytes()
        assert len(list((disk / ".datasets").iterdir())) == 1


@pytest.mark.parametrize("through", ["asyncssh", "the system's ssh"])
def test_disk_full_mid_upload_is_named_and_leaves_no_partial_file(
    hosts: SshHosts, tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch,
    through: str,
) -> None:
    """The early check passed (space was taken meanwhile): the host program's ENOSPC."""
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 40 if through == "asyncssh" else 0)
    data = dataset(tmp_path / "d.jsonl", 2 << 20)
    cache = small_disk / ".datasets"
    cache.mkdir()

    async def go() -> str:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            await upload.stream_upload(conn, data, str(cache), data.stat().st_size, None,
                                          "python3", str(small_disk))
        except RemoteError as exc:
            return str(exc)
        finally:
            await conn.close()
        return "no error"

    assert asyncio.run(go()).startswith(f"no space left on gpu ({small_disk})")
    assert list(cache.iterdir()) == []
    # nothing is left filling the disk: a small dataset uploads fine afterwards
    small = dataset(tmp_path / "s.jsonl", 100 << 10)

    async def again() -> str:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            return (await upload.stream_upload(conn, small, str(cache), small.stat().st_size,
                                                  None, "python3", str(small_disk))).digest
        finally:
            await conn.close()

    digest = asyncio.run(again())
    assert [p.name for p in cache.iterdir()] == [digest]


def test_twenty_concurrent_starts_with_one_new_dataset_all_succeed_and_store_it_once(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = dataset(tmp_path / "d.jsonl", 3 << 20)
    # One index per start: this test is about the host's dataset store, not the local
    # index's lock (20 processes on 2 busy cores can hold it past its 5 s bound). Nor
    # about GPUs: the host has one free, and it records whom it gave it to, so 19 starts
    # asking for one would rightly be refused (test_queue_sshd.py); --gpus 0 asks none.
    procs = [Cli(cli.hosts, tmp_path / f"runs{i}.toml").popen(
        "start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
        "--run-id", f"s{i:02d}", "--gpus", "0", "--no-follow") for i in range(20)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    stored = list((Path(workdir) / ".datasets").iterdir())
    assert len(stored) == 1, stored
    for i in range(20):
        placed = Path(workdir) / f"s{i:02d}" / "d.jsonl"
        assert placed.stat().st_ino == stored[0].stat().st_ino


def test_stale_part_files_are_cleaned_by_the_next_start(cli: Cli, tmp_path: Path, workdir: str) -> None:
    cache = Path(workdir) / ".datasets"
    cache.mkdir(parents=True)
    old, fresh = cache / ".up-old.part", cache / ".up-fresh.part"
    old.write_bytes(b"x" * 1000)
    fresh.write_bytes(b"y" * 1000)
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = dataset(tmp_path / "d.jsonl", 1000)
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
            "--run-id", "next", "--no-follow")
    assert r.rc == 0, r.err
    assert not old.exists() and fresh.exists()


def test_the_stale_upload_cleanup_spares_a_users_part_files_in_run_directories(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    earlier = Path(workdir) / "earlier"
    (earlier / "sub").mkdir(parents=True)
    (Path(workdir) / ".datasets").mkdir()
    users = [earlier / "ckpt.part", earlier / "sub" / "shard.part", earlier / ".up-x.part",
             Path(workdir) / "notes.part"]
    ours = [earlier / "config.yaml.part", earlier / "run.sh.part", earlier / "notify.pyz.part",
            Path(workdir) / ".datasets" / ".up-0123456789abcdef.part"]
    two_days_ago = time.time() - 2 * 86400
    for path in users + ours:
        path.write_bytes(b"z" * 100)
        os.utime(path, (two_days_ago, two_days_ago))
    # A killed start's notify.json.part holds tokens: it goes after 10 minutes; one being
    # written now (a start under way) stays.
    tokens, writing = earlier / "notify.json.part", Path(workdir) / "other" / "notify.json.part"
    writing.parent.mkdir()
    for path in (tokens, writing):
        path.write_bytes(b"{}")
    eleven_minutes_ago = time.time() - 11 * 60
    os.utime(tokens, (eleven_minutes_ago, eleven_minutes_ago))
    ours.append(tokens)
    users.append(writing)
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = dataset(tmp_path / "d.jsonl", 1000)
    r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
            "--run-id", "next", "--no-follow")
    assert r.rc == 0, r.err
    assert [p for p in users if not p.exists()] == []
    assert [p for p in ours if p.exists()] == []


def test_a_killed_upload_leaves_no_part_and_the_dataset_is_not_trusted(
    cli: Cli, tmp_path: Path, workdir: str,
) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = dataset(tmp_path / "d.jsonl", 96 << 20)
    proc = cli.popen("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
                     "--run-id", "cut", "--no-follow")
    cache = Path(workdir) / ".datasets"
    deadline = time.monotonic() + 30
    while not list(cache.glob("*.part")):
        assert proc.poll() is None and time.monotonic() < deadline, "the upload never began"
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while list(cache.glob("*.part")):  # the host program sees the channel close
        assert time.monotonic() < deadline, list(cache.iterdir())
        time.sleep(0.05)
    assert list(cache.iterdir()) == []


def test_a_dataset_already_stored_is_linked_not_sent(cli: Cli, tmp_path: Path, workdir: str) -> None:
    config = write_config(tmp_path / "c.yaml", steps=1)
    data = dataset(tmp_path / "d.jsonl", 1 << 20)
    for run in ("a", "b"):
        r = cli("start", "gpu", "-c", str(config), "-d", str(data), "--workdir", workdir,
                "--run-id", run, "--no-follow")
        assert r.rc == 0, r.err
    a, b = (Path(workdir) / run / "d.jsonl" for run in ("a", "b"))
    assert a.read_bytes() == data.read_bytes() and a.stat().st_ino == b.stat().st_ino
