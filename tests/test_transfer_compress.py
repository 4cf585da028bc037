"""Compressed transfers against the real sshd, through the throttling proxy (issue 20).

Over a slow link the blocks go compressed (zstd where both ends have it, else zlib) and
land byte-identical and verified, both directions, over asyncssh and the system `ssh`;
data that does not shrink goes raw; a bad block is an error and nothing is published.
The proxy counts the bytes that crossed it; no test asserts a time.

Host interpreters: this venv's own (zstandard installed: the host compresses and decodes
in Python); the test hosts' `python3` runs without the venv's packages (no zstd module),
so the host decodes with the `zstd` program, encodes zlib, and where the PATH has no
`zstd` either, decodes zlib only.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rtrain_tui.core.errors import RemoteError
from rtrain_tui.core.host import transfer_program as tp
from rtrain_tui.core.transfers import codec, transfer
from rtrain_tui.core.transfers.meter import Moving
from rtrain_tui.core.transport import openssh_pipe
from rtrain_tui.core.transport.connection import HostConnection
from tests.conftest import Throttled
from tests.sshd import SshHosts

BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # no zstandard there
WITH_ZSTD = sys.executable  # this venv's interpreter: zstandard is installed
SLOW = 50  # Mbit/s: a link where compressing text always pays


def jsonl(path: Path, size: int) -> Path:
    """Chat records with varied text: shrinks several times, as real datasets do."""
    rows, n, i = [], 0, 0
    while n < size:
        row = (f'{{"messages": [{{"role": "user", "content": "question {i}: how many '
               f'{i * 7 % 13} are in {i * 31 % 997}?"}}, {{"role": "assistant", '
               f'"content": "{i * 17 % 101} of them, said model {i % 5}"}}]}}\n').encode()
        rows.append(row)
        n += len(row)
        i += 1
    path.write_bytes(b"".join(rows)[:size])
    return path


@pytest.fixture
def through(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
            hosts: SshHosts) -> str:
    """`asyncssh`, or `system ssh` (the bulk path, its threshold lowered to 1 MiB)."""
    monkeypatch.setenv("HOME", str(hosts.home))
    monkeypatch.setattr(openssh_pipe, "MIN_BYTES", 1 << 40 if request.param == "asyncssh" else 1 << 20)
    return request.param


@pytest.fixture
def encoders(monkeypatch: pytest.MonkeyPatch) -> list[tp.Encoder]:
    """Every upload encoder made (the real ones; only recorded)."""
    made: list[tp.Encoder] = []
    real = codec.encoder_for

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(codec, "encoder_for", recording)
    return made


def ship(link: Throttled, data: Path, work: Path, python: str = "python3",
         labels: list[Moving] | None = None) -> str:
    run_dir = work / "run"
    run_dir.mkdir(parents=True, exist_ok=True)

    def progress(label: str, done: int, total: int) -> None:
        if labels is not None and isinstance(label, Moving):
            labels.append(label)

    async def go() -> None:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            await transfer.ship_dataset(conn, None, data, str(run_dir), progress, python=python)
        finally:
            await conn.close()

    asyncio.run(go())
    return hashlib.sha256((run_dir / data.name).read_bytes()).hexdigest()


@pytest.mark.parametrize("through", ["asyncssh", "system ssh"], indirect=True)
@pytest.mark.parametrize("python", [WITH_ZSTD, "python3"], ids=["zstd module", "zstd program"])
def test_a_text_dataset_goes_compressed_with_zstd_and_lands_identical(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, through: str,
    python: str, encoders: list[tp.Encoder],
) -> None:
    data = jsonl(tmp_path / "train.jsonl", 6 << 20)
    link = throttled("gpu", rate_mbit=SLOW)
    labels: list[Moving] = []
    digest = ship(link, data, tmp_path / "work", python, labels)
    assert digest == hashlib.sha256(data.read_bytes()).hexdigest()
    assert [p.name for p in (tmp_path / "work" / ".datasets").iterdir()] == [digest]
    assert [e.codec for e in encoders] == [tp.ZSTDS]  # one stream, either decoder
    up, _ = link.proxy.counts()
    size = data.stat().st_size
    assert up < size / 2, (up, size)  # on the wire: a fraction of the file
    assert labels[-1].wire < size / 2 and labels[-1].wire == encoders[0].wire


@pytest.mark.parametrize("through", ["asyncssh", "system ssh"], indirect=True)
def test_a_host_without_zstd_gets_zlib_both_ways(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path, through: str,
    encoders: list[tp.Encoder], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host's Python has no zstd module and its PATH no `zstd` program: the
    trainer's interpreter is a script that runs the base one with such a PATH."""
    bare = tmp_path / "bin"  # no zstd here
    bare.mkdir()
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPATH={bare} exec {BASE_PYTHON} "$@"\n')
    python.chmod(0o755)
    link = throttled("gpu", rate_mbit=SLOW)
    data = jsonl(tmp_path / "train.jsonl", 3 << 20)
    digest = ship(link, data, tmp_path / "work", str(python))
    assert digest == hashlib.sha256(data.read_bytes()).hexdigest()
    assert [e.codec for e in encoders] == [tp.ZLIB]
    assert encoders[0].wire < data.stat().st_size / 2  # its first block at least

    # and a fetch from it comes zlib-compressed too
    kinds: list[int] = []
    real = codec.decode_block
    monkeypatch.setattr(codec, "decode_block",
                        lambda kind, payload, n: kinds.append(kind) or real(kind, payload, n))
    out = tmp_path / "back"
    fetched = fetch(link, tmp_path / "work" / "run", "train.jsonl", out, python=str(python))
    assert fetched.read_bytes() == data.read_bytes()
    assert kinds and set(kinds) == {tp.ZLIB}


@pytest.mark.parametrize("through", ["asyncssh", "system ssh"], indirect=True)
def test_random_bytes_go_raw(hosts: SshHosts, throttled: Callable[..., Throttled],
                             tmp_path: Path, through: str, encoders: list[tp.Encoder]) -> None:
    data = tmp_path / "noise.jsonl"
    data.write_bytes(os.urandom(4 << 20))
    link = throttled("gpu", rate_mbit=SLOW)
    labels: list[Moving] = []
    digest = ship(link, data, tmp_path / "work", labels=labels)
    assert digest == hashlib.sha256(data.read_bytes()).hexdigest()
    size = data.stat().st_size
    headers = tp.HEAD.size * (size // codec.BLOCK + 1)
    assert size < encoders[0].wire <= size + headers  # every byte raw, a header per block
    assert labels[-1].wire == encoders[0].wire
    up, _ = link.proxy.counts()
    assert up > size


def fetch(link: Throttled, run_dir: Path, rel: str, out: Path,
          labels: list[Moving] | None = None, python: str = "python3") -> Path:
    def progress(label: str, done: int, total: int) -> None:
        if labels is not None and isinstance(label, Moving):
            labels.append(label)

    async def go() -> Path:
        conn = HostConnection(link.alias, link.ssh_config)
        try:
            return await transfer.fetch(conn, str(run_dir), rel, out, progress, python=python)
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.mark.parametrize("python", [WITH_ZSTD, "python3"], ids=["zstd module", "zlib only"])
def test_a_fetch_compresses_text_and_sends_weights_raw(
    hosts: SshHosts, throttled: Callable[..., Throttled], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, python: str,
) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    run = tmp_path / "run"
    model = run / "lora_model"
    model.mkdir(parents=True)
    jsonl(model / "train.log", 4 << 20)
    jsonl(model / "trainer_state.json", 300 << 10)
    weights = os.urandom(2 << 20)
    (model / "adapter_model.safetensors").write_bytes(weights)
    (model / "tiny.json").write_text("{}")
    kinds: list[int] = []
    real = codec.decode_block
    monkeypatch.setattr(codec, "decode_block",
                        lambda kind, payload, n: kinds.append(kind) or real(kind, payload, n))
    link = throttled("gpu", rate_mbit=SLOW)
    labels: list[Moving] = []
    got = fetch(link, run, "lora_model", tmp_path / "out", labels, python)
    for name in ("train.log", "trainer_state.json", "adapter_model.safetensors", "tiny.json"):
        assert (got / name).read_bytes() == (model / name).read_bytes(), name
    assert set(kinds) == {tp.ZSTD if python == WITH_ZSTD else tp.ZLIB}
    text = (4 << 20) + (300 << 10)
    _, down = link.proxy.counts()
    assert down < text / 2 + len(weights) + (256 << 10), down  # the weights went raw
    assert len(weights) < labels[-1].wire < text / 2 + len(weights)


def test_a_corrupt_block_in_an_upload_is_refused_and_nothing_is_published(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's encoder is made to flip a byte of its third compressed block (of its
    stream: a block's own check is the stream's decoding, then the file's SHA-256)."""
    monkeypatch.setenv("HOME", str(hosts.home))
    real = codec.encoder_for

    class Flipping:
        def __init__(self, stream: codec.ZstdStream) -> None:
            self.stream, self.count = stream, 0

        def __call__(self, b: bytes, level: int, last: bool = False) -> bytes:
            packed = bytearray(self.stream(b, level, last))
            self.count += 1
            if self.count == 3:
                packed[len(packed) // 2] ^= 0xFF
            return bytes(packed)

        def end(self) -> bytes:
            return self.stream.end()

    def breaking(*args, **kwargs):  # type: ignore[no-untyped-def]
        enc = real(*args, **kwargs)
        assert enc.stream is not None  # the test host decodes zstd
        enc.stream = Flipping(enc.stream)
        return enc

    monkeypatch.setattr(codec, "encoder_for", breaking)
    data = jsonl(tmp_path / "train.jsonl", 4 << 20)
    work = tmp_path / "work"
    with pytest.raises(RemoteError) as refused:
        ship(Throttled("gpu", hosts.ssh_config, None), data, work)  # type: ignore[arg-type]
    assert "arrived corrupted" in str(refused.value)
    assert list((work / ".datasets").iterdir()) == []
    assert not (work / "run" / data.name).exists()


BAD_HOST = """#!{python}
# Stands in for the host's python: answers a fetch with a zlib block that does not decode.
import hashlib, struct, sys, zlib
out = sys.stdout.buffer
out.write(b"rtrain-transfer 2 d=zlib e=zlib\\n")
data = b"line of a log\\n" * 1000
out.write(b"f %d 0 %s\\ne\\n" % (len(data), b"train.log".hex().encode()))
out.flush()
sys.stdin.buffer.readline()
bad = bytearray(zlib.compress(data))
bad[len(bad) // 2] ^= 0xFF
out.write(struct.pack(">cIQQBII", b"H", 0, len(data), 0, 1, len(data), len(bad)) + bytes(bad))
out.write(struct.pack(">cB", b"T", 1) + hashlib.sha256(data).digest() + b"B")
out.flush()
sys.stdin.buffer.readline()
"""


def test_a_corrupt_block_in_a_fetch_is_refused_and_nothing_lands(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(hosts.home))
    fake = tmp_path / "python"
    fake.write_text(BAD_HOST.format(python=sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "out"
    with pytest.raises(RemoteError) as refused:
        fetch(Throttled("gpu", hosts.ssh_config, None), tmp_path, "train.log", out,  # type: ignore[arg-type]
              python=str(fake))
    assert "train.log' arrived corrupted" in str(refused.value)
    assert list(out.iterdir()) == []  # no train.log, no .part, no lock
