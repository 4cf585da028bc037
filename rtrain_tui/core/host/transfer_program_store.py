"""The transfer program's store: temporary files held while written, dead uploads'
ones swept, and the verified file published under its digest (recv and delta).
Part of the host's transfer program (transfer_program.py says what it is, and how
its parts travel as one text).
"""

import os
import stat
import time

# A temporary file not written for this long whose writer holds no lock on it is a dead
# upload's (its program killed, the host rebooted): the next upload removes it. Each
# program holds an flock on its own from its creation (hold), so a live one, however
# slow, is never taken; the age spares a program of before the locks, whose client
# abandons it anyway after 30 s of silence (channel.STALL_TIMEOUT).
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

