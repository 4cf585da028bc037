"""The transfer program: runs on the host, with the trainer's interpreter, over one exec channel.

Nothing is installed: `remote_sh.transfer_command` sends the program's text (base64) in
the command line and the host's Python runs it (`python -c 'exec(...)' MODE ARGS`); the
client side is `core/transfers/`. The program is this file and the parts it imports
(`transfer_program_*.py`: base, codec, store, files, delta), joined into one text with
those imports dropped (host.joined), dependencies first; here each part is a module of
its own, which the tests import. It keeps to the standard library and to what old
Python 3 releases run (no annotations, no f-strings): it runs on whatever interpreter
trains there. Paths travel hex-encoded, so any name a POSIX file system allows
(newline, backslash, non-UTF-8 bytes) crosses unchanged and nothing in them reaches a
shell.

Every mode first prints GREETING's line, then:
`list ROOT REL` / `send ROOT REL`: a listing of text lines, then `e`:
  f SIZE MTIME_NS HEXPATH   a regular file (numbered 0, 1, ... in listing order)
  d HEXPATH                 a directory
  s KIND HEXPATH            skipped: fifo, socket, device, loop, dangling, unreadable
  x WHY HEXPATH             refused: `outside` (leaves the run dir) or `missing`
`send` then reads lines of file numbers on stdin (an empty line ends) and, per number,
answers `H` num size mtime (from fstat at open: the snapshot), exactly `size` bytes,
and `T` ok sha256: the hash computed in the same pass; ok=0 when the file shrank or
failed to read (the bytes were padded), or was written over without growing. `S` num: the file is gone or is no longer a
regular file. `B` ends a batch. Only regular files are ever opened (O_NONBLOCK and
O_NOFOLLOW too), so a FIFO can never hang the stream.

`recv DIR SIZE`: reads SIZE bytes (as blocks, below) and then a hex SHA-256 line from
stdin into a temporary name of its own in DIR, hashing in the same pass; if the hashes
agree the file is published as DIR/<sha256> (the first to publish wins, the others find
it there), and it prints `ok=<sha256>`; else `error=...`. Every failure removes the
temporary file (one whose program was killed is removed by a later upload: sweep, hold); a full disk says `error=nospace`, a block that does not decode to its
length `error=corrupt`. The temporary file is made only when the first block arrives:
a big upload's client starts `recv` through the system `ssh` beside the store's check
(channel.EarlyBulk), before it knows the bytes must go or DIR exists, and ends its
input unsent when they need not; the program then says `error=short` and leaves nothing.

Blocks (`send`, `recv` and `delta`; section "compressed blocks" below): a file's bytes
travel as blocks of at most BLOCK raw bytes, each `HEAD` (codec, raw length, wire
length) and its wire bytes: raw, compressed on its own (`zstd`, `zlib`), or, uploads
only, a flushed piece of one zstd stream (`zstds`: each block decodes on arrival, to
exactly its raw length, yet refers back to the blocks before it in its frame; the
client ends the frame with the last block of a run). `recv` and `send` greet with what
this host can decode and encode (`rtrain-transfer 2 d=zstds,zstd,zlib e=zlib`: a Python
without zstd, where the `zstd` program decodes); `send` takes a 4th argument, the
codecs the client decodes, and picks from them; the client picks for `recv`. SHA-256
is always of the raw bytes.

`delta STORE CHUNKS SIZE` (core/transfers/delta.py): a new dataset of SIZE bytes built
from the chunks the host already holds. stdin: LIST, `>I` count and the whole file's
32-byte SHA-256, then per chunk `>I` length and its SHA-256 (it comes after the command,
so the program starts while the client still cuts the file). It
answers (after `p` keepalives while it reads the manifests, if that takes a while)
`have HEX`, a bitmap (bit i of byte i//8, low bit first) of the chunks it will
copy from stored datasets, found through their manifests in CHUNKS/<sha256>. Then it
reads, in order, the bytes of every chunk not marked (as blocks, one run of them: it
greets with its codecs as `recv` does), then `E`; it assembles the file
under a temporary name in STORE, hashing each chunk (copied or received) against the
list. A copied chunk whose bytes no longer hash right is left a hole and asked for
again: `again I J ...`, whose bytes follow in that order (a run of blocks of its own),
then `E`. The whole file's
hash is checked before it is published as STORE/<sha256> (first to publish wins), its
manifest then written; it prints `ok=<sha256>` or `error=...` (`changed`: a sent chunk
is not the one listed; `corrupt`: a block that does not decode to its length) (`p` lines meanwhile are a
keepalive, every few seconds of copying or hashing, which the client counts as progress
even while its own writes wait). Every failure removes the temporary file.

A manifest (`manifest_bytes`) is text: `rtrain-cdc 1 SIZE COUNT`, then `LENGTH HEX` per
chunk, in order. It is a list of where chunks were: every chunk copied from it is hashed
again, so one that is wrong or stale costs a resend, never a wrong dataset. A
whole-file upload's is written by the client through the host's shell
(remote_sh.write_manifest) as soon as its last bytes are sent, not after `recv`'s
verdict: one whose dataset was never published is removed by the next upload's check.
"""

import sys

from rtrain_tui.core.host.transfer_program_base import (
    GREETING,
    PIECE,
    PIPE_BYTES,
    Output,
    hx,
    line,
    out,
    readn,
    unhex,
    widen_pipe,
)
from rtrain_tui.core.host.transfer_program_codec import (
    BLOCK,
    HEAD,
    LEVELS,
    PROBE,
    RAW,
    RECHECK,
    ZLIB,
    ZSTD,
    ZSTDS,
    Encoder,
    choose,
    codec_ids,
    codec_words,
    host_codecs,
    inflate,
    read_blocks,
    skipped_by_name,
    stored_frame,
    write_block,
    zlib_compress,
    zstd_module,
)
from rtrain_tui.core.host.transfer_program_delta import (
    MAX_CHUNKS,
    REC,
    delta,
    known_chunks,
    manifest_bytes,
    parse_manifest,
    read_list,
    write_manifest,
)
from rtrain_tui.core.host.transfer_program_files import listing, recv, send
from rtrain_tui.core.host.transfer_program_store import DEAD_AFTER, publish, sweep

# What the client (transfers/codec.py, transfers/delta.py, remote_sh.py) and the tests
# import from here, wherever each part keeps it. On the host the imports above are
# dropped (host.joined): there every name is already in the program's one namespace.
__all__ = [
    "BLOCK", "DEAD_AFTER", "GREETING", "HEAD", "LEVELS", "MAX_CHUNKS", "PIECE", "PIPE_BYTES",
    "PROBE", "RAW", "REC", "RECHECK", "ZLIB", "ZSTD", "ZSTDS", "Encoder", "Output", "choose",
    "codec_ids", "codec_words", "delta", "host_codecs", "hx", "inflate", "known_chunks", "line",
    "listing", "main", "manifest_bytes", "out", "parse_manifest", "publish", "read_blocks",
    "read_list", "readn", "recv", "send", "skipped_by_name", "stored_frame", "sweep",
    "unhex", "widen_pipe", "write_block", "write_manifest", "zlib_compress", "zstd_module",
]


def main():
    out.bind(sys.stdout.buffer)
    mode = sys.argv[1]
    if mode in ("recv", "send", "delta"):
        dec, enc = host_codecs()
        line(GREETING, b"d=" + codec_words(dec), b"e=" + codec_words(enc))
    else:
        line(GREETING)
    out.flush()  # before anything else: the client knows it is us, not a banner
    if mode == "recv":
        return recv(unhex(sys.argv[2]), int(sys.argv[3]))
    if mode == "delta":
        return delta(unhex(sys.argv[2]), unhex(sys.argv[3]), int(sys.argv[4]))
    files = listing(unhex(sys.argv[2]), unhex(sys.argv[3]))
    line(b"e")
    out.flush()
    if mode != "send" or files is None:
        return
    # The first codec both ends have, in this host's order of preference.
    accepted = codec_ids(unhex(sys.argv[4])) if len(sys.argv) > 4 else []
    both = [c for c in enc if c in accepted]
    z = zstd_module()
    encoder = Encoder(both[0], z[0] if both[0] == ZSTD else zlib_compress) if both \
        else Encoder(RAW, None)
    for req in sys.stdin.buffer:
        if not req.strip():
            break
        for n in req.split():
            send(files[int(n)], int(n), encoder)
        out.write(b"B")
        out.flush()


if __name__ == "__main__":  # also under `python -c 'exec(...)'`, as the host runs it
    main()
