"""`make test` sets itself up (issue 22): the README's test command is all a
newcomer types, and CI runs exactly that.

- `make -n test` runs scripts/setup.sh before anything is built;
- .ci/run's one command is `make test`, the README's;
- scripts/setup.sh, on a machine that has everything, says nothing, calls
  neither apt-get nor npm, and exits 0;
- on a machine missing a package and the npm packages, it installs exactly
  what is missing -- `apt-get update` once, `apt-get install` of the
  missing package, `npm ci` in tests/ui, tests/tsp and tests/pyroscope --
  and a second run
  says and does nothing. apt-get, dpkg-query and npm are stand-ins on the
  PATH that log their calls (a test installs nothing for real), run on a
  copy of the script and the lockfiles in a temporary tree."""
import os
import re
import shutil
import stat

from sonde_test import *

# make -n with a build directory of its own, empty: every build command is
# due, as on a fresh machine (where the build's packages may be missing):
# the recipe lines, the sub-make's included.
fresh_b = tmpdir()
p = run(["make", "-n", "B=" + fresh_b, "test"], cwd=ROOT, timeout=300)
check(p.returncode == 0, "make -n test exits 0")
cmds = [l.strip() for l in p.stdout.splitlines() if l.strip() and not l.startswith("make")]
setup_at = next((i for i, c in enumerate(cmds) if "scripts/setup.sh" in c), None)
first_build = next((i for i, c in enumerate(cmds)
                    if re.match(r"(cc|gcc|clang|bpftool|protoc-c|\S+/(cc|nvcc|bpftool))\b", c)),
                   None)
check(first_build is not None, "make -n test with an empty build directory builds something")
check(setup_at is not None and setup_at < first_build,
      "make test runs scripts/setup.sh (command %s) before it builds anything (command %s: %s)"
      % (setup_at, first_build, cmds[first_build][:80]))

with open(os.path.join(ROOT, ".ci/run")) as f:
    ci = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
ci = [l for l in ci if not l.startswith(("set ", "cd "))]
with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
check(ci == ["make test"] and re.search(r"^make test\b", readme, re.M),
      ".ci/run runs the README's test command and only it: %s" % ci)

# This machine has what the tests need (the suite runs on it): nothing to say.
if os.geteuid() == 0:
    p = run(["bash", os.path.join(ROOT, "scripts/setup.sh")], timeout=300)
    check(p.returncode == 0 and p.stdout == "" and p.stderr == "",
          "setup.sh with everything there: exit 0, silent (%d, %r %r)"
          % (p.returncode, p.stdout[-200:], p.stderr[-200:]))
else:
    print("note: not root: the silent set-up on this machine is not checked")

# A machine missing one package and the npm packages, with stand-ins.
d = tmpdir()
tree = os.path.join(d, "repo")
NPM_TREES = ("pyroscope", "tsp", "ui")
for rel in ["scripts/setup.sh"] + ["tests/%s/package-lock.json" % t for t in NPM_TREES]:
    os.makedirs(os.path.dirname(os.path.join(tree, rel)), exist_ok=True)
    shutil.copy(os.path.join(ROOT, rel), os.path.join(tree, rel))
bindir = os.path.join(d, "bin")
os.makedirs(bindir)
log = os.path.join(d, "calls.log")
installed = os.path.join(d, "installed")
MISSING = "libcmocka-dev"
stubs = {
    # Every package installed but one (and the ones apt-get installed).
    "dpkg-query": """p="${@: -1}"
if [ "$p" = "%s" ] && ! grep -qx "$p" "%s" 2>/dev/null; then exit 1; fi
echo "install ok installed"
""" % (MISSING, installed),
    "apt-get": """echo "apt-get $*" >>"%s"
[ "$1" = install ] && printf '%%s\\n' "${@: -1}" >>"%s"
exit 0
""" % (log, installed),
    # npm ci leaves what the real one would: the packages the script checks.
    # Its version is NPM_VERSION's (11 unless said).
    "npm": """if [ "$1" = --version ]; then echo "${NPM_VERSION:-11.0.0}"; exit 0; fi
echo "npm $* in $(basename "$PWD")" >>"%s"
mkdir -p node_modules/playwright-core node_modules/tsp-typescript-client node_modules/@pyroscope/nodejs
""" % log,
    "npx": """echo "npx $* in $(basename "$PWD")" >>"%s"
mkdir -p node_modules/playwright-core node_modules/tsp-typescript-client node_modules/@pyroscope/nodejs
""" % log,
    "id": 'echo 0\n',
}
for name, body in stubs.items():
    path = os.path.join(bindir, name)
    with open(path, "w") as f:
        f.write("#!/bin/bash\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
env = dict(os.environ, PATH=bindir + ":" + os.environ["PATH"])
if not shutil.which("node", path=env["PATH"]):
    # The script installs nodejs when there is none; a node stand-in keeps
    # this case about the packages.
    with open(os.path.join(bindir, "node"), "w") as f:
        f.write("#!/bin/bash\n")
    os.chmod(os.path.join(bindir, "node"), 0o755)

script = os.path.join(tree, "scripts/setup.sh")
p = run(["bash", script], env=env, timeout=60)
check(p.returncode == 0, "setup.sh on a machine missing things exits 0")
with open(log) as f:
    calls = f.read().splitlines()
print("\n".join(calls))
check([c for c in calls if c.startswith("apt-get update")] == [calls[0]],
      "apt-get update once, first")
installs = [c for c in calls if c.startswith("apt-get install")]
check(len(installs) == 1 and installs[0].split()[-1] == MISSING
      and sum(1 for w in installs[0].split() if not w.startswith("-")) == 3,
      "apt-get install of exactly the missing package: %s" % installs)
check(sorted(c for c in calls if c.startswith("npm")) ==
      ["npm ci --no-audit --no-fund in %s" % t for t in NPM_TREES],
      "npm ci in tests/ui, tests/tsp and tests/pyroscope")
check("setup: installing %s" % MISSING in p.stdout, "it says what it installs")

os.remove(log)
p = run(["bash", script], env=env, timeout=60)
check(p.returncode == 0 and p.stdout == "" and p.stderr == "" and not os.path.exists(log),
      "a second run: exit 0, silent, nothing called")

# A changed lockfile is installed again, and only that one.
with open(os.path.join(tree, "tests/tsp/package-lock.json"), "a") as f:
    f.write("\n")
p = run(["bash", script], env=env, timeout=60)
with open(log) as f:
    calls = f.read().splitlines()
check(p.returncode == 0 and calls == ["npm ci --no-audit --no-fund in tsp"],
      "a changed tests/tsp lockfile: npm ci there only (%s)" % calls)

# Debian's npm 9 can't read tests/tsp's lockfile: npm 10 does the installs.
os.remove(log)
for sub in NPM_TREES:
    shutil.rmtree(os.path.join(tree, "tests", sub, "node_modules"))
p = run(["bash", script], env=dict(env, NPM_VERSION="9.2.0"), timeout=60)
with open(log) as f:
    calls = f.read().splitlines()
check(p.returncode == 0 and sorted(calls) ==
      ["npx --yes npm@10 ci --no-audit --no-fund in %s" % t for t in NPM_TREES],
      "with npm 9, npm 10 installs every tree (%s)" % calls)
