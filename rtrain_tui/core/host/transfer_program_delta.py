"""The transfer program's `delta`: a new dataset built from the chunks the host holds
already, and the manifests that say where they are. Part of the host's transfer program
(transfer_program.py says what it is, and how its parts travel as one text).
"""

import errno
import hashlib
import os
import stat
import struct
import time

from rtrain_tui.core.host.transfer_program_base import hx, line, out, readn
from rtrain_tui.core.host.transfer_program_codec import read_blocks
from rtrain_tui.core.host.transfer_program_store import new_part, publish

# -- delta uploads (core/transfers/delta.py) ------------------------------------------
# A manifest's first words; its format is manifest_bytes's.
MANIFEST = b"rtrain-cdc 1"
REC = struct.Struct(">I32s")
MAX_CHUNKS = 1 << 22  # all the client makes of 64 GiB; it sends a bigger file whole (delta.py)
KEEPALIVE = 2.0  # seconds of copying between two `p` lines


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

