"""A start sends its dataset while its preflight is still asking the host (issue 20).

Against the real sshd. The host here has a stand-in `nvidia-smi` of the test's own that
answers the preflight's GPU query only once the start's dataset has begun to arrive in
the host's store (or gives up after a few seconds, saying so): a start that sent the
dataset only after its preflight never lets it see one. The trainer is the usual stand-in.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from rtrain_tui.core.transfers import delta, transfer
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Cli, write_config
from tests.sshd import REMOTE, SshHosts

GIVE_UP_S = 8  # under the preflight's own `timeout 10` on nvidia-smi


def overlap_host(hosts: SshHosts, tmp_path: Path, workdir: str, then: str) -> tuple[Path, Path]:
    """An ssh config with host `overlap` whose preflight waits for the store's first file.

    `then` is what its nvidia-smi does once it saw one: `answer` (the usual GPUs) or
    `fail` (a broken driver). Returns the config and the file that says what the
    preflight saw: `upload` or `nothing`.
    """
    bin_dir = tmp_path / "overlap_bin"
    bin_dir.mkdir()
    seen = tmp_path / "preflight_saw"
    store = Path(workdir) / ".datasets"
    # `.up-*.part` (the transfer program's name while it receives) or a published file:
    # any entry of the store; a fresh workdir has none before this start.
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$*" in
  *--query-gpu=index,name,*)
    n=0
    until [ -n "$(ls -A '{store}' 2>/dev/null)" ]; do
      n=$((n + 1)); [ $n -ge {GIVE_UP_S * 20} ] && break
      sleep 0.05
    done
    if [ $n -ge {GIVE_UP_S * 20} ]; then echo nothing > '{seen}'; else echo upload > '{seen}'; fi
    if [ {then} = fail ]; then
      echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
      exit 9
    fi;;
esac
exec '{REMOTE / "bin" / "nvidia-smi"}' "$@"
""")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    config = tmp_path / "ssh_config_overlap"
    config.write_text(hosts.ssh_config.read_text() + hosts.extra_host(
        "overlap", sftp="Subsystem sftp internal-sftp\n", home=hosts.remote_homes["gpu"],
        bin_dir=bin_dir))
    return config, seen


def test_start_sends_the_dataset_while_its_preflight_runs(
        cli: Cli, hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    config, seen = overlap_host(hosts, tmp_path, workdir, then="answer")
    data = tmp_path / "data.jsonl"
    data.write_bytes(b'{"text": "hello"}\n' * 50_000)
    r = cli("--ssh-config", str(config), "start", "overlap", "-c",
            str(write_config(tmp_path / "c.yaml", steps=1)), "-d", str(data),
            "--workdir", workdir, "--run-id", "overlapped", "--no-follow")
    assert r.rc == 0, r.err
    assert seen.read_text().strip() == "upload"  # the bytes were on their way during preflight
    placed = Path(workdir) / "overlapped" / "data.jsonl"
    assert placed.read_bytes() == data.read_bytes()
    assert (Path(workdir) / ".datasets" / hashlib.sha256(data.read_bytes()).hexdigest()).is_file()


def test_a_preflight_that_fails_mid_upload_launches_nothing_and_publishes_nothing_wrong(
        cli: Cli, hosts: SshHosts, tmp_path: Path, workdir: str) -> None:
    config, seen = overlap_host(hosts, tmp_path, workdir, then="fail")
    data = tmp_path / "big.jsonl"
    data.write_bytes(os.urandom(48 << 20))
    r = cli("--ssh-config", str(config), "start", "overlap", "-c",
            str(write_config(tmp_path / "c.yaml", steps=1)), "-d", str(data),
            "--workdir", workdir, "--run-id", "refused", "--no-follow")
    assert seen.read_text().strip() == "upload"  # it failed while the dataset was on its way
    assert r.rc == 1
    assert r.err.strip().splitlines() == [
        "rtrain-tui: overlap is not ready: nvidia-smi failed: NVIDIA-SMI has failed because "
        "it couldn't communicate with the NVIDIA driver."]
    assert r.out == ""
    work = Path(workdir)
    assert sorted(p.name for p in work.iterdir()) == [".datasets"]  # no run dir, nothing launched
    assert "refused" not in cli("runs", "--json").out
    # The cancelled upload's part file goes with the host program, which ends on the
    # closed stream; whatever the store holds is a verified dataset under its hash.
    store = work / ".datasets"
    deadline = time.monotonic() + 20
    while any(p.name.endswith(".part") for p in store.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    assert [p.name for p in store.iterdir()] in ([], [digest])


def test_a_dataset_sent_before_the_run_dir_makes_the_workdir_private(
        hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store may be the first thing a start makes on a host: its workdir is 0700 then
    too, as the run dir's creation makes it."""
    monkeypatch.setenv("HOME", str(hosts.home))
    workdir = tmp_path / "fresh" / "work"
    data = tmp_path / "d.jsonl"
    data.write_bytes(b"x\n" * 1000)

    async def go() -> str:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            return (await transfer.store_dataset(conn, data, str(workdir))).digest
        finally:
            await conn.close()

    digest = asyncio.run(go())
    assert (workdir / ".datasets" / digest).read_bytes() == data.read_bytes()
    assert oct(workdir.stat().st_mode & 0o777) == "0o700"
    assert oct((workdir / ".datasets").stat().st_mode & 0o777) == "0o700"


def manifest_host(hosts: SshHosts, tmp_path: Path, pid_file: Path, then: str) -> tuple[Path, Path]:
    """An ssh config with host `manifest` whose `mv` holds back the publishing of a chunk
    manifest (transfers/delta.py) until the run's wrapper wrote `pid_file`, i.e. until the
    start launched, or gives up after a few seconds. `then`: `write` (the manifest is then
    published) or `fail` (its write fails). Returns the config and the file that says what
    the manifest's write saw: `launched` or `waited`."""
    bin_dir = tmp_path / "manifest_bin"
    bin_dir.mkdir()
    seen = tmp_path / "manifest_saw"
    mv = bin_dir / "mv"
    mv.write_text(f"""#!/bin/sh
case "$*" in
  */.dataset-chunks/*)
    n=0
    until [ -e '{pid_file}' ]; do
      n=$((n + 1)); [ $n -ge {GIVE_UP_S * 20} ] && break
      sleep 0.05
    done
    if [ -e '{pid_file}' ]; then echo launched > '{seen}'; else echo waited > '{seen}'; fi
    [ {then} = fail ] && exit 1;;
esac
exec /bin/mv "$@"
""")
    mv.chmod(mv.stat().st_mode | stat.S_IEXEC)
    config = tmp_path / "ssh_config_manifest"
    config.write_text(hosts.ssh_config.read_text() + hosts.extra_host(
        "manifest", sftp="Subsystem sftp internal-sftp\n", home=hosts.remote_homes["gpu"],
        gpus=hosts.gpu_file, bin_dir=bin_dir))
    return config, seen


@pytest.mark.parametrize("then", ["write", "fail"])
def test_a_start_launches_while_its_datasets_manifest_is_written(
        cli: Cli, hosts: SshHosts, tmp_path: Path, workdir: str, then: str) -> None:
    """The chunk manifest of a first upload is best effort: the launch never waits for its
    write. The start still ends with it written, and a start whose write fails launches."""
    pid_file = Path(workdir) / "manifested" / "train.pid"
    config, seen = manifest_host(hosts, tmp_path, pid_file, then)
    data = tmp_path / "data.jsonl"
    data.write_bytes(b'{"text": "hello"}\n' * 120_000)  # over delta.DELTA_FROM: it gets one
    r = cli("--ssh-config", str(config), "start", "manifest", "-c",
            str(write_config(tmp_path / "c.yaml", steps=1)), "-d", str(data),
            "--workdir", workdir, "--run-id", "manifested", "--no-follow")
    assert r.rc == 0, r.err
    assert seen.read_text().strip() == "launched"  # the launch went on beside the write
    assert (Path(workdir) / "manifested" / "data.jsonl").read_bytes() == data.read_bytes()
    chunks = Path(workdir) / delta.CHUNKS_DIR
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    # Written (and waited for) before the command ended, or, failed, nothing left behind.
    assert sorted(p.name for p in chunks.iterdir()) == ([digest] if then == "write" else [])
