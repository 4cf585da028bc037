"""Fetch is robust to whatever a run directory holds (issue 8), over the real sshd."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.transfers import transfer
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Cli, write_config
from tests.small_disk import small_tmpfs
from tests.sshd import SshHosts


@pytest.fixture
def done_run(cli: Cli, tmp_path: Path, workdir: str) -> Path:
    config = write_config(tmp_path / "c.yaml", steps=2)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "done").rc == 0
    return Path(workdir) / "done"


@pytest.fixture
def live_run(cli: Cli, tmp_path: Path, workdir: str) -> Path:
    config = write_config(tmp_path / "c.yaml", steps=100000, step_seconds=0.002)
    r = cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "live", "--no-follow")
    assert r.rc == 0, r.err
    log = Path(workdir) / "live" / "train.log"
    deadline = time.monotonic() + 20
    while not log.exists() or log.stat().st_size < 2000:
        assert time.monotonic() < deadline, "the run never logged"
        time.sleep(0.05)
    return log.parent


def fetch(cli: Cli, workdir: str, run: str, path: str, out: Path):  # type: ignore[no-untyped-def]
    return cli("fetch", "gpu", run, path, "--out", str(out), "--workdir", workdir)


def tree(root: Path) -> dict[bytes, bytes]:
    """Every regular file under root by its relative name in bytes, with its content."""
    found = {}
    for dirpath, _dirs, files in os.walk(os.fsencode(root)):
        for name in files:
            full = os.path.join(dirpath, name)
            found[os.path.relpath(full, os.fsencode(root))] = Path(os.fsdecode(full)).read_bytes()
    return found


def test_growing_log_of_a_running_run_is_fetched_as_a_prefix_every_time(
    cli: Cli, live_run: Path, workdir: str, tmp_path: Path,
) -> None:
    for i in range(5):
        out = tmp_path / f"o{i}"
        r = fetch(cli, workdir, "live", "train.log", out)
        assert r.rc == 0, r.err
        got = (out / "train.log").read_bytes()
        assert len(got) > 0 and (live_run / "train.log").read_bytes().startswith(got)


def test_fetching_dot_of_a_running_run_works(cli: Cli, live_run: Path, workdir: str, tmp_path: Path) -> None:
    r = fetch(cli, workdir, "live", ".", tmp_path / "o")
    assert r.rc == 0, r.err
    got = tmp_path / "o" / "live"
    assert (got / "config.yaml").read_bytes() == (live_run / "config.yaml").read_bytes()
    assert (live_run / "train.log").read_bytes().startswith((got / "train.log").read_bytes())
    assert not list(got.rglob("*.part"))


@pytest.mark.serial
def test_fifo_and_socket_are_skipped_named_in_a_warning_and_never_hang(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    os.mkfifo(done_run / "lora_model" / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(done_run / "lora_model" / "sock"))
    try:
        began = time.monotonic()
        r = fetch(cli, workdir, "done", "lora_model", tmp_path / "o")
        assert time.monotonic() - began < 15
    finally:
        sock.close()
    assert r.rc == 0, r.err
    warning = [line for line in r.err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "'lora_model/pipe' (fifo)" in warning[0] and "'lora_model/sock' (socket)" in warning[0], r.err
    assert sorted(p.name for p in (tmp_path / "o" / "lora_model").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"]


def test_a_fifo_named_directly_is_refused_in_one_line(cli: Cli, done_run: Path, workdir: str,
                                                      tmp_path: Path) -> None:
    os.mkfifo(done_run / "pipe")
    r = fetch(cli, workdir, "done", "pipe", tmp_path / "o")
    assert r.rc == 1 and len(r.err.strip().splitlines()) == 1, r.err
    assert "'pipe' is not a regular file" in r.err


def test_symlinks_inside_are_followed_once_and_loops_do_not_recurse(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    os.symlink("..", done_run / "lora_model" / "up")  # a loop back to the run dir
    os.symlink("lora_model", done_run / "latest")  # stays inside
    os.symlink("lora_model/adapter_config.json", done_run / "cfg.json")
    r = fetch(cli, workdir, "done", ".", tmp_path / "o")
    assert r.rc == 0, r.err
    assert "RecursionError" not in r.err and "'lora_model/up' (loop)" in r.err
    got = tmp_path / "o" / "done"
    want = (done_run / "lora_model" / "adapter_config.json").read_bytes()
    assert (got / "latest" / "adapter_config.json").read_bytes() == want
    assert (got / "cfg.json").read_bytes() == want
    assert not (got / "lora_model" / "up").exists()


def test_any_posix_name_arrives_under_the_same_bytes(cli: Cli, done_run: Path, workdir: str,
                                                    tmp_path: Path) -> None:
    odd = done_run / "odd"
    odd.mkdir()
    names = [b"new\nline", b"carriage\rreturn", b"back\\slash", b"latin1-\xe9\xff", b" lead space",
             b"-dash", b"\x1b]0;title\x07"]
    for i, name in enumerate(names):
        with open(os.path.join(os.fsencode(odd), name), "wb") as f:
            f.write(b"content %d\n" % i)
    r = fetch(cli, workdir, "done", "odd", tmp_path / "o")
    assert r.rc == 0, r.err
    assert tree(tmp_path / "o" / "odd") == tree(odd)
    assert "\x1b" not in r.out + r.err


def test_ctrl_c_mid_fetch_leaves_no_part_file(cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    big = done_run / "big.bin"
    with big.open("wb") as f:
        f.write(os.urandom(256 << 20))
    out = tmp_path / "o"
    proc = cli.popen("fetch", "gpu", "done", "big.bin", "--out", str(out), "--workdir", workdir)
    deadline = time.monotonic() + 30
    while not (out / "big.bin.part").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the fetch never began"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    out_text, err = proc.communicate(timeout=30)
    assert proc.returncode != 0, (out_text, err)
    assert not list(out.rglob("*.part")) and not (out / "big.bin").exists()


def test_out_being_a_file_is_one_line_before_anything_moves(cli: Cli, done_run: Path, workdir: str,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.write_text("i am a file")
    r = fetch(cli, workdir, "done", "lora_model", out)
    assert r.rc == 1 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"--out {out} is a file" in r.err and "Traceback" not in r.err
    assert out.read_text() == "i am a file"


def test_a_directory_where_a_file_lands_is_one_line_before_anything_moves(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    out = tmp_path / "o"
    (out / "lora_model" / "adapter_model.safetensors").mkdir(parents=True)
    r = fetch(cli, workdir, "done", "lora_model", out)
    assert r.rc == 1 and len(r.err.strip().splitlines()) == 1, r.err
    assert "a directory sits where" in r.err and "Traceback" not in r.err
    assert not (out / "lora_model" / "adapter_config.json").exists(), "something was transferred"
    (out / "lora_model" / "adapter_model.safetensors").rmdir()
    (out / "lora_model").rmdir()
    (out / "train.log").mkdir()
    r = fetch(cli, workdir, "done", "train.log", out)
    assert r.rc == 1 and "a directory sits where" in r.err


def test_refetching_unchanged_files_sends_nothing_but_a_listing(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    out = tmp_path / "o"
    assert fetch(cli, workdir, "done", "lora_model", out).rc == 0
    landed = {p.name: p.stat().st_ino for p in (out / "lora_model").iterdir()}
    assert fetch(cli, workdir, "done", "lora_model", out).rc == 0
    assert {p.name: p.stat().st_ino for p in (out / "lora_model").iterdir()} == landed
    # a file changed on the host is fetched again, verified
    (done_run / "lora_model" / "adapter_config.json").write_text('{"r": 16}\n')
    assert fetch(cli, workdir, "done", "lora_model", out).rc == 0
    assert (out / "lora_model" / "adapter_config.json").read_text() == '{"r": 16}\n'
    assert (out / "lora_model" / "adapter_model.safetensors").stat().st_ino == \
        landed["adapter_model.safetensors"]


def test_a_dangling_symlink_and_an_unreadable_dir_do_not_break_the_fetch(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    os.symlink("nowhere", done_run / "lora_model" / "dangling")
    r = fetch(cli, workdir, "done", "lora_model", tmp_path / "o")
    assert r.rc == 0, r.err
    assert "'lora_model/dangling' (dangling)" in r.err
    sha = hashlib.sha256((done_run / "lora_model" / "adapter_model.safetensors").read_bytes())
    got = hashlib.sha256((tmp_path / "o" / "lora_model" / "adapter_model.safetensors").read_bytes())
    assert sha.hexdigest() == got.hexdigest()


def test_a_full_local_disk_is_one_line_and_leaves_no_part(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    """ENOSPC while a file lands ends the fetch with one line naming it, and no .part."""
    (done_run / "big.bin").write_bytes(os.urandom(3 << 20))
    out = tmp_path / "small-disk"
    out.mkdir()
    with small_tmpfs(out):
        got = fetch(cli, workdir, "done", "big.bin", out)
        assert got.rc == 1 and "Traceback" not in got.err, got.err
        assert got.err.strip().splitlines()[-1] == (
            f"rtrain-tui: cannot write {out / 'big.bin'}: No space left on device"), got.err
        assert list(out.iterdir()) == []


def test_a_host_file_named_like_another_files_part_is_fetched_intact(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    """`ckpt` lands through a temporary name; a host file that is itself `ckpt.part` must
    neither be overwritten by it nor overwrite it."""
    d = done_run / "parts"
    d.mkdir()
    for i in range(40):  # enough files that their .part files are created ahead
        (d / f"f{i:03d}").write_bytes(os.urandom(500 + i))
        (d / f"f{i:03d}.part").write_bytes(b"the host's own .part %d\n" % i)
    r = fetch(cli, workdir, "done", "parts", tmp_path / "o")
    assert r.rc == 0, r.err
    assert tree(tmp_path / "o" / "parts") == tree(d)
    for i in range(0, 40, 3):  # changed on the host: fetched again, beside unchanged .part
        (d / f"f{i:03d}").write_bytes(os.urandom(700))
    r = fetch(cli, workdir, "done", "parts", tmp_path / "o")
    assert r.rc == 0, r.err
    assert tree(tmp_path / "o" / "parts") == tree(d)


@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM],
                                     [signal.SIGINT, signal.SIGINT]],
                         ids=["ctrl-c", "sigterm", "ctrl-c-twice"])
def test_a_signal_mid_fetch_of_many_files_leaves_no_part_file(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path, signals: list[signal.Signals],
) -> None:
    """The small files' .part files are created ahead, in a thread: a cancel removes them
    too, and leaves nothing half-written under a final name. SIGTERM (what CI and
    `timeout` send) cancels like Ctrl-C; before, it killed the fetch and left ~2,000 .part
    files. An impatient second Ctrl-C cut the cleanup short and left hundreds."""
    d = done_run / "many"
    (d / "small").mkdir(parents=True)
    with (d / "a-big.bin").open("wb") as f:  # comes first: the small ones are made meanwhile
        f.write(os.urandom(256 << 20))
    for i in range(2000):
        (d / "small" / f"s{i:04d}.json").write_bytes(b"{}" * (i % 100))
    out = tmp_path / "o"
    proc = cli.popen("fetch", "gpu", "done", "many", "--out", str(out), "--workdir", workdir)
    deadline = time.monotonic() + 30
    while not (out / "many" / "a-big.bin.part").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the fetch never began"
        time.sleep(0.005)
    time.sleep(0.2)
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.01)
    out_text, err = proc.communicate(timeout=30)
    assert proc.returncode == (143 if signals == [signal.SIGTERM] else 130), (out_text, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not list(out.rglob("*.part")), sorted(map(str, out.rglob("*.part")))[:5]
    assert not list((out / "many" / "small").iterdir())
    # The line says what the cancel kept and removed, and it matches the disk.
    kept = [p for p in out.rglob("*") if p.is_file()]
    said = "terminated (SIGTERM)" if signals == [signal.SIGTERM] else "interrupted (Ctrl-C)"
    what = (f"{len(kept)} file(s) had landed whole in {out / 'many'} and are kept (each verified)"
            if kept else "nothing was fetched")
    assert err == f"rtrain-tui: {said}: fetch cancelled; {what}; every partial file was removed.\n"


def test_a_fifo_or_symlink_left_at_a_temporary_name_neither_hangs_nor_redirects_the_fetch(
    cli: Cli, done_run: Path, workdir: str, tmp_path: Path,
) -> None:
    out = tmp_path / "o"
    (out / "lora_model").mkdir(parents=True)
    os.mkfifo(out / "lora_model" / "adapter_config.json.part")
    elsewhere = tmp_path / "precious.txt"
    elsewhere.write_text("keep me")
    os.symlink(elsewhere, out / "lora_model" / "adapter_model.safetensors.part")
    linked = tmp_path / "linked.txt"
    linked.write_text("keep me too")
    (done_run / "lora_model" / "notes.txt").write_text("from the host\n")
    os.link(linked, out / "lora_model" / "notes.txt.part")  # a hard link to a file of yours
    r = cli("fetch", "gpu", "done", "lora_model", "--out", str(out), "--workdir", workdir,
            timeout=30)
    assert r.rc == 0, r.err
    for name, data in tree(done_run / "lora_model").items():
        assert (out / "lora_model" / os.fsdecode(name)).read_bytes() == data
    assert elsewhere.read_text() == "keep me"  # left alone, as is the FIFO
    assert linked.read_text() == "keep me too"  # never written through the link
    assert not list((out / "lora_model").glob("*.part.*"))


LYING_HOST = """#!{python}
# Stands in for the host's python: answers a fetch with a listing that leaves what was asked.
import hashlib, struct, sys
out = sys.stdout.buffer
out.write(b"rtrain-transfer 2 d=zlib e=zlib\\n")
for row in {rows!r}:
    out.write(row + b"\\n")
out.write(b"e\\n")
out.flush()
sys.stdin.buffer.readline()
data = b"owned\\n"
out.write(struct.pack(">cIQQBII", b"H", 0, len(data), 0, 0, len(data), len(data)) + data)
out.write(struct.pack(">cB", b"T", 1) + hashlib.sha256(data).digest() + b"B")
out.flush()
sys.stdin.buffer.readline()
"""


def fetch_from_lying_host(hosts: SshHosts, tmp_path: Path, rows: list[bytes]) -> Path:
    fake = tmp_path / "python"
    fake.write_text(LYING_HOST.format(python=sys.executable, rows=rows))
    fake.chmod(0o755)
    out = tmp_path / "deep" / "o"

    async def go() -> Path:
        conn = HostConnection("gpu", hosts.ssh_config)
        try:
            return await transfer.fetch(conn, str(tmp_path), "lora_model", out, python=str(fake))
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.mark.parametrize("evil", [b"lora_model/../../escaped", b"/tmp/rtrain-escaped-abs",
                                  b"lora_model//x", b"other/escaped", b"lora_model/./x"])
def test_a_host_that_lists_paths_outside_what_was_asked_gets_nothing_written(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: bytes,
) -> None:
    """The host's answers are not trusted to name where files land (scp's CVE-2019-6111):
    a listed path must lie under the fetched path, without `..`, `.` or empty parts."""
    monkeypatch.setenv("HOME", str(hosts.home))
    rows = [b"f 6 0 " + evil.hex().encode(), b"d " + b"lora_model/../../evil-dir".hex().encode()]
    with pytest.raises(RemoteError) as refused:
        fetch_from_lying_host(hosts, tmp_path, rows)
    assert "not under 'lora_model'" in str(refused.value) and "\n" not in str(refused.value)
    assert list((tmp_path / "deep").rglob("*")) == [], "written or made outside --out"
    assert not Path("/tmp/rtrain-escaped-abs").exists()


@pytest.mark.parametrize(("row", "said"), [
    (b"f six 0 6c6f72615f6d6f64656c2f78", "answered nonsense"),
    (b"f 6 0 zz", "answered nonsense"),
    (b"f", "answered nonsense"),
    (b"s \x1b]0;title\x07 6c6f72615f6d6f64656c", "not a regular file or directory (special)"),
])
def test_a_garbled_listing_is_one_line_never_a_traceback_or_a_raw_escape(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: bytes, said: str,
) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    with pytest.raises(RemoteError) as refused:
        fetch_from_lying_host(hosts, tmp_path, [row])
    assert said in str(refused.value) and "\x1b" not in str(refused.value), refused.value


def test_a_second_fetch_into_the_same_place_is_refused_while_the_first_lands(
        cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    """Two runs' big.bin fetched into one --out at once: both wrote big.bin.part (the
    second truncating the first's) and both said "fetched" over bytes that were neither
    run's. The second is now refused with one line; the first lands its own bytes."""
    config = write_config(tmp_path / "c2.yaml", steps=1)
    assert cli("start", "gpu", "-c", str(config), "--workdir", workdir, "--run-id", "other").rc == 0
    for run in ("done", "other"):
        with (Path(workdir) / run / "big.bin").open("wb") as f:
            f.write(os.urandom(64 << 20))
    out = tmp_path / "o"
    first = cli.popen("fetch", "gpu", "done", "big.bin", "--out", str(out), "--workdir", workdir)
    deadline = time.monotonic() + 30
    while not (out / "big.bin.part").exists():
        assert first.poll() is None and time.monotonic() < deadline, "the fetch never began"
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # held mid-landing while the second one asks
    try:
        second = fetch(cli, workdir, "other", "big.bin", out)
    finally:
        first.send_signal(signal.SIGCONT)
    assert (second.rc, second.out) == (1, ""), second.err
    assert second.err == (f"rtrain-tui: another fetch is landing files at {out / 'big.bin'} right "
                          "now; wait for it to finish, or fetch into another --out.\n")
    out_text, err = first.communicate(timeout=120)
    assert (first.returncode, out_text) == (0, f"fetched to {out / 'big.bin'}\n"), err
    assert (out / "big.bin").read_bytes() == (done_run / "big.bin").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["big.bin"]  # no .part, no lock left
    # Once the first is done, the same place takes the other run's file.
    assert fetch(cli, workdir, "other", "big.bin", out).rc == 0
    assert (out / "big.bin").read_bytes() == (Path(workdir) / "other" / "big.bin").read_bytes()


def test_two_host_names_that_land_on_one_local_file_are_not_said_fetched(
        cli: Cli, done_run: Path, workdir: str, tmp_path: Path) -> None:
    """On a case-insensitive file system (macOS) `Model/x.bin` and `model/x.bin` are one
    file: the second overwrote the first and both counted as fetched. A local link makes
    the same two-names-one-file here; the fetch names them instead of saying "fetched"."""
    d = done_run / "cased"
    for name in ("Model", "model"):
        (d / name).mkdir(parents=True)
        (d / name / "x.bin").write_bytes(name.encode() * 1000)
    out = tmp_path / "o"
    (out / "cased").mkdir(parents=True)
    (out / "cased" / "Model").mkdir()
    (out / "cased" / "model").symlink_to("Model")
    r = fetch(cli, workdir, "done", "cased", out)
    assert (r.rc, r.out) == (1, ""), r.err
    assert len(r.err.splitlines()) == 1 and "Traceback" not in r.err, r.err
    assert " and x.bin are one file in " in r.err and "fetch them into separate --out" in r.err
