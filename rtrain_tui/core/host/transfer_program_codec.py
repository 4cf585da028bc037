"""The transfer program's compressed blocks: how a file's bytes travel, raw or
compressed. Part of the host's transfer program (transfer_program.py says what it is,
and how its parts travel as one text).
"""

import os
import struct
import time
import zlib

from rtrain_tui.core.host.transfer_program_base import PIECE, out, readn

# -- compressed blocks ------------------------------------------------------------------
# A file's bytes travel as blocks, each raw or compressed (the client side is
# core/transfers/codec.py, which imports what follows): data that does not shrink, or a
# link fast enough that compressing would only cost time, goes raw, block by block.
# ZSTDS: uploads only, blocks of one zstd stream (FrameStream): each block is flushed, so
# it decodes on arrival, yet refers back to the blocks before it; a new level begins a
# new frame. On chat JSONL, level 6 so makes 3% fewer bytes than 9 on blocks alone, 40%
# faster; 12, 4% fewer than 12 alone. Every frame is ended by the last block of a run
# of blocks, and before a block that goes raw (the `zstd` program, decoding where the
# host's Python cannot, must see whole frames before its input ends).
RAW, ZLIB, ZSTD, ZSTDS = 0, 1, 2, 3
CODEC_NAMES = {ZSTDS: b"zstds", ZSTD: b"zstd", ZLIB: b"zlib"}
BLOCK = 1 << 20  # raw bytes per block at most: bounded memory, and a bad block is found alone
HEAD = struct.Struct(">BII")  # codec, raw length, wire length
SMALL = 512  # a block this short is never worth a compressor's call
SHRINK = 0.9  # compressed must be at most this share of raw to be sent, or to be worth it
# Raw bytes, or seconds, between two samples of the data while it goes raw: a sample costs
# little (a piece at the fastest level), and a link first taken for fast (its buffers
# filling) or data that changes is noticed within half a second.
RECHECK, RECHECK_S = 32 << 20, 0.5
# (level, its speed, its wire size), relative to the codec's fastest level: priors measured
# on chat JSONL in 1 MiB blocks (tests/benchmarks/wan.py's data; zstd 1: 3.34x at 390 MB/s,
# 9: 3.76x at 64 MB/s, 12: 3.85x at 35 MB/s, 16: 4.21x at 4.4 MB/s; zlib 1: 2.83x at
# 134 MB/s, 6: 3.43x at 28 MB/s); the fastest level's are measured on the data itself,
# the others scaled from it. A level that compresses no smaller than a faster one is left
# out (zstd 11 is 12's twin, 14-15 barely beat 13).
LEVELS = {
    ZSTD: ((1, 1.0, 1.0), (3, 0.75, 0.94), (6, 0.27, 0.905), (9, 0.165, 0.887),
           (12, 0.09, 0.867), (13, 0.023, 0.849), (16, 0.011, 0.793), (19, 0.009, 0.784)),
    ZLIB: ((1, 1.0, 1.0), (4, 0.64, 0.88), (6, 0.21, 0.82), (9, 0.12, 0.815)),
    # A stream's levels, relative to zstd's fastest on blocks alone (what a sample measures).
    ZSTDS: ((1, 0.97, 0.994), (3, 0.64, 0.924), (6, 0.234, 0.881), (8, 0.129, 0.864),
            (10, 0.083, 0.851), (12, 0.044, 0.835), (13, 0.015, 0.814), (16, 0.006, 0.743),
            (19, 0.004, 0.726)),
}
# By name: data already compressed (or weights, which barely shrink) is sent raw untried.
SKIP_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".h5",
                 ".gz", ".tgz", ".zst", ".zstd", ".xz", ".bz2", ".lz4", ".br", ".zip", ".7z",
                 ".parquet", ".npz", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".mp4",
                 ".mp3", ".wav", ".flac")
_SKIP_BYTES = tuple(s.encode() for s in SKIP_SUFFIXES)  # made once: asked once a file
BLOCKED = 0.0002  # a write that took longer than this waited for the link
# A write that waited this long found the buffers to the link full: the link's measure
# starts there. (While they fill, the first writes wait 0.3-0.9 ms for `ssh` to take
# them, and measured a 100 Mbit/s link at 18 MB/s.)
FULL_WAIT = 0.002
# A "link" faster than this (bytes/s, 256 Mbit/s) may well be CPUs: ssh's cipher and the
# host's hashing (on this 2-core machine, loaded, loopback measures 40-150 MB/s), which a
# compressor, and the host's decoder (DECODE: its share of the compressor's time), take
# from rather than run beside.
FAST_LINK, DECODE = 32e6, 0.5
# Wire bytes sent compressed without one write having to wait: the link takes what we make
# faster than we make it, so we go raw a while to learn its speed (on loopback, 16 MiB
# sent a fifth of a JSONL dataset compressed, and slower, before it went raw).
PROBE = 4 << 20
WINDOW = 0.5  # seconds over which the raw bytes moved per second, raw or compressed, count
MEASURED_WIN = 1.25  # on a fast link, compressed must have moved this much more per second


def skipped_by_name(name):
    """True for a file name whose bytes are already compressed (or weights)."""
    return name.lower().endswith(_SKIP_BYTES)


def choose(levels, link, ratio, speed, current=None):
    """The level to compress at, or None for raw: the one that moves a byte soonest.

    `ratio` (wire/raw) and `speed` (raw bytes per second) are the fastest level's on this
    data; `link` is the link's bytes per second, None while unknown. A slow link drains
    what is buffered (the pipe, ssh's window: a block or more) while the next block is
    compressed, so a compressed byte costs max(1/speed, ratio/link) against a raw one's
    1/link: the tightest level the CPU keeps up with. Past FAST_LINK the compressor and
    the decoder may compete with the cipher for the same CPUs, so the costs add up (on
    loopback, 256 MiB of JSONL went raw in 2.1-3.8 s, at level 1 in 3.7-5.0 s).
    Compressing must win by 10%, or it is not worth the CPU; `current` is kept unless
    another level is 3% better, so the choice does not flap on a measurement's noise (at
    5%, a stream at 100 Mbit/s stayed at 3 where 6 was 4.7% better).
    """
    if ratio is None or ratio > SHRINK or not speed:
        return None
    if link is None:
        # Until the link is measured (a quarter second, the first MB of the buffers to
        # it filling): the level for the fastest link a compressor still runs beside,
        # which on chat JSONL is zstd 3, not 1. Those bytes cross a slow link as they
        # would any others: 1's cost 0.4 MB more at 20 Mbit/s, 0.16 s. Never raw on a
        # speed alone: a first sample may time the compressor's own start (33 MB/s),
        # and the raw blocks it sent cost a 20 Mbit/s upload 3 MB.
        return choose(levels, FAST_LINK * 0.99, ratio, speed) or levels[0][0]
    together = link >= FAST_LINK
    costs = {}
    for level, fast, small in levels:
        cpu, wire = 1.0 / (speed * fast), ratio * small / link
        costs[level] = cpu * (1 + DECODE) + wire if together else max(cpu, wire)
    best = min(costs, key=lambda level: (costs[level], level))
    if costs[best] > SHRINK / link:
        return None
    if current in costs and costs[current] <= costs[best] * 1.03:
        return current
    return best


def zstd_module():
    """(compress(data, level), decompress(data)) from Python 3.14's compression.zstd or
    an installed zstandard, or None."""
    try:
        from compression import zstd as z  # type: ignore[import-not-found]  # Python 3.14
        return (lambda b, lv: z.compress(b, lv)), z.decompress
    except ImportError:
        pass
    try:
        import zstandard as z
    except ImportError:
        return None
    made = {}

    def compress(b, lv):
        if lv not in made:
            made[lv] = z.ZstdCompressor(level=lv, write_checksum=True)
        return made[lv].compress(b)
    d = z.ZstdDecompressor()
    return compress, (lambda b: d.decompress(b, max_output_size=BLOCK))


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # every zstd frame begins with it


def stored_frame(data):
    """A whole zstd frame that holds `data` as it is (raw blocks, no compressor): a block
    going raw that must also end a stream's frame goes as one, behind that frame's end."""
    parts = [ZSTD_MAGIC, b"\xa0", struct.pack("<I", len(data))]  # size given
    step = 1 << 17  # a zstd block's most
    for at in range(0, len(data), step):
        piece = data[at:at + step]
        parts.append(struct.pack("<I", len(piece) << 3 | (at + step >= len(data)))[:3])
        parts.append(piece)
    return b"".join(parts)


def zstd_stream():
    """A new decoder of one zstd frame fed in pieces (`decompress`, `eof`,
    `unused_data`), from compression.zstd or zstandard; None without either."""
    if zstd_module() is None:
        return None
    try:
        from compression import zstd as z  # Python 3.14
        return z.ZstdDecompressor
    except ImportError:
        pass
    try:
        import zstandard as z
    except ImportError:
        return None
    if not hasattr(z.ZstdDecompressor().decompressobj(), "eof"):
        return None  # too old a zstandard to tell where a frame ends
    return lambda: z.ZstdDecompressor().decompressobj()



def frame_header(payload, at):
    """(where a zstd frame's header that begins at `at` ends, its checksum's length)."""
    if payload[at:at + 4] != ZSTD_MAGIC or at + 5 > len(payload):
        raise ValueError("not a zstd frame")
    fhd = payload[at + 4]
    if fhd & 0x08:
        raise ValueError("a reserved bit set")
    single = fhd >> 5 & 1
    fcs = (single, 2, 4, 8)[fhd >> 6]
    end = at + 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3] + fcs
    if end > len(payload):
        raise ValueError("a frame header cut short")
    return end, 4 * (fhd >> 2 & 1)


class FrameStream:
    """Decodes ZSTDS blocks in order: the frames of one stream, a decoder per frame.

    The decoder is given a payload one zstd block at a time (their 3-byte headers are
    read here; the client flushed each block, so none spans two payloads): a zstd block
    makes at most 128 KiB, so a payload that would make more than its header's length (a
    corrupt one, or a bomb: 4 bytes of an RLE block make 128 KiB) is refused once past
    it, never made whole in memory, whichever decoder this Python has.
    """

    def __init__(self):
        self.new, self.d = zstd_stream(), None
        self.check = 0  # the open frame's checksum length, after its last block

    def feed(self, payload, n):
        """The `n` raw bytes this block's payload holds, else ValueError."""
        got, made, at, mv = [], 0, 0, memoryview(payload)
        while at < len(payload):
            start = at
            if self.d is None:  # a frame begins (a new level, a stored frame)
                at, self.check = frame_header(payload, at)
                self.d = self.new()
            # As many zstd blocks at once as cannot make more than the rest of `n`
            # (a call per zstd block cost level 12 twice the CPU), the first always.
            most, last, first = 0, 0, at
            while at < len(payload) and not last:
                if at + 3 > len(payload):
                    raise ValueError("a block header cut short")
                head = int.from_bytes(payload[at:at + 3], "little")
                last, kind, size = head & 1, head >> 1 & 3, head >> 3
                if kind == 3:
                    raise ValueError("a reserved block type")
                most += size if kind < 2 else 1 << 17
                if at != first and most > n - made:
                    last = 0
                    break
                at += 3 + (1 if kind == 1 else size) + (self.check if last else 0)
            if at > len(payload):
                raise ValueError("a block cut short")
            raw = self.d.decompress(mv[start:at])
            made += len(raw)
            if made > n:
                raise ValueError("more bytes than the block holds")
            got.append(raw)
            if last:
                if not self.d.eof:
                    raise ValueError("a frame that did not end at its last block")
                self.d = None
        return b"".join(got)


def zstd_command():
    """The `zstd` program on the PATH (it decodes, as a pipe), or None."""
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d or ".", "zstd")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def zlib_compress(b, lv):
    return zlib.compress(b, lv)


def inflate(payload, n):
    """A zlib block that must hold exactly N bytes: never more is made (a bomb), and any
    fewer, a trailing remainder or a bad checksum is a ValueError."""
    d = zlib.decompressobj()
    raw = d.decompress(payload, n + 1)
    if len(raw) != n or not d.eof or d.unconsumed_tail or d.unused_data:
        raise ValueError("bad block")
    return raw


class Encoder:
    """Chooses, block by block, raw or compressed, and at which level.

    `codec`, `compress`: what to compress with (RAW: never). It measures on the data what
    the fastest level saves and costs (a sample, again after RECHECK raw bytes or
    RECHECK_S, and each new file's first unless it is small), and the link's speed from
    what it drained between writes that found its buffers full (`sent`), and asks
    `choose` again at every block it compresses.
    """

    def __init__(self, codec, compress, stream=None):
        # `stream(data, level, last)`: ZSTDS's blocks, each continuing the one before, the
        # frame ended when `last`; `stream.end()` ends it (its bytes; b"" when none is
        # open). Samples, thrown away, are still compressed on their own by `compress`.
        self.codec, self.compress, self.stream = codec, compress, stream
        self.levels = LEVELS.get(codec, ())
        self.level = None  # None: raw
        self.ratio = self.speed = None  # the fastest level's, on the latest data
        self.link_bytes, self.link_time = 0, 0.0
        # When the last write that waited ended (the buffers were full then), or None when
        # a write since took no wait (they may have drained empty meanwhile).
        self.full_at = None
        self.unwaited = 0  # compressed wire bytes since the last write that waited
        self.probed = False  # went raw to measure the link
        # Raw bytes moved per second, compressed (True) and raw (False), as measured: on a
        # fast link they, not the model, say whether compressing pays.
        self.rates = {}
        self.tried_raw = False
        self.last = None  # (compressed?, raw bytes, when) of the block before
        self.win_bytes, self.win_time = 0, 0.0
        self.until_check, self.check_at = 0, 0.0
        self.skip = codec == RAW
        self.wire = 0  # bytes put on the wire (headers included)

    def start_file(self, name, size=None):
        """A new file: skipped by its name, else its first block is sampled, unless it is
        smaller than a piece (thousands of small files follow what the last ones did)."""
        self.skip = self.codec == RAW or skipped_by_name(name)
        if size is None or size >= PIECE:
            self.until_check = 0

    def link(self):
        """The link's bytes per second; None while unknown; infinite when even raw
        writes never waited for it (it takes all we make)."""
        # A quarter second of the link draining full buffers (`sent`) at least: until
        # then the buffers may still grow (a 100 Mbit/s link measured 17 MB/s at 0.2 s).
        if self.link_bytes < BLOCK or self.link_time < 0.25:
            return float("inf") if self.probed else None
        return self.link_bytes / max(self.link_time, 1e-6)

    def sent(self, nbytes, seconds, now=None):
        """A write of `nbytes` took `seconds`, ending `now` (perf_counter's, by default).

        Only a write that waited says the link's speed: it ended with the buffers to the
        link (the pipe, ssh's window) full. Between two such ends, one right after the
        other, the link drained exactly the bytes written, for the whole time between,
        while the next block was read and compressed too: that is its speed. The waits
        alone said 20-24 MB/s for a 100 Mbit/s link (12.5 MB/s), and 10 MB/s for 20 Mbit/s.
        """
        self.wire += nbytes
        self.unwaited = self.unwaited + nbytes if self.level is not None else 0
        if seconds <= BLOCKED:
            self.full_at = None
            return
        now = time.perf_counter() if now is None else now
        self.unwaited = 0
        if self.full_at is None and seconds < FULL_WAIT:
            return
        if self.full_at is not None:
            self.link_bytes += nbytes
            self.link_time += now - self.full_at
            if self.link_time > 2.0:  # the last seconds count, so a change of link shows
                self.link_bytes //= 2
                self.link_time /= 2
        self.full_at = now

    def raw_next(self):
        """The next block goes raw untried (skipped by name, or raw until the next sample)."""
        return self.skip or (self.level is None and self.until_check > 0
                             and time.perf_counter() < self.check_at)

    def went_raw(self, n):
        """N bytes were sent raw untried, under one header."""
        self.wire += HEAD.size
        if not self.skip:
            self.until_check -= n
        self._tick(n, False)

    def _tick(self, n, packed):
        """A block of N raw bytes begins: the time since the one before is that one's."""
        now = time.perf_counter()
        if self.last is not None:
            was, m, then = self.last
            if was != packed:
                self.win_bytes, self.win_time = 0, 0.0  # a window holds one kind
            else:
                self.win_bytes += m
                self.win_time += now - then
                if self.win_time >= WINDOW:
                    rate = self.win_bytes / self.win_time
                    old = self.rates.get(was)
                    self.rates[was] = rate if old is None else (old + rate) / 2
                    self.win_bytes, self.win_time = 0, 0.0
        self.last = (packed, n, now)

    def _measure(self, level, data, sample=False, last=False):
        """Compress `data` at `level` (a `sample`: on its own, even for a stream); fold
        what it saved and cost into the fastest level's ratio and speed (scaled by
        LEVELS), smoothed over recent blocks."""
        streamed = self.stream is not None and not sample
        began = time.perf_counter()
        packed = self.stream(data, level, last) if streamed else self.compress(data, level)
        took = max(time.perf_counter() - began, 1e-6)
        if self.stream is not None and sample:
            fast, small = 1.0, 1.0  # what a stream's priors are relative to
        else:
            fast, small = [(f, s) for lv, f, s in self.levels if lv == level][0]
        ratio, speed = len(packed) / float(len(data)) / small, len(data) / took / fast
        if self.ratio is None:
            self.ratio, self.speed = ratio, speed
        else:  # one odd block does not swing the choice
            self.ratio = (self.ratio + ratio) / 2
            # A block descheduled on a busy machine measures slow: it moves the speed a
            # quarter of the way, not half (one such block sent a 100 Mbit/s upload to
            # level 3 for good).
            self.speed = (3 * self.speed + speed) / 4
        self.level = choose(self.levels, self.link(), self.ratio, self.speed, self.level)
        if self.level is not None and self.unwaited >= PROBE and not self.probed \
                and self.link() is None:
            # Raw a while: does the link wait then? (Once it is measured, writes that stop
            # waiting mean the compressor is slower than it: `choose` hears that from the
            # speed it measures, and going raw would only waste the link.)
            self.probed, self.level = True, None
        if self.level is not None and (self.link() or 0) >= FAST_LINK:
            # A link this fast may be CPUs, where the model guesses: what each way moved,
            # measured, decides (a window raw first, if it was never tried).
            packed_rate, raw_rate = self.rates.get(True), self.rates.get(False)
            if raw_rate is None and packed_rate is not None and not self.tried_raw:
                self.tried_raw, self.level = True, None
            elif raw_rate is not None and packed_rate is not None \
                    and packed_rate < raw_rate * MEASURED_WIN:
                self.level = None
        if self.level is None:
            self.until_check, self.check_at = RECHECK, time.perf_counter() + RECHECK_S
        return packed

    def encode(self, block, last=False):
        """(codec, wire bytes) for one block of at most BLOCK raw bytes; `last`: the last
        of a run of blocks (the host reads them in one go)."""
        kind, payload = self._encode(block, last)
        if kind == RAW and self.stream is not None:
            end = self.stream.end()
            if end:  # a stream's frame is open: it ends, and this block goes as a frame
                kind, payload = self.codec, end + stored_frame(block)
        self._tick(len(block), kind != RAW)
        return kind, payload

    def _encode(self, block, last):
        if self.skip or len(block) < SMALL:
            return RAW, block
        if self.level is None:
            if self.until_check > 0 and time.perf_counter() < self.check_at:
                self.until_check -= len(block)
                return RAW, block
            # A sample: the fastest level on the block's first piece, cheap even where
            # nothing shrinks (random bytes) and even for zlib.
            fastest = self.levels[0][0]
            packed = self._measure(fastest, block[:PIECE], sample=True)
            if self.level is None:
                return RAW, block
            if self.stream is not None or len(block) > PIECE or self.level != fastest:
                packed = self._measure(self.level, block, last=last)
        else:
            packed = self._measure(self.level, block, last=last)
        if self.stream is not None:
            return self.codec, packed  # the stream holds it now: it goes as made
        if len(packed) <= SHRINK * len(block):
            return self.codec, packed
        return RAW, block


def host_codecs():
    """(decodable, encodable): the codec ids this host decodes and encodes, best first."""
    z = zstd_module()
    dec = [ZSTD] if z is not None or zstd_command() else []
    # A stream needs a decoder that says where its frames end (zstd_stream; a zstandard
    # older than that decodes blocks alone), or, with no zstd in this Python, the `zstd`
    # program (read_blocks).
    if (zstd_stream() is not None) if z is not None else dec:
        dec = [ZSTDS] + dec
    enc = [ZSTD] if z is not None else []
    return dec + [ZLIB], enc + [ZLIB]


def codec_words(ids):
    return b",".join(CODEC_NAMES[c] for c in ids)


def codec_ids(word):
    names = dict((v, k) for k, v in CODEC_NAMES.items())
    return [names[w] for w in word.split(b",") if w in names]


class ZstdPipe:
    """The `zstd` program decoding a run of zstd blocks, for a Python without zstd.

    It reads its input in large pieces, so nothing comes out of it until more input or
    its end: a thread drains its output into `sink` while blocks are fed, and `close`
    (before a raw block, and at the end) ends its input and waits for the rest.
    """

    def __init__(self, command, sink):
        import subprocess
        import threading
        self.proc = subprocess.Popen([command, "-d", "-q", "-c"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.sink, self.want, self.got, self.error = sink, 0, 0, None
        self.thread = threading.Thread(target=self._drain)
        self.thread.daemon = True
        self.thread.start()

    def _drain(self):
        fd = self.proc.stdout.fileno()
        while True:
            b = os.read(fd, PIECE)
            if not b:
                return
            self.got += len(b)
            # Past what the blocks fed so far say (each is counted before it is fed): a
            # block decoding to more than its length, corrupt (close says so). Nothing
            # more is written: a few KiB of such a block made gigabytes, filling the disk.
            if self.error is None and self.got <= self.want:
                try:
                    self.sink(b)
                except OSError as e:  # a full disk: keep draining, so zstd never blocks
                    self.error = e

    def feed(self, payload, n):
        self.want += n
        try:
            self.proc.stdin.write(payload)
            return True
        except (OSError, ValueError):  # zstd ended: a block it could not decode
            return False

    def close(self):
        """True when every block decoded to its length; a sink's OSError is raised."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.thread.join()
        code = self.proc.wait()
        if self.error is not None:
            raise self.error
        return code == 0 and self.got == self.want


def read_blocks(inp, size, sink):
    """Read SIZE raw bytes as blocks from fd INP into `sink`; None, or why not (b"short",
    b"corrupt"). They are one run: its ZSTDS frames end with it (the `zstd` program
    decoding them sees its input end)."""
    z = zstd_module()
    frames = FrameStream()
    pipe = None
    left = size
    try:
        while left:
            head = readn(inp, HEAD.size)
            if len(head) < HEAD.size:
                return b"short"
            codec, n, wire = HEAD.unpack(head)
            if not 0 < n <= min(left, BLOCK) or wire > BLOCK + 4096 \
                    or (codec == RAW and wire != n) or codec not in (RAW, ZLIB, ZSTD, ZSTDS):
                return b"corrupt"
            if codec not in (ZSTD, ZSTDS) and pipe is not None:
                ok, pipe = pipe.close(), None
                if not ok:
                    return b"corrupt"
            if codec == RAW:
                while wire:
                    b = os.read(inp, min(wire, PIECE))
                    if not b:
                        return b"short"
                    sink(b)
                    wire -= len(b)
                left -= n
                continue
            payload = readn(inp, wire)
            if len(payload) < wire:
                return b"short"
            if codec in (ZSTD, ZSTDS) and z is None:  # frames end before a raw block
                if pipe is None:
                    pipe = ZstdPipe(zstd_command(), sink)
                if not pipe.feed(payload, n):
                    return b"corrupt"
                left -= n
                continue
            try:
                if codec == ZSTDS:
                    raw = frames.feed(payload, n)
                else:
                    raw = inflate(payload, n) if codec == ZLIB else z[1](payload)
            except Exception:  # each codec's own error type: a block that is not one
                return b"corrupt"
            if len(raw) != n:
                return b"corrupt"
            sink(raw)
            left -= n
        if pipe is not None:
            ok, pipe = pipe.close(), None
            if not ok:
                return b"corrupt"
        return None
    finally:
        if pipe is not None:
            pipe.proc.kill()
            try:
                pipe.close()
            except OSError:
                pass


def write_block(enc, block):
    """Send one block through `enc`, timing the write for its measure of the link."""
    codec, payload = enc.encode(block)
    out.write(HEAD.pack(codec, len(block), len(payload)))
    began = time.perf_counter()
    out.write(payload)
    enc.sent(HEAD.size + len(payload), time.perf_counter() - began)
