"""The scripts' side of two rules the programs follow (core/file_checks.h, core/dir_lock.h):

- every file a script reads goes through read_input_file: a regular file (a FIFO would block the reader forever),
  of a bounded size, readable, checked before anything is read;
- one job owns a directory it fills: DirLock holds DIR/.lock with flock(2) and writes the holder's record (host,
  pid, process start time, program) in the same JSON as the C++ DirLock, so a second sweep into one --out is refused
  naming the first, and a lock a dead job left is taken over with a warning.

Errors are ScriptError with a one-line message; a script's main prints it and exits 1.
"""
import datetime
import errno
import fcntl
import json
import os
import socket
import stat
import sys


class ScriptError(Exception):
    """A failure with a one-line message for the user (no traceback)."""


def file_type_name(mode):
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "unknown file type"


def read_input_file(path, what, max_bytes=1 << 20):
    """The text of `path`, checked first: it exists, is a regular file of at most `max_bytes`, and is readable. The
    open is non-blocking, so a FIFO is refused instead of waiting for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ScriptError(f"{what} '{path}': cannot open it: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ScriptError(f"{what} '{path}' is not a regular file but a {file_type_name(st.st_mode)} (a FIFO or a "
                              f"device would block or change under the reader)")
        if st.st_size > max_bytes:
            raise ScriptError(f"{what} '{path}' has {st.st_size} bytes, more than the {max_bytes} such a file may have")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise ScriptError(f"{what} '{path}': cannot read it: {e.strerror}") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScriptError(f"{what} '{path}' is not UTF-8 text (byte {e.start})") from None


def _start_ticks(pid):
    """Field 22 of /proc/PID/stat (the process's start in clock ticks after boot), 0 when unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _describe(r):
    return (f"{r.get('program') or 'a program'} (pid {r.get('pid')} on host {r.get('host')}, "
            f"started {r.get('started') or 'at an unknown time'})")


def _record(program):
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start_ticks": _start_ticks(pid),
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "program": program}


def _alive(r):
    """(alive, unknown): a record on another host cannot be probed from here."""
    if r.get("host") != socket.gethostname():
        return False, True
    pid = r.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False, False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False, False
    except PermissionError:
        pass
    ticks = _start_ticks(pid)
    return ticks == 0 or not r.get("start_ticks") or ticks == r.get("start_ticks"), False


class DirLock:
    """DIR/.lock, held for the life of this object (or the process). `takeover` says whose dead lock was replaced."""

    def __init__(self, directory, what, program):
        path = os.path.join(directory, ".lock")
        try:
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise ScriptError(f"{what} '{directory}': cannot open its lock {path}: {e.strerror}") from None
        self.takeover = ""
        try:
            st = os.fstat(self.fd)
            if not stat.S_ISREG(st.st_mode):
                raise ScriptError(f"{what} '{directory}': its lock {path} is a {file_type_name(st.st_mode)}, "
                                  f"not a regular file")
            locked = held = False
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                held = True
            except OSError as e:  # a file system without flock: the record alone decides
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise ScriptError(f"{what} '{directory}': cannot lock {path}: {e.strerror}") from None
            record = self._read()
            if held:
                raise ScriptError(f"{what} '{directory}' is in use by another job: "
                                  f"{_describe(record) if record else 'a live process'} holds {path}. Two jobs in one "
                                  f"directory would overwrite each other's files: wait for it to end, or use another "
                                  f"directory")
            if record:
                alive, unknown = _alive(record)
                if unknown:
                    raise ScriptError(f"{what} '{directory}' is locked by {_describe(record)}, on another host: from "
                                      f"here it cannot be told whether that job still runs. If it does not, remove "
                                      f"{path} and start again; if it does, use another directory")
                if alive and not locked:
                    raise ScriptError(f"{what} '{directory}' is in use by another job: {_describe(record)} holds "
                                      f"{path}. Wait for it to end, or use another directory")
                whose = ("a job that no longer holds it (exiting, or this directory is a copy of one in use)" if alive
                         else "a job that is gone")
                self.takeover = f"{what} '{directory}': took over the lock {path} of {whose}: {_describe(record)}"
            text = (json.dumps(_record(program)) + "\n").encode()
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, text, 0)
            os.fsync(self.fd)
        except BaseException:
            os.close(self.fd)
            raise

    def _read(self):
        try:
            data = os.pread(self.fd, 4096, 0)
            r = json.loads(data) if data.strip() else None
            return r if isinstance(r, dict) else None
        except (OSError, ValueError):
            return None

    def release(self):
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = -1


def fail(script, message):
    """The one line a script ends with on a failure."""
    print(f"{script}: {message}", file=sys.stderr)
    sys.exit(1)
