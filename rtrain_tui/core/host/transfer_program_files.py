"""The transfer program's `list`, `send` and `recv`: a run directory listed and its
files sent, a whole upload stored. Part of the host's transfer program
(transfer_program.py says what it is, and how its parts travel as one text).
"""

import errno
import hashlib
import os
import stat
import struct
import time

from rtrain_tui.core.host.transfer_program_base import PIECE, hx, line, out, widen_pipe
from rtrain_tui.core.host.transfer_program_codec import BLOCK, HEAD, RAW, read_blocks, write_block
from rtrain_tui.core.host.transfer_program_store import new_part, publish


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


def recv(d, size, inp=0):
    """Store SIZE bytes and a hash line read from fd INP in D as D/<sha256>; print the verdict.

    The temporary file is made when the first bytes arrive, not before: the client may
    start this program before it knows the bytes must go (channel.EarlyBulk), even
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


