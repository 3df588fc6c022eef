"""sonde agent's GPU memory per process from both sides, against the GPU
stand-ins (tests/gpu/): what its probes saw allocated
(sonde_gpu_process_memory_bytes{source="allocations"}) and what the driver
accounts, as nvidia-smi shows it (source="nvml", from the stand-in
libnvidia-ml.so.1, which reads the account each process's libcuda.so.1
stand-in publishes: its allocations plus its contexts), and the difference
(sonde_gpu_process_memory_unattributed_bytes), and per device what is in use
in all (sonde_gpu_device_memory_nvml_used_bytes). A job started before the
agent, whose allocations no probe saw, shows with its NVML number only --
the case of a PyTorch job the probes missed. Each number is exact: the
workload's own account (its truth line) plus its contexts. When a process
exits, its series go (after --exited-grace, 1 s here). A job that sees GPUs 3 and 5 as its devices 0 and 1
(CUDA_VISIBLE_DEVICES by index and by UUID) has its allocations set
against the driver's numbers of GPUs 3 and 5. The stand-in NVML answers
with NVML's NVML_ERROR_INSUFFICIENT_SIZE protocol."""
import ctypes
import json
import os

from agent_test import *

need_bpf()
need_standins()

MIB = 1 << 20
CTX_DEFAULT = 500 * MIB  # the stand-in's context, as a real H200's (~500 MiB)
CTX = 64 * MIB

# Every stand-in process of this test publishes its account here, and only
# they: other tests' processes are not in this NVML's list.
state = tmpdir()
env_extra = {"SONDE_STANDIN_STATE_DIR": state}


class ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_v2_t, as nvml.h declares it."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


def nvml_processes(device):
    """The stand-in NVML's processes on device, read as NVML's users do: ask
    with no room for the count, then with room for it."""
    os.environ["SONDE_STANDIN_STATE_DIR"] = state
    lib = ctypes.CDLL(os.path.join(GPU_SI, "libnvidia-ml.so.1"))
    check(lib.nvmlInit_v2() == 0, "nvmlInit_v2")
    h = ctypes.c_void_p()
    check(lib.nvmlDeviceGetHandleByIndex_v2(device, ctypes.byref(h)) == 0, "a handle")
    n = ctypes.c_uint(0)
    r = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None)
    need = n.value
    check(r == (7 if need else 0), "*infoCount 0: NVML_ERROR_INSUFFICIENT_SIZE (7) and the "
          "count needed (%d), or success with none (returned %d)" % (need, r))
    infos = (ProcessInfo * max(need, 1))()
    r = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), infos)
    check(r == 0 and n.value == need, "with room for %d: NVML_SUCCESS (%d)" % (need, r))
    lib.nvmlShutdown()
    return {i.pid: i.usedGpuMemory for i in infos[:n.value]}


def until(a, what, cond, timeout=10):
    """The first /metrics for which cond(m) holds, within timeout."""
    return wait_for(lambda: (lambda m: m if cond(m) else None)(a.metrics()), timeout, what)


def proc_mem(m, pid, dev, source):
    return value(m, "sonde_gpu_process_memory_bytes", pid=pid, gpu_id=dev, source=source)


def dev_used(m, dev):
    return value(m, "sonde_gpu_device_memory_nvml_used_bytes", gpu_id=dev)


def unattributed(m, pid, dev):
    return value(m, "sonde_gpu_process_memory_unattributed_bytes", pid=pid, gpu_id=dev)


def of_pid(m, pid):
    """Every series naming pid in the process memory families."""
    return [(n, l) for (n, l) in m if n.startswith("sonde_gpu_process_memory")
            and ("pid", str(pid)) in l]


# --- a job the probes never saw: started before the agent, its allocations
# made before the agent's probes were on ---------------------------------------
early = Workload("gpu_train", ["--gpus", "1", "--steps", "2", "--no-nccl"], env_extra)
e_pid, e_held = early.truth["pid"], early.truth["memory"]["devices"][0]["current_bytes"]
check(nvml_processes(0) == {e_pid: e_held + CTX_DEFAULT},
      "stand-in NVML: pid %d uses %d bytes of GPU 0 (its %d held + a 500 MiB context)"
      % (e_pid, e_held + CTX_DEFAULT, e_held))

a = Agent(["--no-cpu", "--exited-grace", "1"], env=dict(standin_env(), **env_extra))
try:
    want = e_held + CTX_DEFAULT
    m = until(a, "pid %d's NVML memory on GPU 0 to be %d" % (e_pid, want),
              lambda m: proc_mem(m, e_pid, 0, "nvml") == want)
    check(True, "a job the probes missed: sonde_gpu_process_memory_bytes{source=nvml} = %d "
          "(its truth %d + its context)" % (want, e_held))
    check(proc_mem(m, e_pid, 0, "allocations") is None and unattributed(m, e_pid, 0) is None,
          "and no allocations-sourced or unattributed series: no probe saw it allocate")
    check(dev_used(m, 0) == want and dev_used(m, 1) == 0,
          "sonde_gpu_device_memory_nvml_used_bytes: GPU 0 %d, GPU 1 0" % want)

    # --- a job traced from its start: both sources, and the difference -------
    w = Workload("gpu_train", ["--gpus", "2", "--steps", "3"],
                 dict(env_extra, SONDE_STANDIN_CTX_BYTES=str(CTX)))
    t, pid = w.truth, w.pid
    devs = {d["device"]: d["current_bytes"] for d in t["memory"]["devices"]}
    check(sorted(devs) == [0, 1], "the job holds memory on GPUs 0 and 1: %s" % devs)

    def settled(m):
        return all(proc_mem(m, pid, d, "nvml") == held + CTX and
                   proc_mem(m, pid, d, "allocations") == held for d, held in devs.items())

    m = until(a, "pid %d's memory from both sources on both GPUs" % pid, settled)
    for d, held in devs.items():
        check(proc_mem(m, pid, d, "allocations") == held ==
              value(m, "sonde_gpu_memory_used_bytes", pid=pid, gpu_id=d),
              "GPU %d: source=allocations = %d, the probes' account (sonde_gpu_memory_used_bytes)"
              " and the job's own" % (d, held))
        check(proc_mem(m, pid, d, "nvml") == held + CTX,
              "GPU %d: source=nvml = %d, the job's %d + its 64 MiB context" % (d, held + CTX, held))
        check(unattributed(m, pid, d) == CTX,
              "GPU %d: unattributed = nvml - allocations = %d (the context)" % (d, CTX))
    check(proc_mem(m, e_pid, 0, "nvml") == e_held + CTX_DEFAULT,
          "the earlier job is still listed beside it")
    m = until(a, "GPU 0's NVML used memory to count both jobs",
              lambda m: dev_used(m, 0) == e_held + CTX_DEFAULT + devs[0] + CTX)
    check(dev_used(m, 0) == e_held + CTX_DEFAULT + devs[0] + CTX and
          dev_used(m, 1) == devs[1] + CTX,
          "sonde_gpu_device_memory_nvml_used_bytes: GPU 0 both jobs' (%d), GPU 1 the second's"
          % dev_used(m, 0))
    got = nvml_processes(1)
    check(got == {pid: devs[1] + CTX}, "stand-in NVML on GPU 1: %s" % got)

    snap = json.loads(a.get("/json"))
    drv = {(r["pid"], r["gpu_id"]): r["used_bytes"] for r in snap["nvml_memory"]}
    check(drv.get((e_pid, 0)) == e_held + CTX_DEFAULT and drv.get((pid, 1)) == devs[1] + CTX,
          "/json nvml_memory lists both jobs' NVML numbers: %s" % drv)
    names = {r["pid"]: r.get("process") for r in snap["nvml_memory"]}
    check(names.get(e_pid) == "gpu_train", "/json names the job the probes missed: %s" % names)
    gpus = {d["gpu_id"]: d.get("nvml_used_bytes") for d in snap["devices"]}
    check(gpus.get(1) == devs[1] + CTX, "/json devices[] nvml_used_bytes: %s" % gpus)
    procs = {p["pid"]: p for p in snap["processes"]}
    mem = {x["gpu_id"]: x for x in procs[pid]["memory"]}
    check(all(mem[d]["current_bytes"] == held and mem[d]["nvml_bytes"] == held + CTX
              for d, held in devs.items()),
          "/json processes[].memory has nvml_bytes beside current_bytes: %s" % mem)

    # --- a job that sees GPUs 3 and 5 as its devices 0 and 1 (CUDA_VISIBLE_DEVICES
    # by index and by UUID): the driver's numbers are set against the right ones -----
    uuid5 = "GPU-5d0e0000-0000-4000-8000-%012x" % 5
    v = Workload("gpu_train", ["--gpus", "2", "--steps", "2", "--no-nccl"],
                 dict(env_extra, SONDE_STANDIN_CTX_BYTES=str(CTX),
                      CUDA_VISIBLE_DEVICES="3," + uuid5))
    vpid = v.pid
    vdevs = {d["device"]: d["current_bytes"] for d in v.truth["memory"]["devices"]}
    check(sorted(vdevs) == [0, 1], "the job holds memory on its devices 0 and 1: %s" % vdevs)
    phys = {0: 3, 1: 5}

    def visible_settled(m):
        return all(proc_mem(m, vpid, phys[d], "nvml") == held + CTX and
                   unattributed(m, vpid, phys[d]) is not None for d, held in vdevs.items())

    m = until(a, "pid %d's memory on GPUs 3 and 5" % vpid, visible_settled)
    for d, held in vdevs.items():
        check(proc_mem(m, vpid, d, "allocations") == held and
              proc_mem(m, vpid, phys[d], "nvml") == held + CTX,
              "its device %d is GPU %d: allocations{gpu_id=%d} = %d, nvml{gpu_id=%d} = %d"
              % (d, phys[d], d, held, phys[d], held + CTX))
        check(unattributed(m, vpid, phys[d]) == CTX,
              "GPU %d: unattributed = nvml - its device %d's allocations = %d (the context)"
              % (phys[d], d, CTX))
    check(unattributed(m, vpid, 0) is None and proc_mem(m, vpid, 0, "nvml") is None,
          "nothing of the job's on GPU 0, which it does not see")
    snap = json.loads(a.get("/json"))
    cuda = {r["gpu_id"]: r.get("cuda_gpu_id") for r in snap["nvml_memory"] if r["pid"] == vpid}
    check(cuda == {3: 0, 5: 1}, "/json nvml_memory: GPU 3 is its CUDA device 0, GPU 5 its 1: %s"
          % cuda)
    check(v.release() == 0, "the job with CUDA_VISIBLE_DEVICES exits 0")
    until(a, "pid %d's process memory series to go" % vpid, lambda m: not of_pid(m, vpid))

    # --- exits: every series of each process goes ------------------------------
    check(w.release() == 0, "the traced job exits 0")
    until(a, "pid %d's process memory series to go" % pid, lambda m: not of_pid(m, pid))
    check(True, "pid %d's process memory series are gone after its exit" % pid)
    check(early.release() == 0, "the earlier job exits 0")
    m = until(a, "pid %d's NVML series to go" % e_pid, lambda m: not of_pid(m, e_pid))
    check(True, "pid %d's NVML series is gone after its exit" % e_pid)
    check(not series(m, "sonde_gpu_process_memory_unattributed_bytes"),
          "no unattributed series left")
    m = until(a, "every GPU's NVML used memory to be 0",
              lambda m: dev_used(m, 0) == 0 and dev_used(m, 1) == 0)
    check(True, "sonde_gpu_device_memory_nvml_used_bytes back to 0 on GPUs 0 and 1")
except SystemExit:
    a.dump_log()
    raise
finally:
    rc = a.stop()
check(rc == 0, "the agent exits 0 on SIGINT")
check(not [f for f in os.listdir(state) if f.isdigit()],
      "the stand-ins removed their accounts on exit")
