"""The real-GPU checks (tests/gpu/device/run.sh) parse, and on a machine
without an NVIDIA driver, GPU or PyTorch that sees one -- this one, and CI's
-- say so and skip (exit 77) rather than fail or hang: run.sh is shell that
bash reads, check.py and torch_job.py are Python that compiles, pack.sh
gathers the libraries sonde needs into a directory with which sonde runs."""
import os
import py_compile
import shutil
import subprocess

from sonde_test import *

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu", "device")
for f in ("run.sh", "pack.sh"):
    r = subprocess.run(["bash", "-n", os.path.join(HERE, f)], capture_output=True, text=True)
    check(r.returncode == 0, "%s parses (%s)" % (f, r.stderr.strip()))
pyc = tmpdir()
for f in ("check.py", "torch_job.py"):
    # Compiled away from the tree: nothing is written beside the sources.
    py_compile.compile(os.path.join(HERE, f), cfile=os.path.join(pyc, f + "c"), doraise=True)
    check(True, "%s compiles" % f)
if shutil.which("nvidia-smi"):
    skip("nvidia-smi is installed: this machine may have a GPU; run tests/gpu/device/run.sh")
out = tmpdir()
r = subprocess.run(["bash", os.path.join(HERE, "run.sh")], capture_output=True, text=True,
                   timeout=60, env=dict(os.environ, OUT=out))
check(r.returncode == 77 and "SKIP: no nvidia-smi" in r.stdout,
      "without a driver run.sh skips and says why: %d %r" % (r.returncode, r.stdout.strip()))
b = tmpdir()
os.makedirs(os.path.join(b, "build"))
shutil.copy(SONDE, os.path.join(b, "build", "sonde"))
r = subprocess.run(["bash", os.path.join(HERE, "pack.sh")], capture_output=True, text=True,
                   timeout=60, env=dict(os.environ, B=os.path.join(b, "build")))
libs = os.path.join(b, "build", "device-libs")
check(r.returncode == 0 and any(n.startswith("libbpf.so") for n in os.listdir(libs)),
      "pack.sh gathers sonde's libraries (libbpf among them): %s" % sorted(os.listdir(libs))[:4])
check(not any(n.startswith("libc.so") for n in os.listdir(libs)),
      "pack.sh leaves out the C library every machine has")
r = subprocess.run([os.path.join(b, "build", "sonde"), "--version"], capture_output=True,
                   text=True, env=dict(os.environ, LD_LIBRARY_PATH=libs))
check(r.returncode == 0, "sonde runs with the packed libraries first on its path")
print("ok")
