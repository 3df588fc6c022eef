#!/usr/bin/env bash
# The GPU stand-ins (tests/gpu/standin) look like the real CUDA 13 and NCCL libraries to an
# ELF reader and behave like a GPU: builds them, compares every symbol they export (name,
# version, type, binding; NCCL's pncclXxx aliases at the ncclXxx address) and their
# soname and version definitions with the real files, checks that the workloads' CUDA and
# NCCL imports exist in the real libraries at the same versions, then runs each workload
# and checks its truth line against what the stand-ins should have done: launch and
# allocation counts, kernels and collectives that take time, a hang that lasts as long as
# asked or until a signal, the runtime routed through the driver when asked.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
SI=$B/gpu/standin
GW=$B/gpu/workloads
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

fail() {
	echo "FAIL: $*"
	exit 1
}

[ -r "$CUDA_HOME/include/cuda.h" ] && [ -r "$CUDA_HOME/include/nccl.h" ] ||
	{ echo "SKIP: no CUDA headers in $CUDA_HOME/include -- set CUDA_HOME"; exit 77; }
find_real() {
	local f
	for f in "$CUDA_HOME"/lib64/$1 "$CUDA_HOME"/lib/$1 "$CUDA_HOME"/targets/*/lib/$1; do
		[ -f "$f" ] && { echo "$f"; return; }
	done
}
REAL_CUDART=$(find_real libcudart.so.13)
REAL_NCCL=$(find_real libnccl.so.2)
REAL_CUDA=$(find_real stubs/libcuda.so)
[ -n "$REAL_CUDART" ] && [ -n "$REAL_NCCL" ] && [ -n "$REAL_CUDA" ] ||
	{ echo "SKIP: need the real libcudart.so.13, libnccl.so.2 and stubs/libcuda.so under" \
		"$CUDA_HOME to compare with"; exit 77; }
command -v readelf >/dev/null || { echo "SKIP: readelf not installed"; exit 77; }

make -s -f tests/gpu/standin/standin.mk B="$B" CUDA_HOME="$CUDA_HOME" gpu-standin ||
	fail "make gpu-standin"

# 1. The ELF view: stand-in against real, symbol by symbol.
python3 - "$SI" "$REAL_CUDART" "$REAL_CUDA" "$REAL_NCCL" "$GW" <<'EOF' || exit 1
import re, subprocess, sys

si, real_cudart, real_cuda, real_nccl, gw = sys.argv[1:]

def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

def dynsyms(path):
    """name@version -> (type, bind, value) for defined dynamic symbols."""
    syms = {}
    for line in run("readelf", "--dyn-syms", "-W", path).splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(":").isdigit() or f[6] == "UND":
            continue
        syms[f[7]] = (f[3], f[4], int(f[1], 16))
    return syms

def imports(path):
    out = set()
    for line in run("readelf", "--dyn-syms", "-W", path).splitlines():
        f = line.split()
        if len(f) >= 8 and f[6] == "UND":
            out.add(f[7].split(" ")[0])
    return out

def soname(path):
    m = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", run("readelf", "-d", path))
    return m and m.group(1)

def verdefs(path):
    text = run("readelf", "-V", path)
    m = re.search(r"Version definition section.*?(?=\n\n|\nVersion needs|\Z)", text, re.S)
    return re.findall(r"Flags: (\S+)\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+)", m.group(0)) if m else []

def base(name):
    return name.split("@")[0]

required = {
    "libcudart.so.13": """cudaLaunchKernel cudaLaunchKernel_ptsz cudaLaunchKernelExC
        cudaLaunchKernelExC_ptsz cudaGraphLaunch cudaGraphLaunch_ptsz __cudaGetKernel
        __cudaLaunchKernel __cudaLaunchKernel_ptsz __cudaRegisterFatBinary
        __cudaRegisterFunction __cudaRegisterFatBinaryEnd __cudaUnregisterFatBinary
        __cudaPushCallConfiguration __cudaPopCallConfiguration __cudaInitModule cudaMalloc
        cudaFree cudaMallocManaged cudaMallocAsync cudaMallocAsync_ptsz cudaFreeAsync
        cudaFreeAsync_ptsz cudaSetDevice cudaGetDevice cudaGetDeviceCount cudaStreamCreate
        cudaStreamSynchronize cudaStreamSynchronize_ptsz cudaDeviceSynchronize cudaEventCreate
        cudaEventRecord cudaEventSynchronize cudaMemcpy cudaMemcpyAsync cudaMemcpyAsync_ptsz
        cudaMemGetInfo cudaGetDeviceProperties cudaGetLastError cudaGetErrorString""",
    "libcuda.so.1": """cuInit cuDeviceGet cuDeviceGetCount cuDeviceTotalMem_v2
        cuDevicePrimaryCtxRetain cuCtxCreate_v2 cuCtxCreate_v3 cuCtxCreate_v4 cuCtxSetCurrent
        cuCtxSynchronize cuModuleLoadData cuModuleGetFunction cuLibraryLoadData
        cuLibraryGetKernel cuLaunchKernel cuLaunchKernel_ptsz cuLaunchKernelEx
        cuLaunchKernelEx_ptsz cuGraphLaunch cuGraphLaunch_ptsz cuMemAlloc_v2 cuMemFree_v2
        cuMemCreate cuMemRelease cuMemGetInfo_v2 cuStreamCreate cuStreamSynchronize
        cuStreamSynchronize_ptsz cuGetExportTable""",
    "libnccl.so.2": " ".join(p + n for n in """ncclGetVersion ncclGetUniqueId ncclCommInitRank
        ncclCommInitAll ncclCommDestroy ncclCommCount ncclCommUserRank ncclAllReduce
        ncclAllGather ncclReduceScatter ncclBroadcast ncclReduce ncclSend ncclRecv
        ncclGroupStart ncclGroupEnd ncclGetErrorString""".split() for p in ("", "p")),
}

errors = []
pairs = [("libcudart.so.13", real_cudart), ("libcuda.so.1", real_cuda), ("libnccl.so.2", real_nccl)]
exported = {}
for lib, real in pairs:
    mine_path = f"{si}/{lib}"
    mine, theirs = dynsyms(mine_path), dynsyms(real)
    exported[lib] = mine
    if soname(mine_path) != soname(real):
        errors.append(f"{lib}: soname {soname(mine_path)} != real {soname(real)}")
    if verdefs(mine_path) != verdefs(real):
        errors.append(f"{lib}: version definitions {verdefs(mine_path)} != real {verdefs(real)}")
    for name, (typ, bind, _) in sorted(mine.items()):
        if name not in theirs:
            errors.append(f"{lib}: exports {name}, which the real library does not")
        elif theirs[name][:2] != (typ, bind):
            errors.append(f"{lib}: {name} is {typ} {bind}, real is {' '.join(theirs[name][:2])}")
    names = {base(n) for n in mine}
    for name in required[lib].split():
        if name not in names:
            errors.append(f"{lib}: does not export {name}")
    # Where the real library has per-thread-stream twins of a function, so do we.
    real_names = {base(n) for n in theirs}
    for name in sorted(names):
        for suffix in ("_ptsz", "_ptds"):
            if name + suffix in real_names and name + suffix not in names:
                errors.append(f"{lib}: exports {name} but not {name}{suffix}")
    print(f"{lib}: {len(mine)} symbols, all in {real} with the same version, type and binding")

# NCCL: pncclXxx is an alias of ncclXxx in the real library, and in ours.
for path, syms in ((real_nccl, dynsyms(real_nccl)), (f"{si}/libnccl.so.2", exported["libnccl.so.2"])):
    for name, (_, _, value) in syms.items():
        if name.startswith("pnccl") and name[1:] in syms and syms[name[1:]][2] != value:
            errors.append(f"{path}: {name} is not at the address of {name[1:]}")

# Programs built against the stand-ins link against the real libraries too.
real_syms = {lib: set(dynsyms(real)) | {base(n) for n in dynsyms(real) if "@" not in n}
             for lib, real in pairs}
for prog in ("gpu_train", "gpu_train_ptsz", "gpu_driver", "nccl_hang", "gpu_launch_bench"):
    for sym in sorted(imports(f"{gw}/{prog}")):
        b = base(sym)
        if not re.match(r"(__)?cu|p?nccl", b):
            continue
        lib = ("libnccl.so.2" if "nccl" in b else
               "libcudart.so.13" if b.startswith(("cuda", "__cuda")) else "libcuda.so.1")
        want = sym.replace("@libcudart", "@@libcudart")
        if want not in real_syms[lib] and b not in real_syms[lib]:
            errors.append(f"{prog} imports {sym}, which the real {lib} does not export")

for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
EOF

# 2. The workloads run and their truth lines say what they should.
check_json() { # FILE PYTHON-ASSERTIONS (d is the truth line)
	python3 - "$1" "$2" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("{")]
if len(lines) != 1:
    sys.exit(f"FAIL: {sys.argv[1]}: expected one truth line, got {len(lines)}")
d = json.loads(lines[0])
env = {"d": d}
for stmt in sys.argv[2].strip().splitlines():
    stmt = stmt.strip()
    if stmt and not eval(stmt, env):
        sys.exit(f"FAIL: {d['workload']}: {stmt}\n{json.dumps(d)[:3000]}")
EOF
}

STEPS=4 K=3 GPUS=2
TRAIN_CHECKS="
d['launches']['by_api'][API('cudaLaunchKernel')] == $GPUS * (2 + $STEPS * $K + $STEPS)
d['launches']['by_api'][API('__cudaLaunchKernel')] == $GPUS * (1 + $STEPS * $K)
d['launches']['by_api'][API('cudaLaunchKernelExC')] == $GPUS * $STEPS * $K
d['launches']['by_api'][API('cudaGraphLaunch')] == $GPUS * $STEPS
d['launches']['captured'] == 3 * $GPUS
d['launches']['by_kernel']['matmul_tile(float*, float*, float*, int)'] == $GPUS * (2 + $STEPS * $K + $STEPS)
d['failed'] == {'cudaMalloc': 1, 'cudaFree': 1, API('cudaLaunchKernel'): 1}
len(d['memory']['devices']) == $GPUS
all(x['current_bytes'] == x['alloc_bytes'] - x['free_bytes'] for x in d['memory']['devices'])
all(x['current_bytes'] > 0 and x['peak_bytes'] >= 64 << 20 for x in d['memory']['devices'])
d['memory']['allocs_by_api'][API('cudaMallocAsync')]['calls'] == $GPUS * $STEPS
d['nccl']['by_op']['ncclAllReduce']['calls'] == $GPUS * $STEPS
d['nccl']['by_op']['ncclAllReduce']['bytes'] == $GPUS * $STEPS * 65536 * 4
sorted((c['rank'], c['nranks']) for c in d['nccl']['comms']) == [(r, $GPUS) for r in range($GPUS)]
d['waits']['count'] == $GPUS * ($STEPS + 1)
d['waits']['total_ns'] >= 0.8 * $GPUS * $STEPS * (3 * $K + 3) * 50e3
d['memcpy']['bytes']['HostToDevice'] == $GPUS * ($STEPS * 4 + 1) * (1 << 20)
"
for prog in gpu_train gpu_train_ptsz gpu_train_static; do
	api="lambda n: n"
	[ $prog = gpu_train_ptsz ] && api="lambda n: n if n in ('cudaMalloc', 'cudaFree') else n + '_ptsz'"
	SONDE_STANDIN_GPUS=4 "$GW/$prog" --gpus $GPUS --steps $STEPS --launches $K --floats 65536 \
		--cpu-us 100 >"$TMP/$prog.json" || fail "$prog exited $?"
	check_json "$TMP/$prog.json" "$(printf 'globals().update(API=%s) or True\n%s' "$api" "$TRAIN_CHECKS")" ||
		exit 1
	echo "$prog: truth line checks out"
done

# The runtime through the driver (the default, as the real runtime): each runtime launch,
# allocation and wait also enters the public driver function, once.
SONDE_STANDIN_TRACE=1 SONDE_STANDIN_CUDART_VIA_DRIVER=all "$GW/gpu_train" --gpus 1 --steps 2 \
	--launches 2 --floats 65536 --cpu-us 0 >"$TMP/via.json" 2>"$TMP/via.err" ||
	fail "gpu_train via the driver exited $?"
count() { grep -c "$1" "$TMP/via.err"; }
rt_launches=$(($(count 'libcudart: cudaLaunchKernel(.*) = 0$') + $(count 'libcudart: cudaLaunchKernelExC(.*) = 0$')))
drv_launches=$(($(count 'libcuda: cuLaunchKernel(.*) = 0$') + $(count 'libcuda: cuLaunchKernelEx(.*) = 0$')))
[ "$rt_launches" -gt 0 ] && [ "$rt_launches" = "$drv_launches" ] ||
	fail "via driver: $rt_launches runtime launches but $drv_launches driver launches"
[ "$(count 'libcudart: cudaStreamSynchronize(')" = "$(count 'libcuda: cuStreamSynchronize(')" ] ||
	fail "via driver: stream waits do not pair up"
[ "$(count 'libcudart: cudaMalloc(')" = "$(count 'libcuda: cuMemAlloc_v2(')" ] ||
	fail "via driver: allocations do not pair up"
check_json "$TMP/via.json" "d['via_driver'] == 'all'
d['launches']['total'] - d['launches']['by_api']['cudaGraphLaunch'] == $rt_launches" || exit 1
SONDE_STANDIN_TRACE=1 "$GW/gpu_train" --gpus 1 --steps 1 --launches 1 --no-nccl \
	>/dev/null 2>"$TMP/default.err" || fail "gpu_train exited $?"
grep -q 'libcuda: cuLaunchKernel(' "$TMP/default.err" ||
	fail "the runtime did not reach the driver's cuLaunchKernel by default"
SONDE_STANDIN_TRACE=1 SONDE_STANDIN_CUDART_VIA_DRIVER=0 "$GW/gpu_train" --gpus 1 --steps 1 \
	--launches 1 --no-nccl >/dev/null 2>"$TMP/direct.err" || fail "gpu_train exited $?"
! grep -q 'libcuda: cu\(Launch\|MemAlloc\|StreamSync\|CtxSync\|GetProcAddress\)' "$TMP/direct.err" ||
	fail "the runtime called public driver functions with SONDE_STANDIN_CUDART_VIA_DRIVER=0"
echo "gpu_train: launches, allocations and waits reach the driver unless told not to"

"$GW/gpu_driver" -i 5 -k 2 >"$TMP/driver.json" || fail "gpu_driver exited $?"
check_json "$TMP/driver.json" "
d['launches']['by_api'] == {'cuLaunchKernel': 5 * 2 + 2 + 2, 'cuLaunchKernelEx': 5 * 2 + 1, 'cuGraphLaunch': 3}
d['failed'] == {'cuMemAlloc_v2': 1, 'cuMemFree_v2': 1, 'cuLaunchKernel': 1}
d['memory']['allocs_by_api']['cuMemCreate'] == {'calls': 1, 'bytes': 8 << 20}
d['memory']['frees_by_api']['cuMemRelease'] == {'calls': 1, 'bytes': 8 << 20}
[x['current_bytes'] for x in d['memory']['devices']] == [32 << 20, 0]
d['memory']['devices'][0]['peak_bytes'] == (32 + 16 + 8 + 1) << 20
d['mem_get_info']['total'] - d['mem_get_info']['free'] == ((32 + 16 + 8) << 20) + (500 << 20)
d['waits']['by_api']['cuStreamSynchronize']['count'] == 6
" || exit 1
echo "gpu_driver: truth line checks out"

# Kernels take the time asked: 2000 launches (1000 warm-up) of 100 µs each.
SONDE_STANDIN_KERNEL_US=100 "$GW/gpu_launch_bench" -n 1000 >"$TMP/slow.json" ||
	fail "gpu_launch_bench exited $?"
check_json "$TMP/slow.json" "d['bench']['elapsed_ns'] + d['bench']['sync_ns'] >= 0.195e9
d['bench']['sync_ns'] < 2e9" || exit 1
"$GW/gpu_launch_bench" -n 20000 --api handle >"$TMP/bench.json" || fail "gpu_launch_bench exited $?"
check_json "$TMP/bench.json" "d['launches']['by_api'] == {'__cudaLaunchKernel': 21000}
0 < d['bench']['ns_per_launch'] < 20000" || exit 1
echo "gpu_launch_bench: kernels take their time; $(python3 -c "import json; print(json.load(open('$TMP/bench.json'))['bench']['ns_per_launch'])") ns per launch"

# A collective that hangs for 300 ms: the call returns, the host waits in the sync.
SONDE_STANDIN_NCCL_HANG_MS=300 "$GW/nccl_hang" --before 2 --op reducescatter \
	>"$TMP/hang.json" 2>/dev/null || fail "nccl_hang exited $?"
check_json "$TMP/hang.json" "d['hang']['call'] == 3 and d['hang']['op'] == 'ncclReduceScatter'
0.3e9 <= d['hang']['waited_ns'] < 2.3e9
not d['hang']['interrupted']
d['nccl']['by_op']['ncclReduceScatter'] == {'calls': 3, 'bytes': 3 * 2 * (1 << 20)}
d['waits']['count'] == 3" || exit 1

# One that hangs until a signal.
SONDE_STANDIN_NCCL_HANG_MS=-1 "$GW/nccl_hang" --before 1 >"$TMP/forever.json" \
	2>"$TMP/forever.err" &
pid=$!
# Asleep in its hung wait: state S once it said it waits (within 10 s).
for _ in $(seq 500); do
	state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
	grep -q waiting "$TMP/forever.err" && [ "$state" = S ] && break
	sleep 0.02
done
[ "$state" = S ] || { kill -9 $pid; fail "nccl_hang should sleep in its hung wait, state '$state'"; }
kill -USR1 $pid
wait $pid || fail "nccl_hang exited $? after SIGUSR1"
check_json "$TMP/forever.json" "d['hang']['interrupted'] and d['hang']['hang_ms'] == -1
d['hang']['waited_ns'] > 0
d['failed'] == {'cudaStreamSynchronize': 1}" || exit 1
echo "nccl_hang: hangs 300 ms when asked, and until a signal with -1"

# No GPU, and too little memory, fail as the real runtime does.
SONDE_STANDIN_GPUS=0 "$GW/gpu_train" >/dev/null 2>"$TMP/nogpu.err" && fail "gpu_train ran without GPUs"
grep -q 'no CUDA-capable device' "$TMP/nogpu.err" || fail "no-GPU error: $(cat "$TMP/nogpu.err")"
# 32 MiB left once the context took its 500 MiB.
SONDE_STANDIN_GPU_MEM=532M "$GW/gpu_train" --gpus 1 >/dev/null 2>"$TMP/oom.err" &&
	fail "gpu_train ran in 32 MiB"
grep -q 'out of memory' "$TMP/oom.err" || fail "OOM error: $(cat "$TMP/oom.err")"
echo "no GPU and out-of-memory fail with the real error codes"

if [ -x "$GW/gpu_nvcc" ]; then
	SONDE_STANDIN_TRACE=1 "$GW/gpu_nvcc" 3 >"$TMP/nvcc.json" 2>"$TMP/nvcc.err" ||
		fail "gpu_nvcc exited $?"
	[ "$(grep -c 'cudaLaunchKernel(.*name=_Z5saxpyfPKfPfi grid=(4096,1,1) block=(256,1,1) .* = 0$' "$TMP/nvcc.err")" = 3 ] ||
		fail "nvcc-built saxpy<<<4096, 256>>> not seen as such: $(grep saxpy "$TMP/nvcc.err" | head -3)"
	grep -q 'name=_Z10scale_rowsPfiif grid=(32,64,1) block=(128,1,1)' "$TMP/nvcc.err" ||
		fail "nvcc-built scale_rows<<<dim3(32, 64), 128>>> not seen as such"
	check_json "$TMP/nvcc.json" "d['launches']['by_api'] == {'__cudaLaunchKernel': 6}" || exit 1
	echo "gpu_nvcc: real nvcc output runs on the stand-in runtime"
else
	echo "gpu_nvcc: not built (no nvcc), skipped"
fi
echo "PASS"
