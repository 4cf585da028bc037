"""The host's transfer program (core/host/transfer_program.py), in process: its listing,
its framed file answers and its verified store, on real files in a temp dir.

The end-to-end tests (test_transfer_fetch.py, test_transfer_upload.py) run it on the
sshd fixture; these pin each answer's exact bytes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from rtrain_tui.core import host
from rtrain_tui.core.host import remote_sh
from rtrain_tui.core.host import transfer_program as tp


@pytest.fixture
def out() -> io.BytesIO:
    buf = io.BytesIO()
    tp.out.bind(buf)  # where every part of the program writes (Output)
    return buf


def rows(buf: io.BytesIO) -> list[list[str]]:
    return [r.split(" ") for r in buf.getvalue().decode().splitlines()]


def name(hexpath: str) -> bytes:
    return tp.unhex(hexpath)


def test_hex_paths_round_trip_any_name_and_the_empty_one() -> None:
    for raw in (b"", b"a b", b"new\nline", b"\xff\xfe", b"-"):
        assert tp.unhex(tp.hx(raw).decode()) == raw
    assert tp.hx(b"") == b"-"


def test_listing_walks_sorted_and_names_what_it_skips(tmp_path: Path, out: io.BytesIO) -> None:
    (tmp_path / "lora_model").mkdir()
    (tmp_path / "lora_model" / "b.bin").write_bytes(b"12345")
    (tmp_path / "lora_model" / "a.json").write_text("{}")
    os.mkfifo(tmp_path / "lora_model" / "pipe")
    (tmp_path / "lora_model" / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "lora_model" / "again").symlink_to(tmp_path / "lora_model")
    files = tp.listing(os.fsencode(tmp_path), b"lora_model")
    got = [(r[0], *r[1:-1], name(r[-1])) for r in rows(out)]
    size_a = str((tmp_path / "lora_model" / "a.json").stat().st_size)
    mtime_a = str((tmp_path / "lora_model" / "a.json").stat().st_mtime_ns)
    assert got == [
        ("f", size_a, mtime_a, b"lora_model/a.json"),
        ("s", "loop", b"lora_model/again"),
        ("f", "5", str((tmp_path / "lora_model" / "b.bin").stat().st_mtime_ns), b"lora_model/b.bin"),
        ("s", "dangling", b"lora_model/gone"),
        ("s", "fifo", b"lora_model/pipe"),
    ]
    assert files == [os.fsencode(tmp_path / "lora_model" / n) for n in ("a.json", "b.bin")]


def test_listing_refuses_a_link_out_of_the_run_dir_and_a_missing_path(tmp_path: Path,
                                                                      out: io.BytesIO) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "secret").write_text("x")
    (run / "leak").symlink_to(tmp_path / "secret")
    assert tp.listing(os.fsencode(run), b".") is None
    assert rows(out)[-1] == ["x", "outside", tp.hx(b"leak").decode()]
    assert tp.listing(os.fsencode(run), b"../secret") is None
    assert tp.listing(os.fsencode(run), b"nothing") is None
    assert rows(out)[-2:] == [["x", "outside", tp.hx(b"../secret").decode()],
                              ["x", "missing", tp.hx(b"nothing").decode()]]


def unblock(raw: bytes, size: int) -> tuple[bytes, list[int], bytes]:
    """The `size` raw bytes of a run of blocks at the start of `raw`: (data, each block's
    codec, what follows the blocks)."""
    from rtrain_tui.core.transfers import codec

    data, kinds, at = b"", [], 0
    while len(data) < size:
        kind, n, wire = tp.HEAD.unpack(raw[at:at + tp.HEAD.size])
        at += tp.HEAD.size
        payload = raw[at:at + wire]
        at += wire
        data += payload if kind == tp.RAW else codec.decode_block(kind, payload, n)
        kinds.append(kind)
    return data, kinds, raw[at:]


def test_send_frames_size_bytes_and_the_hash_of_the_same_pass(tmp_path: Path,
                                                            out: io.BytesIO) -> None:
    data = os.urandom(tp.PIECE * 2 + 7)  # more than one piece
    f = tmp_path / "adapter.bin"
    f.write_bytes(data)
    tp.send(os.fsencode(f), 3, tp.Encoder(tp.RAW, None))
    raw = out.getvalue()
    kind, num, size, mtime = struct.unpack(">cIQQ", raw[:21])
    assert (kind, num, size, mtime) == (b"H", 3, len(data), f.stat().st_mtime_ns)
    got, kinds, rest = unblock(raw[21:], size)
    assert got == data and set(kinds) == {tp.RAW}
    assert rest == struct.pack(">cB", b"T", 1) + hashlib.sha256(data).digest()


def test_send_compresses_text_and_sends_random_bytes_raw(tmp_path: Path,
                                                         out: io.BytesIO) -> None:
    text = b"".join(b'{"role": "user", "content": "question %d"}\n' % i for i in range(60000))
    noise = os.urandom(3 * tp.BLOCK)
    (tmp_path / "train.jsonl").write_bytes(text)
    (tmp_path / "noise.dat").write_bytes(noise)
    enc = tp.Encoder(tp.ZLIB, tp.zlib_compress)
    tp.send(os.fsencode(tmp_path / "train.jsonl"), 0, enc)
    got, kinds, rest = unblock(out.getvalue()[21:], len(text))
    assert got == text and set(kinds) == {tp.ZLIB}
    assert len(out.getvalue()) < len(text) / 3  # the wire carries a fraction
    assert rest == struct.pack(">cB", b"T", 1) + hashlib.sha256(text).digest()
    out.seek(0)
    out.truncate()
    tp.send(os.fsencode(tmp_path / "noise.dat"), 1, enc)
    got, kinds, _ = unblock(out.getvalue()[21:], len(noise))
    assert got == noise and kinds == [tp.RAW] * 3  # a header per block, nothing more
    assert len(out.getvalue()) < len(noise) * 1.001


def test_send_answers_s_for_a_file_that_is_gone_or_not_regular(tmp_path: Path,
                                                            out: io.BytesIO) -> None:
    os.mkfifo(tmp_path / "pipe")  # opened non-blocking: never hangs
    tp.send(os.fsencode(tmp_path / "pipe"), 1, tp.Encoder(tp.RAW, None))
    tp.send(os.fsencode(tmp_path / "missing"), 2, tp.Encoder(tp.RAW, None))
    assert out.getvalue() == struct.pack(">cI", b"S", 1) + struct.pack(">cI", b"S", 2)


def _recv(store: Path, payload: bytes, size: int) -> str:
    r, w = os.pipe()
    os.write(w, payload)  # small payloads: the pipe holds them
    os.close(w)
    try:
        tp.recv(os.fsencode(store), size, r)
    finally:
        os.close(r)
    return tp.out.stream.getvalue().decode()


def raw_block(data: bytes) -> bytes:
    return tp.HEAD.pack(tp.RAW, len(data), len(data)) + data


def test_recv_publishes_under_its_hash_only_when_the_hash_agrees(tmp_path: Path,
                                                                 out: io.BytesIO) -> None:
    data = b"row 1\nrow 2\n"
    digest = hashlib.sha256(data).hexdigest()
    assert _recv(tmp_path, raw_block(data) + digest.encode() + b"\n", len(data)) == f"ok={digest}\n"
    assert (tmp_path / digest).read_bytes() == data
    assert (tmp_path / digest).stat().st_mode & 0o777 == 0o600
    # a second upload of the same data finds it there: same answer, one file
    assert _recv(tmp_path, raw_block(data) + digest.encode() + b"\n",
                 len(data)).endswith(f"ok={digest}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [digest]


def test_recv_refuses_corrupt_or_short_input_and_leaves_no_part(tmp_path: Path,
                                                                out: io.BytesIO) -> None:
    data = b"row 1\n"
    assert _recv(tmp_path, raw_block(data) + b"0" * 64 + b"\n", len(data)) == "error=corrupt\n"
    assert _recv(tmp_path, raw_block(data), len(data) + 10).endswith("error=short\n")
    assert list(tmp_path.iterdir()) == []


def test_sent_text_is_the_joined_program_and_runs_as_the_host_runs_it(tmp_path: Path) -> None:
    """What transfer_command sends is the program's parts joined (host.joined), and
    `python -c exec(...)` runs its main."""
    assert remote_sh.TRANSFER_PY == host.joined("transfer_program.py")
    (tmp_path / "f").write_bytes(b"abc")
    command = remote_sh.transfer_command(sys.executable, "list", os.fsencode(tmp_path), b"f")
    code = base64.b64decode(command.split('b64decode("')[1].split('")')[0])
    assert code.decode() == remote_sh.TRANSFER_PY
    r = subprocess.run(["/bin/sh", "-c", command], capture_output=True, timeout=30)
    mtime = (tmp_path / "f").stat().st_mtime_ns
    assert r.stdout == tp.GREETING + f"\nf 3 {mtime} {b'f'.hex()}\ne\n".encode()


def test_the_joined_program_is_every_part_and_needs_nothing_of_rtrain_tui(
    tmp_path: Path,
) -> None:
    """The program is kept as several files (transfer_program_*.py) but the host gets one
    text: every part's code is in it, no import of a part is left, and it runs alone, as
    on a host where rtrain-tui is not installed (`-I -S`: no site-packages). A whole
    upload through it (`recv`: base, codec, store and files at work) is stored verified."""
    parts = sorted(p.name for p in Path(tp.__file__).parent.glob("transfer_program*.py"))
    assert len(parts) > 1
    program = remote_sh.TRANSFER_PY
    for name in parts:
        last_def = [row for row in host.source(name).splitlines() if row.startswith("def ")][-1]
        assert last_def in program, name
    assert "rtrain_tui" not in "".join(
        row for row in program.splitlines() if row.startswith(("import ", "from ")))
    data = os.urandom(3 << 20)
    digest = hashlib.sha256(data).hexdigest()
    wire = b"".join(struct.pack(">BII", tp.RAW, len(data[at:at + tp.BLOCK]),
                                len(data[at:at + tp.BLOCK])) + data[at:at + tp.BLOCK]
                    for at in range(0, len(data), tp.BLOCK))
    command = remote_sh.transfer_command(sys.executable, "recv", os.fsencode(tmp_path), len(data))
    code = command.split("-c ", 1)[1].split(" recv ", 1)[0].strip("'")
    words = command.split(" recv ", 1)[1].split()
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, "recv", *words],
                       input=wire + digest.encode() + b"\n", capture_output=True, timeout=60)
    assert r.stdout.splitlines()[1:] == [b"ok=" + digest.encode()], r.stderr
    assert (tmp_path / digest).read_bytes() == data


def test_the_sent_program_fits_one_argument_of_the_hosts_shell() -> None:
    """sshd hands the command to the login shell as one argument (`-c`), which Linux caps
    at MAX_ARG_STRLEN (128 KiB): past it every transfer would fail at once, on every host.
    The program travels whole, comments included, base64 (a third larger): 66 KB on
    2026-12-02, 56 KB the day before."""
    deep = b"/" + b"d" * 4000  # a store under a path as long as Linux allows
    command = remote_sh.transfer_command("python3", "delta", deep, deep, 1 << 40)
    assert len(command.encode()) < 128 << 10


F_GETPIPE_SZ = 1032  # Linux's; the tests run on Linux (CI, this machine)


def test_the_pipe_from_sshd_is_widened_and_anything_else_is_left_alone(tmp_path: Path) -> None:
    """The pipe an upload reaches the host program on holds PIPE_BYTES (widen_pipe); a
    descriptor that is no pipe is untouched."""
    import fcntl

    read_end, write_end = os.pipe()
    try:
        tp.widen_pipe(read_end)
        assert fcntl.fcntl(read_end, F_GETPIPE_SZ) == tp.PIPE_BYTES
    finally:
        os.close(read_end)
        os.close(write_end)
    with (tmp_path / "f").open("wb") as f:
        tp.widen_pipe(f.fileno())  # not a pipe: no error, nothing changed
        f.write(b"x")
    assert (tmp_path / "f").read_bytes() == b"x"
