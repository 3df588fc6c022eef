"""Sonde's CUPTI library against NVIDIA's own libcupti.so.13 from the CUDA
toolkit, on a machine without a GPU driver (issue 24): the library loads the
real CUPTI, whose subscribe fails there, and fails cleanly -- no crash, its
InitializeInjection returns (1: the job runs on, as the driver expects of
an injection library), and one clear line on stderr says that kernel times
are not recorded and why. On a machine with a driver the subscribe works:
then this test skips, the GPU machine's script (tests/gpu/device/) checking
the rest."""
import os
import subprocess

from sonde_test import *

CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")
LIB = os.path.join(B, "libsonde_cupti.so")
REAL = os.path.join(CUDA, "lib64", "libcupti.so.13")
if not os.path.exists(LIB):
    skip("no %s: built only where the CUDA toolkit's CUPTI headers are" % LIB)
if not os.path.exists(REAL):
    skip("no %s: the toolkit's CUPTI is not installed" % REAL)

# Calls the library's entry as the driver does, then says which CUPTI the
# process mapped.
PROBE = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
r = lib.InitializeInjection()
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libcupti" in l]
print("returned %d" % r)
print("mapped " + (maps[0] if maps else "none"))
"""
p = subprocess.run(["python3", "-c", PROBE, LIB], capture_output=True, text=True, timeout=120,
                   env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(REAL)))
out = p.stdout.splitlines()
if p.returncode == 0 and not p.stderr.strip() and "returned 1" in out:
    skip("CUPTI subscribed here (a driver is present): nothing fails to check")
check(p.returncode == 0, "the process calling InitializeInjection exits 0, no crash (%d): %s"
      % (p.returncode, p.stderr[-500:]))
check("returned 1" in out, "InitializeInjection returns 1, the job goes on: %s" % out)
mapped = next((l.split(" ", 1)[1] for l in out if l.startswith("mapped ")), "none")
check(os.path.realpath(mapped) == os.path.realpath(REAL),
      "the library loaded NVIDIA's CUPTI (%s), not a stand-in" % mapped)
lines = [l for l in p.stderr.splitlines() if l.strip()]
check(len(lines) == 1 and lines[0].startswith("sonde_cupti: ")
      and "kernel times are not recorded" in lines[0],
      "one line on stderr says why kernel times are not recorded: %s" % lines)
print("ok")
