"""Compiling `kernels.c` once per machine into a cached shared library.

Stage: run-time set-up of `linnet.native`. Input: the C source shipped in this
package, the C compiler (`$CC`, else `cc`) and the CPU. Output: the path of a
shared library built with `-O3 -march=native -fopenmp` (plus `TUNING`'s flags for
the CPU's vendor), or a `BuildFailed` saying why there is none.

Why on first use rather than at install: `-march=native` picks the widest
vector path the running CPU has (AVX-512, AVX2, else the portable loops), and
the package stays a pure-Python wheel. Measured here (gcc 12, AMD EPYC) a
build takes about half a second, once: the library is kept under
`<cache root>/<key>/liblinnet_kernels.so`, where the key is a hash of the
source, the flags, the compiler's version line and the CPU's feature flags (a
new CPU or compiler builds anew). The cache root is `$LINNET_NATIVE_CACHE`,
else `$XDG_CACHE_HOME/linnet/native`, else `~/.cache/linnet/native`.

Concurrent builders (pytest-xdist workers, several servers starting at once)
each compile into a private temporary folder and move the result in with
`linnet.atomic` (temporary file + rename): a reader sees no library or a whole
one, and the last rename wins with identical bytes.

`-fopenmp` links `libgomp.so.1`; imported after torch, which loaded its own
copy of that library, the loader reuses torch's, so the kernels' threads are
torch's own pool (`torch.set_num_threads` applies) and no second pool competes
for the cores.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from linnet.atomic import write_bytes
from linnet.records import record

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-std=c11")
VARIANTS = {"native": (), "avx2": ("-mno-avx512f",), "scalar": ("-DLINNET_SCALAR",)}
"""Extra flags: the widest path this CPU has, AVX2 at most, the portable loops (tests check
every path on an AVX-512 CPU)."""
LIBRARY = "liblinnet_kernels.so"
COMPILE_TIMEOUT = 120.0


@record(frozen=True)
class Built:
    path: Path
    seconds: float
    """Compile time; 0.0 when the library came from the cache."""


class BuildFailed(Exception):
    """Why no library could be built (no compiler, a compiler error, an unwritable cache)."""


def cache_root() -> Path:
    explicit = os.environ.get("LINNET_NATIVE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "linnet" / "native"


def compiler() -> str:
    """The C compiler's path (`$CC`, else `cc`); `BuildFailed` when there is none."""
    name = os.environ.get("CC") or "cc"
    found = shutil.which(name)
    if found is None:
        raise BuildFailed(f"no C compiler: `{name}` is not on PATH (set $CC)")
    return found


def _compiler_version(cc: str) -> str:
    try:
        done = subprocess.run(
            [cc, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildFailed(f"`{cc} --version` failed: {exc}") from None
    lines = done.stdout.splitlines()
    return lines[0] if lines else done.stderr.strip()


def _cpuinfo(field: str) -> str | None:
    """The first `field` line of /proc/cpuinfo (None where there is none: not Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line
    except OSError:
        pass
    return None


def _cpu_flags() -> str:
    found = _cpuinfo("flags")
    if found is not None:
        return found
    import platform

    return platform.processor() or platform.machine()


TUNING = {
    "GenuineIntel": ("-DF32_TILED_FROM=2", "-DF32_ROWS=2", "-DPREFETCH_LOCALITY=2", "-DWROWS=4")
}
"""Extra flags by CPU vendor, each measured on that vendor's CPU (kernels.c, `F32_TILED_FROM`,
`PREFETCH_LOCALITY` and `WROWS`). Flags given to `build` come after these, so they override
them."""


def tuning() -> tuple[str, ...]:
    vendor = _cpuinfo("vendor_id")
    return TUNING.get(vendor.split(":", 1)[1].strip(), ()) if vendor else ()


def cache_key(source: bytes, flags: tuple[str, ...], version: str) -> str:
    digest = hashlib.sha256()
    for part in (source, " ".join(flags).encode(), version.encode(), _cpu_flags().encode()):
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build(extra: tuple[str, ...] = ()) -> Built:
    """The library for `extra` flags, from the cache or compiled now; a compiler without
    OpenMP (`-fopenmp` fails) gives a one-thread library."""
    try:
        return _build((*FLAGS, *tuning(), *extra))
    except BuildFailed as first:
        try:
            return _build(tuple(f for f in (*FLAGS, *tuning(), *extra) if f != "-fopenmp"))
        except BuildFailed:
            raise first from None


def _build(flags: tuple[str, ...]) -> Built:
    cc = compiler()
    source = SOURCE.read_bytes()
    folder = cache_root() / cache_key(source, flags, _compiler_version(cc))
    target = folder / LIBRARY
    if target.is_file():
        return Built(target, 0.0)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildFailed(f"cannot create the cache folder {folder}: {exc.strerror}") from None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="linnet-native-") as scratch:
        output = Path(scratch) / LIBRARY
        command = [cc, *flags, "-o", str(output), str(SOURCE)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise BuildFailed(f"`{' '.join(command)}` failed: {exc}") from None
        if done.returncode != 0 or not output.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise BuildFailed(
                f"`{' '.join(command)}` exited with {done.returncode}: " + " | ".join(tail)
            )
        seconds = time.perf_counter() - start
        try:
            write_bytes(target, output.read_bytes(), durable=False)
        except Exception as exc:  # LinnetError from linnet.atomic: an unwritable cache
            raise BuildFailed(f"cannot write {target}: {exc}") from None
    return Built(target, seconds)
