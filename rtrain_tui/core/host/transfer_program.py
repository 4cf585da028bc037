"""The transfer program: runs on the host, with the trainer's interpreter, over one exec channel.

Nothing is installed: `remote_sh.transfer_command` sends this file's text (base64) in
the command line and the host's Python runs it (`python -c 'exec(...)' MODE ARGS`); the
client side is `core/transfers/transfer.py`. It keeps to the standard library and to what old
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
(transfer.EarlyBulk), before it knows the bytes must go or DIR exists, and ends its
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

import errno
import hashlib
import os
import stat
import struct
import sys
import time
import zlib

# Where answers go: the process's stdout, bound in main() (tests give a buffer).
out = None
# Pieces of a pipe's size: a 1 MiB read allocates (and page-faults in) fresh memory each
# time and half-fills it; 64 KiB pieces took a third of the CPU (tests/benchmarks/transfer.py).
PIECE = 1 << 16
# The first line, before anything else: a login banner on stdout or another program is
# told apart from the answers.
GREETING = b"rtrain-transfer 2"


# What the pipe from sshd may hold (Linux's most for a user, by default): at the
# usual 64 KiB, sshd and this program took turns every 64 KiB, each waking the other, on
# cores they share with the client's `ssh`; a whole `start -d` of 512 MiB took 15% longer.
# Only the pipe an upload arrives on: an encoder reads the link's speed from the writes
# that find its pipe full, and the client's at 1 MiB chose too fast a level at 100 Mbit/s
# (so this program's stdout, which a fetch's encoder writes, stays as it is too).
PIPE_BYTES = 1 << 20


def widen_pipe(fd):
    """Let the pipe FD hold PIPE_BYTES where Linux allows it; else leave it as it is."""
    if not sys.platform.startswith("linux"):
        return  # F_SETPIPE_SZ's number means something else elsewhere
    try:
        import fcntl
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (ImportError, OSError):  # not a pipe, or over the system's limit
        pass


def line(*parts):
    out.write(b" ".join(parts) + b"\n")


def hx(b):
    return (b.hex() or "-").encode()


def unhex(s):
    return b"" if s == "-" else bytes.fromhex(s)


def _kind(mode):
    if stat.S_ISFIFO(mode):
        return b"fifo"
    if stat.S_ISSOCK(mode):
        return b"socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return b"device"
    return b"special"


def listing(root, rel):
    """Print the listing of ROOT/REL; the regular files' real paths in order, or None
    when it was refused (a link out of the root, or a missing REL)."""
    # A leading `~` (a fetch's run dir as the user's workdir names it) is the user's
    # home, as a shell expands it.
    root = os.path.realpath(os.path.expanduser(root))
    pre = root.rstrip(b"/") + b"/"

    def inside(p):
        return p == root or p.startswith(pre)

    files = []
    top = root if rel == b"." else os.path.join(root, rel)
    real = os.path.realpath(top)
    if not inside(real):
        line(b"x", b"outside", hx(rel))
        return None
    try:
        st = os.stat(real)
    except OSError:
        line(b"x", b"missing", hx(rel))
        return None

    def walk(real, relp, chain):
        try:
            names = sorted(os.listdir(real))
        except OSError:
            line(b"s", b"unreadable", hx(relp))
            return True
        for name in names:
            p = os.path.join(real, name)
            r = os.path.join(relp, name) if relp != b"." else name
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                p = os.path.realpath(p)
                if not inside(p):
                    line(b"x", b"outside", hx(r))
                    return False
                try:
                    st = os.stat(p)
                except OSError:
                    line(b"s", b"dangling", hx(r))
                    continue
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in chain or len(chain) > 64:
                    line(b"s", b"loop", hx(r))
                    continue
                line(b"d", hx(r))
                if not walk(p, r, chain | {key}):
                    return False
            elif stat.S_ISREG(st.st_mode):
                line(b"f", str(st.st_size).encode(), str(st.st_mtime_ns).encode(), hx(r))
                files.append(p)
            else:
                line(b"s", _kind(st.st_mode), hx(r))
        return True

    if stat.S_ISDIR(st.st_mode):
        if not walk(real, rel, frozenset([(st.st_dev, st.st_ino)])):
            return None
    elif stat.S_ISREG(st.st_mode):
        line(b"f", str(st.st_size).encode(), str(st.st_mtime_ns).encode(), hx(rel))
        files.append(real)
    else:
        line(b"s", _kind(st.st_mode), hx(rel))
    return files


def send(path, num, enc):
    """Answer file number NUM: `H`, its bytes as blocks (through `enc`) and `T`, or `S`
    when it is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        out.write(struct.pack(">cI", b"S", num))
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            out.write(struct.pack(">cI", b"S", num))
            return
        size = left = st.st_size
        out.write(struct.pack(">cIQQ", b"H", num, size, st.st_mtime_ns))
        enc.start_file(path, size)
        h = hashlib.sha256()
        ok = 1
        while left:
            # Going raw: one header for up to a block, its bytes read and written in a
            # pipe's pieces (PIECE says why); else a block to encode, read whole.
            raw = enc.raw_next()
            n = k = min(left, BLOCK)
            if raw:
                out.write(HEAD.pack(RAW, n, n))
                enc.went_raw(n)
            while k:
                want = min(k, PIECE) if raw else k
                try:
                    b = os.read(fd, want) if ok else b""
                except OSError:
                    b = b""
                if not b:
                    ok = 0
                    b = bytes(want)
                h.update(b)
                if raw:
                    began = time.perf_counter()
                    out.write(b)
                    enc.sent(len(b), time.perf_counter() - began)
                else:
                    write_block(enc, b)
                k -= len(b)
            left -= n
        if ok:
            # Written over in place meanwhile (an adapter saved again), not only grown (a
            # log: its first SIZE bytes are a prefix it had): the bytes read before and
            # after the write are no file the host ever held. ok=0: read again.
            now = os.fstat(fd)
            if now.st_mtime_ns != st.st_mtime_ns and now.st_size <= size:
                ok = 0
        out.write(struct.pack(">cB", b"T", ok) + h.digest())
    finally:
        os.close(fd)


# A temporary file not written for this long whose writer holds no lock on it is a dead
# upload's (its program killed, the host rebooted): the next upload removes it. Each
# program holds an flock on its own from its creation (hold), so a live one, however
# slow, is never taken; the age spares a program of before the locks, whose client
# abandons it anyway after 30 s of silence (transfer.STALL_TIMEOUT).
DEAD_AFTER = 60


def hold(fd):
    """Lock our temporary file FD for as long as we live (sweep's sign of life)."""
    try:
        import fcntl
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (ImportError, OSError):  # no flock here: only the day-old rule removes parts
        pass


def sweep(d):
    """Remove the dead uploads' temporary files in D (DEAD_AFTER says which). Without
    it, a part left by a `kill -9` stayed a day (upload_prepare.sh's rule), and a big
    one could keep the next upload from fitting."""
    try:
        import fcntl
        names = os.listdir(d)
    except (ImportError, OSError):
        return
    now = time.time()
    for name in names:
        if not (name.startswith(b".up-") and name.endswith(b".part")):
            continue
        path = os.path.join(d, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < DEAD_AFTER:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(path)
        except OSError:  # held: a live upload's (or gone meanwhile)
            pass
        finally:
            os.close(fd)


def new_part(d, tmp):
    """A write descriptor of the new temporary file TMP in D, held (hold), once the dead
    uploads' parts there are swept (sweep)."""
    sweep(d)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    hold(fd)
    return fd


def recv(d, size, inp=0):
    """Store SIZE bytes and a hash line read from fd INP in D as D/<sha256>; print the verdict.

    The temporary file is made when the first bytes arrive, not before: the client may
    start this program before it knows the bytes must go (transfer.EarlyBulk), even
    before D exists, and then ends it having sent nothing; it leaves nothing behind.
    A leading `~` in D is the login shell's (transfer.early_store: the client starts this
    program before it has asked the host where `~` is)."""
    d = os.path.expanduser(d)
    widen_pipe(inp)
    tmp = os.path.join(d, b".up-%s.part" % os.urandom(8).hex().encode())
    fds = []  # the temporary file's, once made
    try:
        h = hashlib.sha256()

        def sink(b):
            if not fds:
                fds.append(new_part(d, tmp))
            h.update(b)
            mv = memoryview(b)
            while mv:
                mv = mv[os.write(fds[0], mv):]
        why = read_blocks(inp, size, sink)
        if why is not None:
            line(b"error=" + why)
            return
        if not fds:  # an empty file
            sink(b"")
        os.close(fds.pop())
        want = b""
        while not want.endswith(b"\n") and len(want) < 200:
            b = os.read(inp, 65)
            if not b:
                break
            want += b
        want = want.strip().decode()
        if want != h.hexdigest():
            line(b"error=corrupt")
            return
        publish(tmp, os.path.join(d, want.encode()), size)
        line(b"ok=" + want.encode())
    except OSError as e:
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            line(b"error=nospace")
        else:
            line(b"error=" + str(e).replace("\n", " ").encode("utf-8", "replace"))
    finally:
        if fds:
            os.close(fds[0])
        try:
            os.unlink(tmp)
        except OSError:
            pass
        out.flush()


# -- delta uploads (core/transfers/delta.py) ------------------------------------------
# A manifest's first words; its format is manifest_bytes's.
MANIFEST = b"rtrain-cdc 1"
REC = struct.Struct(">I32s")
MAX_CHUNKS = 1 << 22  # all the client makes of 64 GiB; it sends a bigger file whole (delta.py)
KEEPALIVE = 2.0  # seconds of copying between two `p` lines


def readn(inp, n):
    """Exactly N bytes from fd INP, fewer only at end of input."""
    parts = []
    while n:
        b = os.read(inp, min(n, PIECE))
        if not b:
            break
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def parse_records(body, count, size):
    """[(offset, length, digest)] of COUNT records in BODY that tile SIZE bytes, else None."""
    if len(body) != count * REC.size:
        return None
    chunks = []
    off = 0
    for i in range(count):
        length, digest = REC.unpack_from(body, i * REC.size)
        if not length:
            return None
        chunks.append((off, length, digest))
        off += length
    return chunks if off == size else None


def manifest_bytes(size, chunks):
    """The manifest of a SIZE-byte file cut into CHUNKS [(offset, length, digest)]."""
    return b"%s %d %d\n" % (MANIFEST, size, len(chunks)) + b"".join(
        b"%d %s\n" % (length, digest.hex().encode()) for _, length, digest in chunks)


def parse_manifest(data, size):
    """A manifest's chunks, or None when it cannot describe a file of SIZE bytes (cut
    short, garbled, or of another size)."""
    rows = data.split(b"\n")
    words = rows[0].split(b" ")
    if len(rows) < 2 or rows[-1] or len(words) != 4 or b" ".join(words[:2]) != MANIFEST:
        return None
    chunks = []
    off = 0
    try:
        if int(words[2]) != size or int(words[3]) != len(rows) - 2:
            return None
        for row in rows[1:-1]:
            length, _, digest = row.partition(b" ")
            length, digest = int(length), bytes.fromhex(digest.decode("ascii"))
            if length <= 0 or len(digest) != 32:
                return None
            chunks.append((off, length, digest))
            off += length
    except ValueError:
        return None
    return chunks if off == size else None


def read_list(inp, size):
    """The client's LIST from fd INP: (the whole file's hex SHA-256, its chunks), or None
    when it is not one for SIZE bytes."""
    head = readn(inp, 36)
    if len(head) != 36:
        return None
    count, whole = struct.unpack(">I32s", head)
    if count > MAX_CHUNKS or count > size + 1:
        return None
    chunks = parse_records(readn(inp, count * REC.size), count, size)
    return None if chunks is None else (whole.hex().encode(), chunks)


def known_chunks(store, chunkdir, wanted, busy=None):
    """{digest: (dataset path, offset, length)} for each digest in WANTED that a stored
    dataset's manifest lists; a manifest whose dataset is gone or of another size is
    skipped. Only WANTED is kept, so memory follows the new file, not the store. `busy`
    is called after each manifest (a keepalive: every manifest is read, ~35 ms a GiB)."""
    found = {}
    try:
        names = os.listdir(chunkdir)
    except OSError:
        return found
    for name in sorted(names):
        if len(name) != 64 or name.startswith(b"."):
            continue
        path = os.path.join(store, name)
        try:
            size = os.stat(path).st_size
            chunks = parse_manifest(read_manifest(os.path.join(chunkdir, name)), size)
        except OSError:
            continue
        for off, length, digest in chunks or ():
            if digest in wanted and digest not in found:
                found[digest] = (path, off, length)
        if busy is not None:
            busy()
    return found


# A manifest's bytes at most: its first line and MAX_CHUNKS rows (a length, a digest).
MANIFEST_MOST = 64 + MAX_CHUNKS * 76


def read_manifest(path):
    """The bytes of the manifest at PATH, or b"" when it is not a regular file of a
    manifest's size. Only this program and the client's shell write manifests, always
    as regular files: anything else there was put by hand or by another tool, and a
    FIFO (or a link to one) would block the open for good, a link to /dev/zero never
    end its read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MANIFEST_MOST:
            return b""
        return readn(fd, st.st_size)
    finally:
        os.close(fd)


def write_at(fd, data, off):
    mv = memoryview(data)
    while mv:
        n = os.pwrite(fd, mv, off)
        mv, off = mv[n:], off + n


def publish(tmp, final, size):
    """Make TMP the store's FINAL: the first to publish wins; what is there and is not a
    regular file of SIZE bytes is replaced. Looked at with lstat: a link (to other bytes
    of the right size, or to nothing) or a FIFO put there by hand is not the dataset,
    and a run dir's hard link to it would be that link, not the verified bytes."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        st = os.lstat(final)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            os.replace(tmp, final)


def write_manifest(chunkdir, digest, size, chunks):
    """Store CHUNKS as the manifest of dataset DIGEST, atomically; best effort (the dataset
    is published already, a missing manifest only means no delta from it)."""
    tmp = os.path.join(chunkdir, b".m-%s.part" % os.urandom(8).hex().encode())
    try:
        try:
            os.mkdir(chunkdir, 0o700)
        except FileExistsError:
            pass
        with open(tmp, "wb") as f:
            f.write(manifest_bytes(size, chunks))
        os.replace(tmp, os.path.join(chunkdir, digest.encode()))
    except OSError:
        pass
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def failed(e):
    """The `error=` line for an OSError: a full disk is `nospace`."""
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return b"error=nospace"
    return b"error=" + str(e).replace("\n", " ").encode("utf-8", "replace")


class Assembly:
    """Writes the new file at its chunks' offsets: the sent chunks as their bytes arrive
    (`take`, in file order), each stored chunk copied in its turn between them, so the
    whole file is hashed in order in the same pass. A copied chunk whose bytes no longer
    hash right is left a hole (`stale`) and the whole file is hashed again at the end."""

    def __init__(self, fd, chunks, marks, have, sources):
        self.fd, self.chunks, self.marks, self.have = fd, chunks, marks, have
        self.sources = sources
        self.sent = [i for i in range(len(chunks)) if not self.marked(i)]
        self.order = self.sent  # the chunks `take` fills, in order
        self.k = 0  # which of them is being filled
        self.parts = []
        self.got = 0
        self.copied_to = 0  # chunks before this one are written (or stale)
        self.whole = hashlib.sha256()
        self.stale = []
        self.refused = False  # a sent chunk was not the one listed: the file changed
        self.surplus = False  # ... or bytes came past the last chunk: a corrupt block
        self.beat = time.time()

    def marked(self, i):
        return self.marks[i >> 3] >> (i & 7) & 1

    def copy_until(self, end):
        """Copy the stored chunks before chunk END that are not copied yet."""
        for i in range(self.copied_to, end):
            if not self.marked(i):
                continue
            off, length, digest = self.chunks[i]
            b = copy_chunk(self.have[digest], self.sources)
            if hashlib.sha256(b).digest() != digest:
                self.stale.append(i)  # changed since its manifest: a hole, asked for again
                self.whole = None
                continue
            write_at(self.fd, b, off)
            if self.whole is not None:
                self.whole.update(b)
            self.busy()
        self.copied_to = max(self.copied_to, end)

    def busy(self):
        """A `p` line when KEEPALIVE seconds passed since the last: the client, whose bytes
        are not read meanwhile, is told the host works, not stalls."""
        if time.time() - self.beat > KEEPALIVE:
            line(b"p")
            out.flush()
            self.beat = time.time()

    def take(self, b):
        """Bytes of the chunks in `order`, in order, any size: each chunk is checked and
        written once complete. It raises only OSError: it may run in ZstdPipe's thread."""
        mv = memoryview(b)
        while mv and not self.refused:
            if self.k == len(self.order):
                # Bytes past the run: a block that decoded to more than it said (the
                # `zstd` program's output is checked only at its end). Refused here, so
                # ZstdPipe's thread goes on draining and never dies on an IndexError,
                # leaving `zstd`, and this program waiting on it, blocked for good.
                self.refused = self.surplus = True
                return
            i = self.order[self.k]
            off, length, digest = self.chunks[i]
            part = mv[:length - self.got]
            self.parts.append(bytes(part))
            self.got += len(part)
            mv = mv[len(part):]
            if self.got < length:
                continue
            data = b"".join(self.parts)
            self.parts, self.got, self.k = [], 0, self.k + 1
            if hashlib.sha256(data).digest() != digest:
                self.refused = True
                return
            if self.order is self.sent:
                self.copy_until(i)
                self.copied_to = i + 1
                if self.whole is not None:
                    self.whole.update(data)
            write_at(self.fd, data, off)

    def why(self):
        """The error word once refused: `changed` (a sent chunk is not the one the list
        names: the client's file changed after its cut) or `corrupt` (a bad block)."""
        return b"corrupt" if self.surplus else b"changed"

    def refill(self):
        """From now on `take` fills the stale chunks (asked for again)."""
        self.order, self.k = self.stale, 0


def delta(store, chunkdir, size, inp=0):
    """Assemble the dataset the list read from INP names from stored chunks and the ones
    sent; print the verdict."""
    tmp = os.path.join(store, b".up-%s.part" % os.urandom(8).hex().encode())
    fd = None
    sources = {}
    try:
        listed = read_list(inp, size)
        if listed is None:
            line(b"error=list")
            return
        want, chunks = listed  # the digest is the file's name in the store: hex, always
        beat = [time.time()]

        def busy():  # `p` lines before `have` too: reading many manifests takes a while
            if time.time() - beat[0] > KEEPALIVE:
                line(b"p")
                out.flush()
                beat[0] = time.time()
        have = known_chunks(store, chunkdir, set(c[2] for c in chunks), busy)
        marks = bytearray((len(chunks) + 7) // 8)
        for i, (_, length, digest) in enumerate(chunks):
            if digest in have and have[digest][2] == length:
                marks[i >> 3] |= 1 << (i & 7)
        line(b"have", hx(bytes(marks)))
        out.flush()
        fd = new_part(store, tmp)
        asm = Assembly(fd, chunks, marks, have, sources)
        why = read_blocks(inp, sum(chunks[i][1] for i in asm.sent), asm.take)
        if why is None and asm.refused:
            why = asm.why()
        if why is None:
            asm.copy_until(len(chunks))
            if readn(inp, 1) != b"E":
                why = b"short"
        if why is None and asm.stale:
            line(b"again", *[str(i).encode() for i in asm.stale])
            out.flush()
            asm.refill()
            # A run of its own: the client ended its stream's frame with the run before.
            why = read_blocks(inp, sum(chunks[i][1] for i in asm.stale), asm.take)
            if why is None and asm.refused:
                why = asm.why()
            if why is None and readn(inp, 1) != b"E":
                why = b"short"
        if why is not None:
            line(b"error=" + why)
            return
        whole = asm.whole
        if whole is None:  # the holes are filled: hash the whole file again, in order
            whole = hashlib.sha256()
            off = 0
            while off < size:
                b = os.pread(fd_read(tmp, sources), min(size - off, 1 << 20), off)
                if not b:
                    break
                whole.update(b)
                off += len(b)
                asm.busy()
        os.close(fd)
        fd = None
        if whole.hexdigest() != want.decode():
            line(b"error=corrupt")
            return
        publish(tmp, os.path.join(store, want), size)
        write_manifest(chunkdir, want.decode(), size, chunks)
        line(b"ok=" + want)
    except OSError as e:
        line(failed(e))
    finally:
        if fd is not None:
            os.close(fd)
        for f in sources.values():
            os.close(f)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        out.flush()


def fd_read(path, sources):
    """A read descriptor for PATH, opened once per assembly (closed with SOURCES)."""
    if path not in sources:
        # O_NONBLOCK: a stored dataset swapped for a FIFO since its manifest was read
        # must not block the open; its pread then fails and the chunk is sent again.
        sources[path] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    return sources[path]


def copy_chunk(where, sources):
    """The bytes a manifest says are at (path, offset, length); short or b"" when gone."""
    path, off, length = where
    try:
        return os.pread(fd_read(path, sources), length, off)
    except OSError:
        return b""


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

def main():
    global out
    out = sys.stdout.buffer
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
