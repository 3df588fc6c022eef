# gpu_common.sh: what the GPU benchmarks (gpu_launch.sh, gpu_cupti.sh) share;
# sourced. Expects TMP (a scratch directory), SONDE and BENCH set.

# Starts a tracer in the background and waits until it says it is attached
# (the line matching $1 on its output); its pid in $tracer.
start_tracer() {
	local ready=$1 i
	shift
	"$@" >"$TMP/tracer.out" 2>&1 &
	tracer=$!
	for i in $(seq 300); do
		grep -q "$ready" "$TMP/tracer.out" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "tracer not ready: $*" >&2
	cat "$TMP/tracer.out" >&2
	exit 1
}

# Starts `sonde agent --no-cpu ARGS...` as the tracer and waits, past its
# start, for its search of the filesystems for CUDA and NCCL libraries to be
# over: a one-off at start whose CPU would otherwise count against the
# launches. The search's own line goes to $TMP/search.
start_sonde() {
	local url i
	start_tracer "metrics on" "$SONDE" agent --no-cpu --metrics 127.0.0.1:0 --ws 127.0.0.1:0 "$@"
	url=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$TMP/tracer.out" | head -1)
	for i in $(seq 3000); do
		curl -s "$url" | grep -q '^sonde_agent_gpu_library_search_done 1' && break
		sleep 0.1
	done
	grep -o 'searched .*' "$TMP/tracer.out" >"$TMP/search" || true
}

stop_tracer() {
	kill -INT "$tracer" 2>/dev/null || true
	wait "$tracer" 2>/dev/null || true
}

median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# CPU time of every thread of a process, ns, from the scheduler's own clock
# (/proc/PID/task/*/schedstat).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }

# The machine, for a report's first line.
machine_line() {
	echo "$(uname -r), $(nproc) CPUs ($(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//')), $(date -u +%Y-%m-%d)."
}
