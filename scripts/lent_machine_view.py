"""Makes this mount namespace look like the lent GPU machine to a build: hides every development file (header,
static or link-time library, CMake or pkg-config package file, source tree) that the C/C++ tool chain does not
own, then runs a command. Used by scripts/gpu_dry_run.sh, which starts it in a private mount namespace (unshare
-m) as root; nothing outside the namespace changes.

What stays visible: the files of the tool chain's packages (the dependency closure of g++: libc6-dev,
libstdc++-N-dev, linux-libc-dev, ...), the package of the build's Python headers if Debian installed that Python,
every run-time library (the tools in the namespace load them), and everything outside the system's development
directories (the working tree with the unpacked .deb prefix, the virtual environment with torch and nanobind,
the CUDA toolkit in /usr/local/cuda*): what the lent machine has.

How: a directory that holds something to hide is covered by a tmpfs that holds what it keeps, the originals
reached through a bind mount made first: a directory kept whole is bind-mounted in place (so that its real path
stays what it was: GCC finds its headers relative to its own), a file or link kept is a symbolic link to the
original. Links such as libz.so -> libz.so.1, which a bind mount cannot cover without covering the library it
names, so disappear too. Package files of CMake and pkg-config in /usr/share are covered one by one with /dev/null.

    python3 scripts/lent_machine_view.py [--python PYTHON] -- COMMAND...
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import sysconfig

# Where development files live. Include and source trees hold nothing else. In a library tree, what the linker
# and CMake look for: static and link-time libraries at the top of the directories the linker searches (a
# lib*.so there is a link to the run-time library), and the package files in cmake/ and pkgconfig/ directories.
WHOLE_DEV = ["/usr/include", "/usr/local/include", "/usr/src"]
LIBRARY_TREES = ["/usr/lib", "/usr/local/lib", "/usr/lib64"]
LINKER_DIRS = {
    "/usr/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/local/lib",
    "/usr/local/lib/x86_64-linux-gnu",
    "/usr/lib64",
}
SHARE_TREES = ["/usr/share", "/usr/local/share"]
PACKAGE_FILE = re.compile(r"(\.pc|Config\.cmake|-config\.cmake|ConfigVersion\.cmake|-config-version\.cmake|"
                          r"Targets\.cmake|Targets-[a-z]+\.cmake)$")  # fmt: skip
STASH = "/run/lent-machine-view"  # the originals, bind-mounted before they are covered


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


_libc = ctypes.CDLL(None, use_errno=True)
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    """mount(2) itself: hundreds of bind mounts without a process each."""
    args = [x.encode() if x is not None else None for x in (source, target, fstype)]
    if _libc.mount(*args, ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {source} on {target}: {os.strerror(e)}")


def installed(pkg: str) -> bool:
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", pkg], capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == "installed"


def closure(roots: list[str]) -> set[str]:
    """The installed packages that ``roots`` depend on (Depends, Pre-Depends), transitively, roots included."""
    seen, todo = set(), list(roots)
    while todo:
        pkg = todo.pop()
        if pkg in seen or not installed(pkg):
            continue
        seen.add(pkg)
        deps = sh("dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", pkg)
        for alt in deps.split(","):
            for name in alt.split("|"):
                name = name.strip().split(" ")[0].split(":")[0]
                if name:
                    todo.append(name)
    return seen


def owner(path: str) -> str | None:
    out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    return out.stdout.split(":")[0].strip() if out.returncode == 0 else None


def owned_files(packages: set[str]) -> set[str]:
    files: set[str] = set()
    for pkg in sorted(packages):
        for line in sh("dpkg", "-L", pkg).splitlines():
            if line.startswith("/"):
                files.add(line)
                for top in ("/lib/", "/lib64/", "/bin/", "/sbin/"):  # merged /usr: /lib is /usr/lib
                    if line.startswith(top):
                        files.add("/usr" + line)
    return files


def development_file(path: str) -> bool:
    """Whether a file of a library tree is for building against (not for running)."""
    parent, name = os.path.split(path)
    if parent in LINKER_DIRS and (
        name.endswith((".a", ".la", ".o")) or (name.startswith("lib") and name.endswith(".so"))
    ):
        return True
    return ("/cmake/" in path or "/pkgconfig/" in path) and PACKAGE_FILE.search(name) is not None


class View:
    def __init__(self, keep_files: set[str]):
        self.keep_files = keep_files
        self.hidden: list[str] = []
        self.stashes = 0

    def keep(self, path: str, whole_dev: bool) -> bool:
        return path in self.keep_files or not (whole_dev or development_file(path))

    def plan(self, original: str, path: str, whole_dev: bool) -> tuple[bool, bool]:
        """(everything kept, anything kept) under ``path``, read at ``original`` (its bind-mounted original, or
        itself before it is covered): a file or link by its path, a directory by its content."""
        if os.path.islink(original) or not os.path.isdir(original):
            k = self.keep(path, whole_dev)
            return k, k
        try:
            entries = os.listdir(original)
        except OSError:
            return True, True  # unreadable: left as it is
        all_kept, any_kept = True, not entries
        for e in entries:
            a, b = self.plan(os.path.join(original, e), os.path.join(path, e), whole_dev)
            all_kept &= a
            any_kept |= b
        return all_kept, any_kept

    def cover(self, directory: str, whole_dev: bool) -> None:
        """Covers ``directory`` with a tmpfs of links to what it keeps, if it hides anything."""
        if self.plan(directory, directory, whole_dev)[0]:
            return
        stash = f"{STASH}/{self.stashes}"
        self.stashes += 1
        os.makedirs(stash)
        mount(directory, stash, flags=MS_BIND | MS_REC)
        mount("lent-machine-view", directory, "tmpfs", data="mode=0755")
        self._fill(stash, directory, whole_dev)

    def _fill(self, original: str, covered: str, whole_dev: bool) -> None:
        for e in sorted(os.listdir(original)):
            src, dst = os.path.join(original, e), os.path.join(covered, e)
            all_kept, any_kept = self.plan(src, dst, whole_dev)
            directory = os.path.isdir(src) and not os.path.islink(src)
            if all_kept and directory:
                os.mkdir(dst)
                mount(src, dst, flags=MS_BIND | MS_REC)
            elif all_kept:
                os.symlink(src, dst)
            elif any_kept and directory:
                os.mkdir(dst)
                os.chmod(dst, os.stat(src).st_mode & 0o7777)
                self._fill(src, dst, whole_dev)
            else:
                self.hidden.append(dst)

    def cover_files(self, tree: str) -> None:
        """CMake and pkg-config package files in a share tree (CMake's own modules stay), each covered by /dev/null."""
        for dirpath, _dirnames, filenames in os.walk(tree):
            for f in filenames:
                path = os.path.join(dirpath, f)
                if development_file(path) and path not in self.keep_files and not os.path.islink(path):
                    mount("/dev/null", path, flags=MS_BIND)
                    self.hidden.append(path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", default=None, help="the build's Python: its headers' package stays visible")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if os.geteuid() != 0:
        sys.exit("lent_machine_view: needs root in a private mount namespace (scripts/gpu_dry_run.sh)")
    compilers = [c for c in ("g++", "gcc", "cpp") if installed(c)]
    packages = closure(compilers)
    python = args.python or sys.executable
    include = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True).stdout.strip() or sysconfig.get_paths()["include"]  # fmt: skip
    for header in (os.path.join(include, "Python.h"), os.path.join(include, "pyconfig.h")):
        pkg = owner(header) if header.startswith("/usr/") else None
        if pkg:
            packages.add(pkg)  # the package alone: its dependencies (zlib1g-dev, ...) stay hidden
    keep = owned_files(packages)
    print(f"lent_machine_view: the tool chain's {len(packages)} packages stay visible: {' '.join(sorted(packages))}")
    mount("none", "/", flags=MS_REC | MS_PRIVATE)
    os.makedirs(STASH, exist_ok=True)
    mount("lent-machine-stash", STASH, "tmpfs")
    view = View(keep)
    for d in WHOLE_DEV:
        if os.path.isdir(d):
            view.cover(d, whole_dev=True)
    for d in LIBRARY_TREES:
        if os.path.isdir(d) and not os.path.islink(d):
            view.cover(d, whole_dev=False)
    for d in SHARE_TREES:
        if os.path.isdir(d):
            view.cover_files(d)
    shown = [
        h
        for h in view.hidden
        if re.search(r"jpeg|png|zlib|libz\.|zconf|webp|xxh|zstd|gtest|googletest|benchmark|curl", h)
    ]
    print(
        f"lent_machine_view: {len(view.hidden)} development files and trees hidden, among them: {' '.join(shown[:40])}"
    )
    sys.stdout.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
