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
failed to read (the bytes were padded). `S` num: the file is gone or is no longer a
regular file. `B` ends a batch. Only regular files are ever opened (O_NONBLOCK and
O_NOFOLLOW too), so a FIFO can never hang the stream.

`recv DIR SIZE`: reads SIZE bytes and then a hex SHA-256 line from stdin into a
temporary name of its own in DIR, hashing in the same pass; if the hashes agree the
file is published as DIR/<sha256> (the first to publish wins, the others find it
there), and it prints `ok=<sha256>`; else `error=...`. Every failure removes the
temporary file; a full disk says `error=nospace`.
"""

import errno
import hashlib
import os
import stat
import struct
import sys

# Where answers go: the process's stdout, bound in main() (tests give a buffer).
out = None
# Pieces of a pipe's size: a 1 MiB read allocates (and page-faults in) fresh memory each
# time and half-fills it; 64 KiB pieces took a third of the CPU (tests/benchmarks/transfer.py).
PIECE = 1 << 16
# The first line, before anything else: a login banner on stdout or another program is
# told apart from the answers.
GREETING = b"rtrain-transfer 1"


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
    root = os.path.realpath(root)
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


def send(path, num):
    """Answer file number NUM: `H`, its bytes and `T`, or `S` when it is not a regular file."""
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
        h = hashlib.sha256()
        ok = 1
        while left:
            try:
                b = os.read(fd, min(left, PIECE)) if ok else b""
            except OSError:
                b = b""
            if not b:
                ok = 0
                b = bytes(min(left, PIECE))
            h.update(b)
            out.write(b)
            left -= len(b)
        out.write(struct.pack(">cB", b"T", ok) + h.digest())
    finally:
        os.close(fd)


def recv(d, size, inp=0):
    """Store SIZE bytes and a hash line read from fd INP in D as D/<sha256>; print the verdict."""
    tmp = os.path.join(d, b".up-%s.part" % os.urandom(8).hex().encode())
    fd = None
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        h = hashlib.sha256()
        left = size
        while left:
            b = os.read(inp, min(left, PIECE))
            if not b:
                line(b"error=short")
                return
            h.update(b)
            left -= len(b)
            mv = memoryview(b)
            while mv:
                mv = mv[os.write(fd, mv):]
        os.close(fd)
        fd = None
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
        final = os.path.join(d, want.encode())
        try:
            os.link(tmp, final)
        except FileExistsError:
            if os.stat(final).st_size != size:
                os.replace(tmp, final)
        line(b"ok=" + want.encode())
    except OSError as e:
        if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            line(b"error=nospace")
        else:
            line(b"error=" + str(e).replace("\n", " ").encode("utf-8", "replace"))
    finally:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        out.flush()


def main():
    global out
    out = sys.stdout.buffer
    line(GREETING)
    out.flush()  # before anything else: the client knows it is us, not a banner
    mode = sys.argv[1]
    if mode == "recv":
        return recv(unhex(sys.argv[2]), int(sys.argv[3]))
    files = listing(unhex(sys.argv[2]), unhex(sys.argv[3]))
    line(b"e")
    out.flush()
    if mode != "send" or files is None:
        return
    for req in sys.stdin.buffer:
        if not req.strip():
            break
        for n in req.split():
            send(files[int(n)], int(n))
        out.write(b"B")
        out.flush()


if __name__ == "__main__":  # also under `python -c 'exec(...)'`, as the host runs it
    main()
