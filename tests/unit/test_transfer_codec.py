"""Compressed transfer blocks (core/transfers/codec.py and the host program's "compressed
blocks" section): the framing both ways, the choice rule, and what a bad block does.

Pure functions and the host program's recv in process; the end-to-end paths (asyncssh
and the system `ssh`, uploads and fetches) are in tests/test_transfer_compress.py.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from rtrain_tui.core.host import transfer_program as tp
from rtrain_tui.core.host import transfer_program_codec as tpc  # where its codecs live
from rtrain_tui.core.transfers import codec

ZSTD_LEVELS, ZLIB_LEVELS = tp.LEVELS[tp.ZSTD], tp.LEVELS[tp.ZLIB]


def jsonl(n: int) -> bytes:
    return b"".join(b'{"messages": [{"role": "user", "content": "what is %d + %d?"}, '
                    b'{"role": "assistant", "content": "%d"}]}\n' % (i, i * 7, i * 8)
                    for i in range(n))


# -- the choice rule -----------------------------------------------------------------
def test_data_that_does_not_shrink_by_a_tenth_goes_raw_whatever_the_link() -> None:
    for link in (None, 1e5, 1e9):
        assert tp.choose(ZSTD_LEVELS, link, 0.95, 500e6) is None
    assert tp.choose(ZSTD_LEVELS, 1e6, None, None) is None  # nothing measured yet


def test_an_unmeasured_link_gets_the_level_for_the_fastest_link_compressing_runs_beside() -> None:
    # Just under FAST_LINK (256 Mbit/s): zstd 3, on blocks and as a stream; zlib's 1.
    assert tp.choose(ZSTD_LEVELS, None, 0.3, 390e6) == 3
    assert tp.choose(tp.LEVELS[tp.ZSTDS], None, 0.3, 370e6) == 3
    assert tp.choose(ZLIB_LEVELS, None, 0.35, 134e6) == 1
    assert tp.choose(ZSTD_LEVELS, None, 0.3, 40e6) == 1  # a slow CPU: the fastest still
    # A first sample that timed the compressor's own start: never raw on that alone.
    assert tp.choose(ZSTD_LEVELS, None, 0.325, 33e6) == 1


def test_a_slower_link_affords_a_slower_tighter_level() -> None:
    links = (100e6, 50e6, 12.5e6, 2.5e6, 1e6)  # bytes/s: 800 Mbit/s down to 8 Mbit/s
    levels = [tp.choose(ZSTD_LEVELS, link, 0.3, 500e6) for link in links]
    assert levels[0] == 1 and levels[-1] >= 9
    assert levels == sorted(levels)  # never looser on a slower link


def test_the_level_in_use_is_kept_unless_another_is_clearly_better() -> None:
    best = tp.choose(ZSTD_LEVELS, 12.5e6, 0.3, 500e6)
    assert best == 9
    # level 6 moves a byte within 5% of level 9 here: no switch on a measurement's noise
    assert tp.choose(ZSTD_LEVELS, 12.5e6, 0.3, 500e6, current=6) == 6
    assert tp.choose(ZSTD_LEVELS, 12.5e6, 0.3, 500e6, current=1) == 9  # 1 is clearly worse
    assert tp.choose(ZSTD_LEVELS, 1e9, 0.3, 60e6, current=3) is None  # raw beats them all


def test_a_link_faster_than_the_compressor_goes_raw() -> None:
    # zlib at 60 MB/s cannot feed a 1 GB/s link: compressing would only cost time.
    assert tp.choose(ZLIB_LEVELS, 1e9, 0.25, 60e6) is None
    assert tp.choose(ZSTD_LEVELS, 5e9, 0.25, 500e6) is None


def test_names_of_compressed_data_and_weights_are_skipped() -> None:
    for name in (b"model.safetensors", b"a/B.GZ", b"x.parquet", b"pytorch_model.bin",
                 b"opt.pth", b"d.zst", b"img.png"):
        assert tp.skipped_by_name(name), name
    for name in (b"train.jsonl", b"trainer_state.json", b"train.log", b"config.yaml"):
        assert not tp.skipped_by_name(name), name


# -- the encoder ---------------------------------------------------------------------
def test_the_encoder_compresses_text_and_sends_random_bytes_raw() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTD, tp.ZLIB)), "train.jsonl")
    text = jsonl(30000)[:tp.BLOCK]
    kind, payload = enc.encode(text)
    assert kind == tp.ZSTD and len(payload) < len(text) / 3
    assert codec.decode_block(kind, payload, len(text)) == text
    noise = os.urandom(tp.BLOCK)
    assert enc.encode(noise) == (tp.RAW, noise)


def test_random_data_is_sampled_again_only_after_recheck_bytes() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZLIB,)), "noise.dat")
    calls = []
    real = enc.compress
    enc.compress = lambda b, lv: calls.append(len(b)) or real(b, lv)
    piece = os.urandom(tp.PIECE)
    assert enc.encode(os.urandom(tp.BLOCK))[0] == tp.RAW
    assert calls == [tp.PIECE]  # a piece of the block sampled, not the whole block
    enc.check_at = float("inf")  # the bytes' rule alone (the clock's below)
    for _ in range(tp.RECHECK // tp.PIECE):
        assert enc.encode(piece) == (tp.RAW, piece)
    assert len(calls) == 1
    enc.encode(piece)
    assert len(calls) == 2
    enc.check_at = 0.0  # RECHECK_S has passed: sampled again however few bytes went
    enc.encode(piece)
    assert len(calls) == 3


def test_a_small_file_follows_what_the_last_ones_did_and_a_big_one_is_sampled() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZLIB,)), "a.json")
    calls = []
    real = enc.compress
    enc.compress = lambda b, lv: calls.append(len(b)) or real(b, lv)
    enc.check_at = float("inf")
    small = os.urandom(3000)
    assert enc.encode(small) == (tp.RAW, small) and len(calls) == 1  # the first is sampled
    for n in range(100):
        enc.start_file(b"f%d.json" % n, len(small))
        assert enc.encode(small) == (tp.RAW, small)
    assert len(calls) == 1
    enc.start_file(b"train.log", 10 * tp.BLOCK)
    text = jsonl(20000)[:tp.BLOCK]
    assert enc.encode(text)[0] == tp.ZLIB and len(calls) == 3  # sample, then the block


def test_a_skipped_name_is_never_compressed_and_the_next_file_is_sampled() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTD,)), "model.safetensors")
    text = jsonl(20000)[:tp.BLOCK]
    assert enc.encode(text) == (tp.RAW, text)
    enc.start_file(b"train.jsonl")
    assert enc.encode(text)[0] == tp.ZSTD


def test_a_host_that_decodes_only_zlib_gets_zlib_and_one_that_decodes_nothing_raw() -> None:
    text = jsonl(20000)[:tp.BLOCK]
    kind, payload = codec.encoder_for(codec.HostCodecs((tp.ZLIB,)), "t.jsonl").encode(text)
    assert kind == tp.ZLIB and zlib.decompress(payload) == text
    assert codec.encoder_for(codec.HostCodecs(()), "t.jsonl").encode(text) == (tp.RAW, text)


def test_the_link_is_measured_only_from_writes_that_waited() -> None:
    enc = tp.Encoder(tp.ZLIB, tp.zlib_compress)
    for _ in range(64):
        enc.sent(tp.BLOCK, 0.00001)  # into an empty buffer: says nothing of the link
    assert enc.link() is None and enc.wire == 64 * tp.BLOCK
    for i in range(1, 5):
        enc.sent(tp.BLOCK, 0.5, now=0.5 * i)
    assert enc.link() == pytest.approx(2 * tp.BLOCK, rel=0.01)


def test_the_link_drains_for_the_whole_time_between_two_waits_not_only_during_them() -> None:
    # 100 Mbit/s: a 270 KB block drains in 21.6 ms; compressing the next one takes 16 ms,
    # so each write waits only the last 5.6 ms. The waits alone read 48 MB/s.
    enc = tp.Encoder(tp.ZSTD, None)
    for i in range(1, 30):
        enc.sent(270_000, 0.0056, now=0.0216 * i)
    assert enc.link() == pytest.approx(12.5e6, rel=0.01)


def test_a_write_that_did_not_wait_breaks_the_measure_the_buffers_may_have_drained() -> None:
    enc = tp.Encoder(tp.ZSTD, None)
    for i in range(1, 30):  # wait, then one that did not, then a wait a second later
        enc.sent(270_000, 0.01, now=2.0 * i)
        enc.sent(270_000, 0.00001, now=2.0 * i + 0.5)
        enc.sent(270_000, 0.01, now=2.0 * i + 1.5)
    assert enc.link() is None  # no two waits in a row: nothing measured


def test_the_short_waits_while_the_buffers_fill_do_not_measure_the_link() -> None:
    enc = tp.Encoder(tp.ZSTD, None)
    for i in range(1, 100):  # ssh takes each block within a millisecond: no link in sight
        enc.sent(300_000, 0.0008, now=0.004 * i)
    assert enc.link() is None
    for i in range(1, 30):  # then the buffers are full: the link's 12.5 MB/s
        enc.sent(300_000, 0.015, now=1.0 + 0.024 * i)
    assert enc.link() == pytest.approx(12.5e6, rel=0.01)


def test_each_link_gets_its_level() -> None:
    # The chat JSONL's fastest level here: 3.34x (0.3 of its size) at 390 MB/s.
    ratio, speed = 0.3, 390e6
    assert tp.choose(ZSTD_LEVELS, 2.5e6, ratio, speed) == 12  # 20 Mbit/s
    assert tp.choose(ZSTD_LEVELS, 12.5e6, ratio, speed) == 9  # 100 Mbit/s: 9 keeps up
    # The CPU shared, level 1 at 200 MB/s: 9 would make 33 MB/s, under what 100 Mbit/s
    # takes of this data (42 MB/s), so a faster level; 12 still fits 20 Mbit/s.
    assert tp.choose(ZSTD_LEVELS, 12.5e6, ratio, 200e6) == 6
    assert tp.choose(ZSTD_LEVELS, 2.5e6, ratio, 200e6) == 12
    assert tp.choose(ZSTD_LEVELS, 1e6, ratio, speed) == 16  # 8 Mbit/s: 16's 4 MB/s is enough
    assert tp.choose(ZSTD_LEVELS, 100e6, ratio, speed) == 1  # 800 Mbit/s: CPUs compete
    # zlib's fastest: 2.83x at 134 MB/s.
    assert tp.choose(ZLIB_LEVELS, 2.5e6, 0.35, 134e6) == 9
    assert tp.choose(ZLIB_LEVELS, 12.5e6, 0.35, 134e6) == 4


def test_a_stream_at_100_mbit_leaves_level_3_for_6_which_is_under_5_percent_better() -> None:
    levels = tp.LEVELS[tp.ZSTDS]
    assert tp.choose(levels, 12.5e6, 0.3, 370e6) == 8  # an idle CPU: 8 keeps up
    # The CPU shared (level 3 measured at 150 MB/s): 6 still keeps up, 4.7% better than 3.
    assert tp.choose(levels, 12.5e6, 0.3, 234e6) == 6
    assert tp.choose(levels, 12.5e6, 0.3, 234e6, current=3) == 6
    assert tp.choose(levels, 12.5e6, 0.3, 370e6, current=6) == 6  # within 3% of 8: it stays


def test_one_block_slowed_by_a_busy_machine_moves_the_speed_a_quarter_of_the_way() -> None:
    import time

    def descheduled(data: bytes, level: int, last: bool = False) -> bytes:
        time.sleep(0.05)  # a block that waited for a CPU: at most 21 MB/s measured
        return bytes(len(data) // 3)

    enc = tp.Encoder(tp.ZSTDS, codec._zstd_compress, descheduled)
    enc.ratio, enc.speed, enc.level = 0.3, 300e6, 6
    enc._measure(6, bytes(tp.BLOCK))
    assert enc.speed >= 225e6  # (3 x 300 + under 90) / 4; halfway it was under 195


def test_once_the_link_is_measured_a_compressor_slower_than_it_never_goes_raw_to_probe() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTD,)), "train.jsonl")
    text = os.urandom(tp.BLOCK // 2).hex().encode()  # shrinks to about half
    for i in range(1, 20):  # a 12.5 MB/s link measured
        enc.sent(1_250_000, 0.05, now=0.1 * i)
    assert enc.link() == pytest.approx(12.5e6, rel=0.01)
    for _ in range(64):  # then the compressor falls behind: no write waits any more
        kind, payload = enc.encode(text)
        enc.sent(tp.HEAD.size + len(payload), 0.0)
        if enc.unwaited >= tp.PROBE:
            break
    assert enc.unwaited >= tp.PROBE
    assert enc.encode(text)[0] == tp.ZSTD and not enc.probed and enc.level is not None


# -- greeting and decoding -----------------------------------------------------------
def test_the_greeting_says_the_codecs_and_anything_else_is_refused() -> None:
    assert codec.parse_greeting(b"rtrain-transfer 2 d=zstd,zlib e=zlib") == \
        codec.HostCodecs((tp.ZSTD, tp.ZLIB), (tp.ZLIB,))
    assert codec.parse_greeting(b"rtrain-transfer 2") == codec.HostCodecs()
    for other in (b"rtrain-transfer 1", b"rtrain-transfer 22", b"Welcome to Ubuntu", b""):
        assert codec.parse_greeting(other) is None, other


def test_a_block_is_decoded_to_exactly_its_length_or_refused() -> None:
    text = jsonl(1000)
    packed = zlib.compress(text, 1)
    assert codec.decode_block(tp.ZLIB, packed, len(text)) == text
    bad = bytearray(packed)
    bad[len(bad) // 2] ^= 0xFF
    for kind, payload, n in ((tp.ZLIB, bytes(bad), len(text)),  # a flipped byte
                             (tp.ZLIB, packed, len(text) - 1),  # longer than it says
                             (tp.ZLIB, packed, len(text) + 1),  # shorter
                             (tp.ZLIB, zlib.compress(bytes(64 << 20)), 100),  # a bomb
                             (tp.ZSTD, codec._zstd_compress(text, 3)[:-4], len(text)),
                             (7, packed, len(text))):
        with pytest.raises(codec.CorruptBlock):
            codec.decode_block(kind, payload, n)
    assert codec.decode_block(tp.ZSTD, codec._zstd_compress(text, 3), len(text)) == text


def test_a_header_that_does_not_fit_the_file_is_refused() -> None:
    codec.check_head(tp.RAW, 10, 10, 10)
    for head in ((tp.RAW, 10, 11, 10), (tp.RAW, 11, 11, 10), (tp.ZLIB, 0, 5, 10),
                 (tp.ZLIB, tp.BLOCK + 1, 5, 2 * tp.BLOCK), (tp.ZLIB, 5, codec.MAX_WIRE + 1, 5),
                 (9, 5, 5, 5)):
        with pytest.raises(codec.CorruptBlock):
            codec.check_head(*head)


# -- the host's recv of compressed blocks --------------------------------------------
@pytest.fixture
def out() -> io.BytesIO:
    buf = io.BytesIO()
    tp.out.bind(buf)  # where every part of the program writes (Output)
    return buf


def blocks(data: bytes, enc: tp.Encoder) -> bytes:
    wire = b""
    for at in range(0, len(data), tp.BLOCK):
        block = data[at:at + tp.BLOCK]
        kind, payload = enc.encode(block)
        wire += tp.HEAD.pack(kind, len(block), len(payload)) + payload
    return wire


def recv(store: Path, payload: bytes, size: int) -> str:
    r, w = os.pipe()

    def feed() -> None:
        try:
            os.write(w, payload)
        except BrokenPipeError:  # recv stopped reading at a bad block
            pass
        finally:
            os.close(w)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        tp.recv(os.fsencode(store), size, r)
    finally:
        os.close(r)  # a writer still blocked gets EPIPE
        writer.join()
    return tp.out.stream.getvalue().decode()


@pytest.mark.parametrize("host", ["zstd module", "zstd command", "zlib"])
def test_recv_publishes_compressed_and_raw_blocks_verified(
    tmp_path: Path, out: io.BytesIO, monkeypatch: pytest.MonkeyPatch, host: str,
) -> None:
    data = jsonl(40000)[:2 * tp.BLOCK] + os.urandom(tp.BLOCK) + jsonl(9000)  # text, noise, text
    if host == "zstd command":  # a Python without zstd: the `zstd` program decodes
        monkeypatch.setattr(tpc, "zstd_module", lambda: None)
        assert tp.host_codecs()[0] == [tp.ZSTDS, tp.ZSTD, tp.ZLIB]
    codecs = codec.HostCodecs((tp.ZLIB,) if host == "zlib" else (tp.ZSTD, tp.ZLIB))
    wire = blocks(data, codec.encoder_for(codecs, "train.jsonl"))
    kinds = set()
    at = 0
    while at < len(wire):
        kind, _, n = tp.HEAD.unpack(wire[at:at + tp.HEAD.size])
        kinds.add(kind)
        at += tp.HEAD.size + n
    assert kinds == {tp.RAW, codecs.decodes[0]}  # both kinds in one stream
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, wire + digest.encode() + b"\n", len(data)) == f"ok={digest}\n"
    assert (tmp_path / digest).read_bytes() == data


@pytest.mark.parametrize("host", ["zstd module", "zstd command"])
def test_recv_refuses_a_corrupt_block_and_publishes_nothing(
    tmp_path: Path, out: io.BytesIO, monkeypatch: pytest.MonkeyPatch, host: str,
) -> None:
    if host == "zstd command":
        monkeypatch.setattr(tpc, "zstd_module", lambda: None)
    data = jsonl(40000)
    wire = bytearray(blocks(data, codec.encoder_for(codec.HostCodecs((tp.ZSTD,)), "t.jsonl")))
    wire[tp.HEAD.size + 100] ^= 0xFF  # inside the first block's compressed bytes
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, bytes(wire) + digest.encode() + b"\n", len(data)) == "error=corrupt\n"
    assert list(tmp_path.iterdir()) == []


def words(n: int, seed: int = 1) -> bytes:
    """`n` bytes of lines of seeded words: text that repeats only as text does."""
    import random

    rnd = random.Random(seed)
    vocab = [bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz", k=rnd.randint(2, 9)))
             for _ in range(3000)]
    # Lines gathered in a list and joined once: `bytes +=` copies the whole text on each
    # line (quadratic: 4 s of CPU for the 6 MiB one test asks for); the bytes are the same.
    lines, size = [], 0
    while size < n:
        lines.append(b'{"content": "' + b" ".join(rnd.choices(vocab, k=60)) + b'"}\n')
        size += len(lines[-1])
    return b"".join(lines)[:n]


@pytest.mark.parametrize("host", ["zstd module", "zstd command"])
def test_a_zstd_stream_lands_identical_across_levels_frames_and_raw_blocks(
    tmp_path: Path, out: io.BytesIO, monkeypatch: pytest.MonkeyPatch, host: str,
) -> None:
    if host == "zstd command":  # a Python without zstd: the `zstd` program decodes
        monkeypatch.setattr(tpc, "zstd_module", lambda: None)
    assert tp.host_codecs()[0][0] == tp.ZSTDS
    data = words(3 * tp.BLOCK) + os.urandom(tp.BLOCK) + words(2 * tp.BLOCK, 2) + b"end\n"
    stream = codec.ZstdStream()
    wire = b""
    # Two levels in a row share a frame; a new level ends it inside the next block's
    # bytes; a block going raw ends it and goes as a frame of its own (stored); a raw
    # block after that is no part of the stream; the run's last block ends its frame.
    for i, level in enumerate((1, 1, 6, "stored", 3, 3, None)):
        block = data[i * tp.BLOCK:(i + 1) * tp.BLOCK]
        if level is None:
            kind, payload = tp.RAW, block
        elif level == "stored":
            kind, payload = tp.ZSTDS, stream.end() + tp.stored_frame(block)
        else:
            kind, payload = tp.ZSTDS, stream(block, int(level), last=i == 5)
        wire += tp.HEAD.pack(kind, len(block), len(payload)) + payload
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, wire + digest.encode() + b"\n", len(data)) == f"ok={digest}\n"
    assert (tmp_path / digest).read_bytes() == data


def test_an_upload_to_a_host_that_decodes_streams_goes_as_one_smaller_stream(
    tmp_path: Path, out: io.BytesIO,
) -> None:
    data = words(6 * tp.BLOCK)
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTDS, tp.ZSTD, tp.ZLIB)), "t.jsonl")
    for i in range(1, 30):  # a 100 Mbit/s link, measured: the level stays put
        enc.sent(1_250_000, 0.05, now=0.1 * i)
    wire = blocks(data, enc)
    assert enc.codec == tp.ZSTDS and enc.level is not None
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, wire + digest.encode() + b"\n", len(data)) == f"ok={digest}\n"
    # At one level, the stream against the same blocks each on its own, on chat records
    # (the benchmark's: words recur across megabytes, as in real data).
    from tests.benchmarks.wan import Chat

    data = "".join(Chat().lines(4 * tp.BLOCK)).encode()
    stream, pieces = codec.ZstdStream(), range(0, len(data), tp.BLOCK)
    streamed = sum(len(stream(data[at:at + tp.BLOCK], 6)) for at in pieces)
    alone = sum(len(codec._zstd_compress(data[at:at + tp.BLOCK], 6)) for at in pieces)
    assert streamed < 0.98 * alone, (streamed, alone)


def test_a_new_process_first_sample_times_the_compressor_not_the_import_of_zstandard() -> None:
    """The first block's sample is timed (Encoder._measure). In a new process (every
    CLI command) `import zstandard` ran inside that clock, 5 ms against 0.2 ms for the
    64 KiB: a 15 MB/s compressor, so the upload went raw until the next sample and the
    speed stayed low for blocks after. The encoder for a zstd host imports it first."""
    for decodes in ("tp.ZSTDS, tp.ZSTD, tp.ZLIB", "tp.ZSTD, tp.ZLIB"):
        code = ("import sys\n"
                "from rtrain_tui.core.host import transfer_program as tp\n"
                "from rtrain_tui.core.transfers import codec\n"
                "assert 'zstandard' not in sys.modules\n"
                f"codec.encoder_for(codec.HostCodecs(({decodes})), 't.jsonl')\n"
                "print('zstandard' in sys.modules)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout
        assert out == "True\n", decodes


def test_a_block_going_raw_while_a_frame_is_open_ends_it_and_goes_stored() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTDS,)), "t.jsonl")
    kind, payload = enc.encode(words(tp.BLOCK))
    assert kind == tp.ZSTDS and enc.stream.frame is not None  # a frame open
    tail = b"}\n"  # shorter than a compressor's call is worth: raw, yet in a frame
    kind, payload = enc.encode(tail, last=True)
    assert kind == tp.ZSTDS and payload.endswith(tp.stored_frame(tail))
    assert enc.stream.frame is None
    assert enc.encode(tail) == (tp.RAW, tail)  # no frame open: raw as ever


def test_a_host_whose_zstandard_cannot_tell_where_a_frame_ends_gets_blocks_alone(
    tmp_path: Path, out: io.BytesIO, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A zstandard before `eof` on its decompressobj (zstd_stream is None then) decodes
    # blocks alone, not a stream: a ZSTDS upload to it would land as `error=corrupt`.
    monkeypatch.setattr(tpc, "zstd_stream", lambda: None)
    decodes = tp.host_codecs()[0]
    assert decodes == [tp.ZSTD, tp.ZLIB]
    data = words(3 * tp.BLOCK)
    wire = blocks(data, codec.encoder_for(codec.HostCodecs(tuple(decodes)), "t.jsonl"))
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, wire + digest.encode() + b"\n", len(data)) == f"ok={digest}\n"


def test_recv_refuses_a_corrupt_stream_block_and_publishes_nothing(
    tmp_path: Path, out: io.BytesIO,
) -> None:
    data = words(2 * tp.BLOCK)
    stream = codec.ZstdStream()
    wire = bytearray()
    for at in range(0, len(data), tp.BLOCK):
        payload = stream(data[at:at + tp.BLOCK], 3)
        wire += tp.HEAD.pack(tp.ZSTDS, tp.BLOCK, len(payload)) + payload
    wire[-200] ^= 0xFF  # inside the second block, which refers back to the first
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, bytes(wire) + digest.encode() + b"\n", len(data)) == "error=corrupt\n"
    assert list(tmp_path.iterdir()) == []


def test_past_a_fast_link_compressing_competes_for_the_cpu_and_loses() -> None:
    # 64 MB/s of "link" on loaded loopback is ssh's cipher: level 1 at 150 MB/s adds its
    # CPU, and the host's decoding more.
    assert tp.choose(ZSTD_LEVELS, 64e6, 0.39, 144e6) is None
    assert tp.choose(ZSTD_LEVELS, 12.5e6, 0.3, 150e6) == 3  # a real slow link: it hides


def test_compressing_without_the_link_ever_waiting_goes_raw_to_measure_it() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTD,)), "train.jsonl")
    text = jsonl(20000)[:tp.BLOCK]
    sent = 0
    while enc.level is not None or sent == 0:  # each write returns at once
        kind, payload = enc.encode(text)
        enc.sent(tp.HEAD.size + len(payload), 0.0)
        sent += len(payload)
    assert kind == tp.ZSTD and sent >= tp.PROBE and enc.probed
    assert enc.link() == float("inf")  # and raw writes that never wait: raw it stays
    enc.check_at = 0.0
    assert enc.encode(text) == (tp.RAW, text)


def test_on_a_fast_link_the_measured_rates_decide_and_raw_is_tried_once_first() -> None:
    enc = codec.encoder_for(codec.HostCodecs((tp.ZSTD,)), "train.jsonl")
    enc.link_bytes, enc.link_time = 100 * tp.BLOCK, 1.0  # ~100 MB/s: maybe only CPUs
    enc.ratio, enc.speed = 0.01, 5e9  # the model alone would compress
    enc.rates = {True: 90e6}  # compressed moved 90 MB/s; raw never tried
    text = jsonl(20000)[:tp.BLOCK]
    enc.level = 1
    enc.encode(text)
    assert enc.level is None and enc.tried_raw  # a window raw, to compare
    enc.rates = {True: 90e6, False: 80e6}  # compressing gains under a quarter: raw
    enc.level = 1
    enc.encode(text)
    assert enc.level is None
    enc.rates = {True: 200e6, False: 80e6}  # it clearly moves more: compress
    enc.level = 1
    assert enc.encode(text)[0] == tp.ZSTD and enc.level == 1


def test_a_stream_block_that_would_make_more_than_its_length_is_refused_in_bounded_memory(
    tmp_path: Path, out: io.BytesIO,
) -> None:
    """A bomb: a few bytes per 128 KiB of zeros (zstd's RLE blocks), 64 MiB from 2 KiB,
    under a header that says 1 MiB. The host decodes a block's zstd blocks one at a time
    and stops past its length: never more than the block is made."""
    import tracemalloc

    import zstandard

    frame = zstandard.ZstdCompressor(level=1).compressobj()
    payload = frame.compress(b"\0" * (64 << 20)) + frame.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert len(payload) < 4096
    wire = tp.HEAD.pack(tp.ZSTDS, tp.BLOCK, len(payload)) + payload
    tracemalloc.start()
    try:
        got = recv(tmp_path, wire + b"0" * 64 + b"\n", tp.BLOCK)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == "error=corrupt\n"
    assert peak < 8 << 20, peak  # a block and a zstd block's worth, not 64 MiB
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cut", ["a block cut short", "a frame header cut short",
                                 "a reserved block type"])
def test_a_stream_payload_that_is_not_whole_zstd_blocks_is_refused(
    tmp_path: Path, out: io.BytesIO, cut: str,
) -> None:
    data = words(tp.BLOCK)
    payload = codec.ZstdStream()(data, 3, last=True)
    if cut == "a block cut short":
        payload = payload[:-5]
    elif cut == "a frame header cut short":
        payload = payload[:5]
    else:  # the first block's header (after the 4-byte magic, the descriptor, the window)
        payload = payload[:6] + bytes([payload[6] | 0b110]) + payload[7:]
    wire = tp.HEAD.pack(tp.ZSTDS, len(data), len(payload)) + payload
    digest = hashlib.sha256(data).hexdigest()
    assert recv(tmp_path, wire + digest.encode() + b"\n", len(data)) == "error=corrupt\n"
    assert list(tmp_path.iterdir()) == []
