"""A real Triton Inference Server on this machine, for the slow tests of `linnet.triton`.

NVIDIA ships no `tritonserver` on PyPI by itself, but `nvidia-pytriton` bundles
one (2.51.0 in pytriton 0.7.0) with the Python backend (no ONNX Runtime
backend) and a Python-backend stub per CPython version. Its own requirements
(numpy<2, protobuf<7, tritonclient[grpc]) would change the project's pins, so
the wheel is unpacked with `--no-deps` into a folder of its own, never into
the project's venv:

    python tools/triton_server.py prepare [DIR]   # default: $LINNET_TRITON_SERVER
                                                   # or ~/.cache/linnet/tritonserver

`prepare` fetches with pip: `nvidia-pytriton==0.7.0` (55 MB), and
`numpy==1.26.4` and `ml_dtypes==0.5.4` for the stub. The stub embeds CPython
with pybind11 built against NumPy 1.x: under NumPy 2 it reads every input
tensor wrong (the first element repeated: NumPy 2 moved the descriptor's
item size), so the model's Python sees NumPy 1.26 first on its path and the
project's venv (torch, onnxruntime, safetensors) after it.

`start(repository, folder)` (a context manager) starts `tritonserver` on
127.0.0.1 with free HTTP and gRPC ports, the Python backend from the folder,
and a throw-away venv for the stub: the running interpreter's base Python,
a `.pth` listing the NumPy 1 folder, this checkout's `src` and the running
venv's site-packages. The stub runs Python in isolated mode and finds its
`site-packages` from the `python3` first on `PATH`, so `PYTHONPATH` alone does
not reach it. `start` waits until the server is ready (or says why not, with
the end of its log) and stops it on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTRITON = "nvidia-pytriton==0.7.0"
STUB_PACKAGES = ("numpy==1.26.4", "ml_dtypes==0.5.4")
READY_SECONDS = 180.0


def default_folder() -> Path:
    given = os.environ.get("LINNET_TRITON_SERVER")
    if given:
        return Path(given)
    return Path.home() / ".cache" / "linnet" / "tritonserver"


def server_binary(folder: Path) -> Path:
    return folder / "pytriton" / "pytriton" / "tritonserver" / "bin" / "tritonserver"


def backends(folder: Path) -> Path:
    return folder / "pytriton" / "pytriton" / "tritonserver" / "backends"


def missing(folder: Path) -> str | None:
    """Why no server can start from `folder` (None if it can)."""
    if not server_binary(folder).is_file():
        return f"no tritonserver under {folder} (run `python tools/triton_server.py prepare`)"
    if not (backends(folder) / "python" / "triton_python_backend_stub").is_file():
        return f"no Python-backend stub for this Python under {folder}"
    if not (folder / "numpy1" / "numpy").is_dir():
        return f"no NumPy 1 for the stub under {folder}"
    return None


def prepare(folder: Path) -> None:
    """Unpack pytriton's server and the stub's NumPy 1 into `folder` (see the docstring)."""
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    subprocess.run([*pip, str(folder / "pytriton"), PYTRITON], check=True)
    subprocess.run([*pip, str(folder / "numpy1"), *STUB_PACKAGES], check=True)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    tree = folder / "pytriton" / "pytriton" / "tritonserver"
    stub = tree / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise SystemExit(f"pytriton has no Python-backend stub for Python {version}")
    shutil.copy2(stub, backends(folder) / "python" / "triton_python_backend_stub")
    print(f"tritonserver ready under {folder}")


def _stub_env(where: Path, folder: Path) -> Path:
    """A venv whose `python3` the stub finds on PATH (see the module docstring)."""
    base = Path(getattr(sys, "_base_executable", sys.executable))
    env = where / "stub-env"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(env)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = env / "lib" / version / "site-packages"
    lines = [folder / "numpy1", ROOT / "src", Path(sysconfig.get_paths()["purelib"])]
    (site / "linnet_triton.pth").write_text("".join(f"{p}\n" for p in lines))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def start(repository: Path, folder: Path | None = None) -> Iterator[str]:
    """A running server for `repository`; yields its HTTP address `127.0.0.1:PORT`."""
    import tritonclient.http as httpclient

    folder = folder or default_folder()
    problem = missing(folder)
    if problem is not None:
        raise RuntimeError(problem)
    with tempfile.TemporaryDirectory(prefix="linnet-triton-") as scratch:
        where = Path(scratch)
        env_dir = _stub_env(where, folder)
        http, grpc = _free_port(), _free_port()
        env = dict(os.environ)
        env["PATH"] = f"{env_dir / 'bin'}:{env.get('PATH', '')}"
        libdir = sysconfig.get_config_var("LIBDIR")
        if libdir:
            env["LD_LIBRARY_PATH"] = f"{libdir}:{env.get('LD_LIBRARY_PATH', '')}"
        env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
        log = where / "server.log"
        command = [
            str(server_binary(folder)),
            f"--model-repository={repository}",
            f"--backend-directory={backends(folder)}",
            "--http-address=127.0.0.1",
            f"--http-port={http}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc}",
            "--allow-metrics=false",
            "--exit-timeout-secs=5",
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        address = f"127.0.0.1:{http}"
        try:
            client = httpclient.InferenceServerClient(address)
            deadline = time.monotonic() + READY_SECONDS
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"tritonserver exited:\n{_tail(log)}")
                with contextlib.suppress(Exception):
                    if client.is_server_ready():
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"tritonserver not ready in {READY_SECONDS} s:\n{_tail(log)}"
                    )
                time.sleep(0.5)
            client.close()
            yield address
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "prepare" or len(argv) > 2:
        print(__doc__)
        return 2
    prepare(Path(argv[1]) if len(argv) == 2 else default_folder())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
