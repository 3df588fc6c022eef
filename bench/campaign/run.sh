#!/usr/bin/env bash
# run.sh: the fault and load campaign at full size (docs/reliability.md). Each
# case is the test of `make test` (tests/integration/test_faults_*.py) run
# with the campaign's parameters in its environment; each prints its figures
# as a "FIGURES {json}" line, collected in $OUT/figures.jsonl, and its log is
# $OUT/CASE.log. At the end bench/campaign/report.py prints the Markdown
# tables of docs/reliability.md from the figures.
#
#   B=build CASES="load load_ch load_300 server_kill disk_full ch_kill agent_kill
#                  connections big_body" OUT=build/campaign bash bench/campaign/run.sh
#
# A case that ends in a known failure (exit 77, 'known failure: ...') is
# reported as such with its figures; any other failure makes the run exit 1.
# The fuzzing case is bench/campaign/fuzz.sh (make bench-campaign-fuzz): hours
# on two CPUs.
set -u
cd "$(dirname "$0")/../.."
export B=${B:-build}
OUT=${OUT:-$B/campaign}
CASES=${CASES:-load load_ch load_300 server_kill disk_full ch_kill agent_kill connections big_body}
mkdir -p "$OUT"
export CAMPAIGN_OUT=$OUT/figures.jsonl
: >"$CAMPAIGN_OUT"

# name, then the environment and the test of each case.
case_env() {
	local load="LOAD_WINDOW=10 LOAD_SECONDS=600"
	case $1 in
	load) echo "LOAD_AGENTS=200 $load LOAD_STORE=sqlite test_faults_load.py" ;;
	load_ch) echo "LOAD_AGENTS=200 $load LOAD_STORE=clickhouse test_faults_load.py" ;;
	load_300) echo "LOAD_AGENTS=300 LOAD_WINDOW=10 LOAD_SECONDS=120 test_faults_load.py" ;;
	server_kill)
		echo "KILL_AGENTS=200 KILL_WINDOW=10 KILL_ROUNDS=3 KILL_AFTER=600" \
			"test_faults_server_kill.py" ;;
	disk_full)
		echo "FULL_AGENTS=200 FULL_WINDOW=10 FULL_FAILS=1200 FULL_SIZE_MB=64" \
			"test_faults_disk_full.py" ;;
	ch_kill) echo "CHKILL_AGENTS=200 CHKILL_WINDOW=10 CHKILL_FAILS=600 test_faults_clickhouse.py" ;;
	agent_kill) echo "AGENTKILL_WINDOW=10 AGENTKILL_ROUNDS=5 test_faults_agent_kill.py" ;;
	connections)
		echo "CONN_PHASE=120 CONN_IDLE=10000 CONN_SLOW=500 CONN_SPREAD=17000" \
			"test_faults_connections.py" ;;
	big_body) echo "test_faults_big_body.py" ;;
	*) return 1 ;;
	esac
}

echo "campaign: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)" \
	"($(git status --porcelain src | wc -l) files changed in src/), $B/sonde of" \
	"$(date -u -r "$B/sonde" '+%H:%M UTC'), $(nproc) CPUs," \
	"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r)," \
	"load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/header.txt"
failed=()
for c in $CASES; do
	spec=$(case_env "$c") || { echo "unknown case '$c'" >&2; exit 2; }
	test=${spec##* }
	envs=${spec% *}
	[ "$envs" = "$test" ] && envs=
	echo "== $c: $envs tests/integration/$test"
	start=$(date +%s)
	env $envs python3 "tests/integration/$test" >"$OUT/$c.log" 2>&1
	rc=$?
	case $rc in
	0) what=passed ;;
	77) what="$(grep -m1 '^SKIP' "$OUT/$c.log")" ;;
	*) what="FAILED (exit $rc)"; failed+=("$c") ;;
	esac
	echo "   $what in $(( $(date +%s) - start )) s; log $OUT/$c.log"
	grep -E '^(FAIL|KNOWN FAILURE)' "$OUT/$c.log" | sed 's/^/   /'
done
echo
python3 bench/campaign/report.py "$CAMPAIGN_OUT"
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
