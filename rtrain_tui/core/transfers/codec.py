"""Compressed blocks, the client's side: what the host can decode, our encoder, decoding.

The block format, the choice rule (`choose`) and the adaptive `Encoder` live in the
host's transfer program (host/transfer_program.py, "compressed blocks"), which runs on
the host with nothing but the standard library; this module imports them from there, so
both ends share one implementation, and adds what only the client has: `zstandard`
(a dependency: zstd where the host can decode it, else zlib, which every Python has).

Decoding a block from the host is bounded: a block never becomes more than the raw
length its header gives, so a host cannot make the client allocate more than a block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtrain_tui.core.host import transfer_program as tp

RAW, ZLIB, ZSTD, ZSTDS = tp.RAW, tp.ZLIB, tp.ZSTD, tp.ZSTDS
HEAD = tp.HEAD
BLOCK = tp.BLOCK
MAX_WIRE = BLOCK + 4096  # a block's wire bytes: compressed data may grow a little
# What this client decodes, in the `send` mode's argument (the host picks from it).
ACCEPT = b"zstd,zlib"


class CorruptBlock(ValueError):
    """A block that does not decode to exactly its raw length."""


@dataclass(frozen=True)
class HostCodecs:
    """What the host's program can decode (for uploads) and encode (for fetches)."""

    decodes: tuple[int, ...] = ()
    encodes: tuple[int, ...] = ()


def parse_greeting(line: bytes) -> HostCodecs | None:
    """The host program's first line: its codecs, or None when it is not its greeting.

    `rtrain-transfer 2` alone (the `list` mode) has none; `recv` and `send` add
    `d=zstds,zstd,zlib e=zstd,zlib`.
    """
    if line != tp.GREETING and not line.startswith(tp.GREETING + b" "):
        return None
    words = dict(w.split(b"=", 1) for w in line[len(tp.GREETING):].split() if b"=" in w)
    return HostCodecs(tuple(tp.codec_ids(words.get(b"d", b""))),
                      tuple(tp.codec_ids(words.get(b"e", b""))))


_compressors: dict[int, Any] = {}


def _zstd_compress(data: bytes | memoryview, level: int) -> bytes:
    import zstandard

    if level not in _compressors:
        # A checksum per block: a bad block is caught where it is decoded.
        _compressors[level] = zstandard.ZstdCompressor(level=level, write_checksum=True)
    return bytes(_compressors[level].compress(data))


class ZstdStream:
    """An upload's ZSTDS blocks (the host program's FrameStream, or its `zstd` program,
    decodes them): one zstd stream, each block flushed whole, so the host decodes it on
    arrival; a new level ends the frame (its end goes first in the next block's bytes)
    and begins another, and so does a run's `last` block. No checksum: the file's
    SHA-256 covers every byte."""

    def __init__(self) -> None:
        self.level: int | None = None
        self.frame: Any = None

    def __call__(self, data: bytes | memoryview, level: int, last: bool = False) -> bytes:
        import zstandard

        head = b""
        if level != self.level:
            head = self.end()
            self.frame = zstandard.ZstdCompressor(level=level).compressobj()
            self.level = level
        body = self.frame.compress(data)
        if last:
            return head + body + self.end()
        return head + body + self.frame.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def end(self) -> bytes:
        """The open frame's end (b"" when none is open); the next block begins another."""
        import zstandard

        if self.frame is None:
            return b""
        frame, self.frame, self.level = self.frame, None, None
        return bytes(frame.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH))


def encoder_for(host: HostCodecs, name: bytes | str) -> tp.Encoder:
    """The encoder for an upload of the file `name` to a host that decodes `host.decodes`."""
    if ZSTDS in host.decodes or ZSTD in host.decodes:
        # Now, not on the first sample's clock (Encoder._measure): in a new process the
        # import took 5 ms against 0.2 ms for the 64 KiB, read as a 15 MB/s compressor.
        import zstandard  # noqa: F401
    if ZSTDS in host.decodes:
        enc = tp.Encoder(ZSTDS, _zstd_compress, ZstdStream())
    elif ZSTD in host.decodes:
        enc = tp.Encoder(ZSTD, _zstd_compress)
    elif ZLIB in host.decodes:
        enc = tp.Encoder(ZLIB, tp.zlib_compress)
    else:
        enc = tp.Encoder(RAW, None)
    enc.start_file(name.encode("utf-8", "surrogateescape") if isinstance(name, str) else name)
    return enc


def check_head(codec: int, n: int, wire: int, left: int) -> None:
    """A block header that fits the file's remaining `left` bytes, else CorruptBlock."""
    if not 0 < n <= min(left, BLOCK) or wire > MAX_WIRE or codec not in (RAW, ZLIB, ZSTD) \
            or (codec == RAW and wire != n):
        raise CorruptBlock(f"block header ({codec}, {n}, {wire}) with {left} bytes left")


def decode_block(codec: int, payload: bytes, n: int) -> bytes:
    """The `n` raw bytes of one compressed block, else CorruptBlock."""
    try:
        if codec == ZLIB:
            return tp.inflate(payload, n)
        if codec == ZSTD:
            import zstandard

            size = zstandard.frame_content_size(payload)
            if size not in (n, -1):  # -1: unknown; then at most n are ever made
                raise CorruptBlock(f"a zstd block of {size} bytes, {n} expected")
            raw = zstandard.ZstdDecompressor().decompress(payload, max_output_size=n)
            if len(raw) != n:
                raise CorruptBlock(f"a zstd block of {len(raw)} bytes, {n} expected")
            return raw
    except CorruptBlock:
        raise
    except Exception as exc:  # noqa: BLE001 - zlib.error, zstandard.ZstdError, ValueError
        raise CorruptBlock(str(exc)) from None
    raise CorruptBlock(f"unknown codec {codec}")
