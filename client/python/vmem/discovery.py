"""Finding a working tree and its daemon's socket, as libvmem and vmemd do
(docs/protocol.md section 1, protocol/sockpath.c).

The root is the first directory holding ``.git`` (a directory, or a
worktree's ``.git`` file) walking up from the canonical (realpath) start.
The socket is ``$VMEM_SOCKET``, else ``$XDG_RUNTIME_DIR/vmem/<key>.sock``
(only for an absolute XDG_RUNTIME_DIR), else ``/tmp/vmem-<uid>/<key>.sock``,
where ``<key>`` is the 64-bit FNV-1a hash of the root's bytes as 16
lowercase hex digits. A path longer than 107 bytes is an error.

That rule depends on the environment; a running daemon also records the
path it listens on in ``<gitdir>/vmem/socket`` (one line), which
``recorded_socket`` reads (only from a directory and file of our own,
never through a symlink), so a client whose environment differs from the
daemon's (an MCP host's) still finds it.
"""

import os
import stat
from typing import Mapping, Optional, Union

from .errors import StorageError

__all__ = ["fnv1a64", "socket_key", "find_root", "socket_path",
           "recorded_socket", "SOCKPATH_MAX"]

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
SOCKPATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1

PathLike = Union[str, bytes, "os.PathLike[str]"]


def fnv1a64(data: bytes) -> int:
    h = FNV64_OFFSET
    for byte in data:
        h ^= byte
        h = (h * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def socket_key(root: str) -> str:
    """16 lowercase hex digits of FNV-1a 64 of the root's bytes."""
    return "%016x" % fnv1a64(os.fsencode(root))


def find_root(path: PathLike) -> str:
    """The canonical working-tree root holding path; StorageError when
    path does not exist or no ``.git`` is found above it."""
    start = os.fsdecode(os.fspath(path))
    if not start:
        raise StorageError("Not a Git repository: empty repository path")
    if not os.path.exists(start):
        raise StorageError("Not a Git repository: %s does not exist"
                           % start)
    current = os.path.realpath(start)
    if not os.path.isdir(current):
        raise StorageError("Not a Git repository: %s is not a directory"
                           % start)
    while True:
        dot_git = os.path.join(current, ".git")
        if os.path.isdir(dot_git) or os.path.isfile(dot_git):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    raise StorageError("Not a Git repository: no .git in %s or above it"
                       % start)


def socket_path(root: str, env: Optional[Mapping[str, str]] = None,
                uid: Optional[int] = None) -> str:
    """The socket path of the daemon serving root (the canonical root, as
    find_root returns it). env defaults to os.environ, uid to getuid()."""
    if env is None:
        env = os.environ
    explicit = env.get("VMEM_SOCKET")
    if explicit:
        path = explicit
    else:
        key = socket_key(root)
        xdg = env.get("XDG_RUNTIME_DIR")
        if xdg and xdg.startswith("/"):
            path = "%s/vmem/%s.sock" % (xdg, key)
        else:
            path = "/tmp/vmem-%d/%s.sock" % (
                os.getuid() if uid is None else uid, key)
    if len(os.fsencode(path)) > SOCKPATH_MAX:
        raise StorageError("socket path too long (over %d bytes): %s"
                           % (SOCKPATH_MAX, path))
    return path


def _gitdir(root: str) -> Optional[str]:
    """root/.git, or the directory a worktree's .git file names."""
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    try:
        with open(dot_git, encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    if not first.startswith("gitdir: "):
        return None
    return os.path.join(root, first[8:].rstrip("\n"))


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def recorded_socket(root: str) -> Optional[str]:
    """The socket path the running daemon of root recorded, or None
    (none, or not to be trusted)."""
    gitdir = _gitdir(root)
    if gitdir is None:
        return None
    state = os.path.join(gitdir, "vmem")
    try:
        st = os.lstat(state)
        if not stat.S_ISDIR(st.st_mode) or not _ours(st):
            return None
        fd = os.open(os.path.join(state, "socket"), os.O_RDONLY |
                     os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _ours(st):
            return None
        data = os.read(fd, SOCKPATH_MAX + 2)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not data.endswith(b"\n") or not data.startswith(b"/") or \
            len(data) > SOCKPATH_MAX + 1 or b"\0" in data:
        return None
    return os.fsdecode(data[:-1])
