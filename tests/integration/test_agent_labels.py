"""A service is a process, a thread a label of its own: `sonde agent
--server` profiles labelproc (tests/workloads/labelproc.c), a process whose
two threads, named worker-a and worker-b, burn its CPU, and the server's
label values say --

- service_name: labelproc, never a thread's name (worker-a);
- thread: worker-a and worker-b; comm: labelproc (the process's name);
- with SONDE_SERVICE=trainer in the workload's environment its service is
  trainer (the default --service-by env:SONDE_SERVICE,script,process), its
  comm still labelproc;
- Python jobs are named by their script (`python3 -u job_alpha.py`:
  job_alpha.py), a torchrun-style launcher by the training script it
  starts, never python3; no kernel thread is a service of its own;
- two ranks started with torchrun's environment carry job (MASTER_ADDR:
  MASTER_PORT), rank and world_size labels;
- run in a cgroup v2 group named as systemd names a service's
  (sonde-labels-test.service), with --service-by env:NO_SUCH_VAR,unit,process
  its service is that unit, sonde-labels-test; with --service-by cgroup the
  group's name.

And `sonde record -o x.pb.gz -- labelproc` writes pprof samples with the
labels comm (the process) and thread (go tool pprof -tags)."""
import os
import re
import subprocess
import time

from agent_test import Agent, wait_for
from server_test import Server
from sonde_test import *

need_bpf()
LABELPROC = os.path.join(WL, "labelproc")
if not os.path.exists(LABELPROC):
    fail("%s is not built: make workloads" % LABELPROC)


def values(srv, name, query, t0):
    v = srv.get_json("/api/v1/label/values", name=name, query=query,
                     **{"from": t0 - 2000, "until": "now"})
    return set(v["values"])


def run_labelproc(env_extra=None, seconds="1.5"):
    """Runs labelproc to its end; returns its pid."""
    env = dict(os.environ)
    env.pop("SONDE_SERVICE", None)
    env.update(env_extra or {})
    print("$ %s %s %s" % (" ".join("%s=%s" % kv for kv in (env_extra or {}).items()),
                          LABELPROC, seconds))
    p = subprocess.Popen([LABELPROC, seconds], env=env)
    check(p.wait(120) == 0, "labelproc ran (pid %d)" % p.pid)
    return p.pid


def cgroup2_mount():
    """Where the cgroup v2 hierarchy is mounted, or None."""
    with open("/proc/mounts") as f:
        for line in f:
            dev, where, fstype = line.split()[:3]
            if fstype == "cgroup2":
                return where
    return None


srv = Server(os.path.join(tmpdir(), "data"))
url = "http://127.0.0.1:%d" % srv.port
a = Agent(["--no-gpu", "-F", "99", "--window", "1", "--node", "labels-test", "--server", url])
try:
    t0 = int(time.time() * 1000)
    pid = run_labelproc()
    sel = '{node="labels-test",pid="%d"}' % pid
    threads = wait_for(lambda: (lambda v: v if {"worker-a", "worker-b"} <= v else None)(
        values(srv, "thread", sel, t0)), 30, "the thread labels worker-a and worker-b")
    check({"worker-a", "worker-b"} <= threads,
          "the workload's samples carry the thread label of each thread: %s" % sorted(threads))
    # (A sample of the child before its exec would be python3's.)
    sel = '{node="labels-test",pid="%d",thread=~"worker-.*"}' % pid
    services = values(srv, "service_name", sel, t0)
    check(services == {"labelproc"}, "its service is the process, labelproc: %s"
          % sorted(services))
    comms = values(srv, "comm", '{node="labels-test",thread=~"worker-.*"}', t0)
    check(comms == {"labelproc"}, "comm of the worker threads' samples is the process's "
          "name: %s" % sorted(comms))
    all_services = values(srv, "service_name", '{node="labels-test"}', t0)
    check("labelproc" in all_services and not any(s.startswith("worker-") for s in all_services),
          "no thread is a service (%d services)" % len(all_services))

    # The service from the process's environment.
    t1 = int(time.time() * 1000)
    pid = run_labelproc({"SONDE_SERVICE": "trainer"})
    sel = '{node="labels-test",pid="%d",thread=~"worker-.*"}' % pid
    services = wait_for(lambda: (lambda v: v if "trainer" in v else None)(
        values(srv, "service_name", sel, t1)), 30, "service_name trainer from SONDE_SERVICE")
    check(services == {"trainer"}, "SONDE_SERVICE=trainer names its service: %s"
          % sorted(services))
    comms = values(srv, "comm", sel, t1)
    check(comms == {"labelproc"}, "... and its comm is still labelproc: %s" % sorted(comms))

    # Interpreters by what they run (the default script rule): two Python
    # jobs of different scripts, and a launcher run as torchrun is, each
    # named by its script, none python3.
    d = tmpdir()
    burn = ("import sys, time\nend = time.time() + float(sys.argv[-1])\n"
            "while time.time() < end:\n    sum(i * i for i in range(1000))\n")
    for n in ("job_alpha.py", "job_beta.py", "train.py", "torchrun"):
        with open(os.path.join(d, n), "w") as f:
            f.write(burn)
    t3 = int(time.time() * 1000)
    py = "/usr/bin/python3"
    jobs = {"job_alpha.py": [py, "-u", os.path.join(d, "job_alpha.py"), "1.5"],
            "job_beta.py": [py, "-X", "dev", os.path.join(d, "job_beta.py"), "1.5"],
            "train.py": [py, os.path.join(d, "torchrun"), "--nproc-per-node", "1",
                         "train.py", "1.5"]}
    procs = {name: subprocess.Popen(cmd, cwd=d) for name, cmd in jobs.items()}
    for name, p in procs.items():
        check(p.wait(120) == 0, "%s ran (pid %d)" % (" ".join(jobs[name][1:]), p.pid))
    for name, p in procs.items():
        sel = '{node="labels-test",pid="%d"}' % p.pid
        services = wait_for(lambda: (lambda v: v if name in v else None)(
            values(srv, "service_name", sel, t3)), 30, "service_name %s" % name)
        # (A sample between its fork and its exec would be this test's.)
        check(name in services and not {"python3", "python3.11"} & services,
              "%s is the service %s, not python3: %s"
              % (" ".join(jobs[name][1:]), name, sorted(services)))
    # A job's ranks, as torchrun starts them: each sample says its job and
    # rank (what every rank of one job shares: MASTER_ADDR:MASTER_PORT).
    t4 = int(time.time() * 1000)
    ranks = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT="29555", TORCHELASTIC_RUN_ID="none")
        env.pop("SONDE_SERVICE", None)
        ranks.append(subprocess.Popen([py, "-u", os.path.join(d, "train.py"), "1.5"], cwd=d,
                                      env=env))
    for p in ranks:
        check(p.wait(120) == 0, "rank pid %d ran" % p.pid)
    job = '{node="labels-test",job="127.0.0.1:29555"}'
    got = wait_for(lambda: (lambda v: v if v == {"0", "1"} else None)(
        values(srv, "rank", job, t4)), 30, "both ranks of the job")
    check(got == {"0", "1"}, "the job's samples carry its ranks: %s" % sorted(got))
    for r, p in enumerate(ranks):
        sel = '{node="labels-test",pid="%d"}' % p.pid
        check(values(srv, "rank", sel, t4) == {str(r)} and
              values(srv, "world_size", sel, t4) == {"2"} and
              values(srv, "service_name", sel, t4) >= {"train.py"},
              "pid %d is rank %d of 2 of the job, the service train.py" % (p.pid, r))
    all_services = values(srv, "service_name", '{node="labels-test"}', t0)
    check(not any(s.startswith(("kworker", "ksoftirqd", "rcu_", "migration"))
                  for s in all_services),
          "no kernel thread is a service of its own (kernel threads: %s)"
          % ("kernel" if "kernel" in all_services else "none sampled"))
finally:
    a.stop()

# --service-by: an unset variable, then the systemd unit or the cgroup of a
# cgroup v2 group made for the test, named as systemd names a service's.
mnt = cgroup2_mount()
cg = os.path.join(mnt, "sonde-labels-test.service") if mnt else None
try:
    if cg:
        os.makedirs(cg, exist_ok=True)
except OSError as e:
    print("can't make %s: %s" % (cg, e))
    cg = None
if not cg:
    print("SKIP part: no writable cgroup v2 hierarchy: the unit and cgroup rules not run")
else:
    try:
        for node, rules, want in (
                ("labels-unit", "env:NO_SUCH_VAR,unit,process", "sonde-labels-test"),
                ("labels-cgroup", "cgroup", "sonde-labels-test.service")):
            a = Agent(["--no-gpu", "-F", "99", "--window", "1", "--node", node,
                       "--server", url, "--service-by", rules])
            try:
                t2 = int(time.time() * 1000)
                # The shell moves itself into the group, then becomes labelproc.
                p = subprocess.Popen(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$1" 1',
                                      cg, LABELPROC],
                                     env=dict(os.environ, SONDE_SERVICE="trainer"))
                check(p.wait(120) == 0, "labelproc ran in %s" % cg)
                sel = '{node="%s",pid="%d",thread=~"worker-.*"}' % (node, p.pid)
                services = wait_for(lambda: values(srv, "service_name", sel, t2), 30,
                                    "the service named by --service-by %s" % rules)
                check(services == {want}, "--service-by %s names it %s: %s"
                      % (rules, want, sorted(services)))
            finally:
                a.stop()
    finally:
        os.rmdir(cg)
srv.stop()

bad = run([SONDE, "agent", "--service-by", "env:,process"])
check(bad.returncode == 2 and "environment variable" in bad.stderr,
      "a bad --service-by is a usage error naming the rule")
bad = run([SONDE, "agent", "--service-by", "process,container"])
check(bad.returncode == 2 and "unknown rule 'container'" in bad.stderr,
      "an unknown rule is a usage error naming it")

# sonde record's pprof: comm is the process, thread each thread.
pb = os.path.join(tmpdir(), "labels.pb.gz")
r = record(["-F", "199", "-o", pb, "--", LABELPROC, "1"])
check(r.returncode == 0, "sonde record -o labels.pb.gz -- labelproc")
go = "/usr/lib/go/bin/go" if os.path.exists("/usr/lib/go/bin/go") else "go"
try:
    t = run([go, "tool", "pprof", "-tags", pb], timeout=120)
except FileNotFoundError:
    print("SKIP part: go not installed, go tool pprof -tags not run")
else:
    check(t.returncode == 0, "go tool pprof -tags reads the file")
    tags, cur = {}, None
    for line in t.stdout.splitlines():
        m = re.match(r"\s*(\w+): Total", line)
        if m:
            cur = m.group(1)
            tags[cur] = set()
            continue
        m = re.match(r"\s*\S+ \(\s*[\d.]+%\): (.*)$", line)
        if cur and m:
            tags[cur].add(m.group(1))
    check({"worker-a", "worker-b"} <= tags.get("thread", set()),
          "the pprof has the thread label of each worker: %s" % sorted(tags.get("thread", [])))
    check("labelproc" in tags.get("comm", set()) and
          not tags.get("comm", set()) & {"worker-a", "worker-b"},
          "its comm label is the process, labelproc: %s" % sorted(tags.get("comm", [])))
