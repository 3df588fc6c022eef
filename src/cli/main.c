/* main.c: the `sonde` binary's entry point. Dispatches `sonde COMMAND ...` to
 * the subcommand table (bpftool style) and holds the option helpers the
 * subcommands share. */
#include "probe/bpf_msgs.h"
#include "cli/cli.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/duration.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} cmds[] = {
	{"record", cmd_record, "profile the machine, some pids or a command; write a profile"},
	{"top", cmd_top, "live view of the hottest functions"},
	{"agent", cmd_agent, "node daemon: probes, Prometheus metrics, WebSocket stream, alerts"},
	{"watch", cmd_watch, "live terminal dashboard of an agent's WebSocket stream"},
	{"server", cmd_server, "ingest, store and query profiles; the web UI"},
	{"run", cmd_run, "agent + server + UI on this machine, in one process"},
	{"coordinator", cmd_coordinator, "one API and UI over many servers, merged"},
	{"token", cmd_token, "create, list and revoke the tokens of `sonde server --auth`"},
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: sonde COMMAND [OPTIONS]\n"
		   "       sonde COMMAND --help\n\n"
		   "Sonde is a continuous CPU and GPU profiler built on eBPF.\n\n"
		   "Commands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n  help         this text\n  version      print the version\n");
}

int parse_int_opt(const char *opt, const char *arg, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max) {
		pr_err("invalid value '%s' for %s: expected an integer from %ld to %ld", arg, opt,
		       min, max);
		return -1;
	}
	*out = v;
	return 0;
}

int parse_duration_opt(const char *opt, const char *arg, uint64_t min_ms, uint64_t max_ms,
		       uint64_t *out_ms)
{
	char lo[32], hi[32];
	uint64_t v;

	if (!duration_parse(arg, &v) && v >= min_ms && v <= max_ms) {
		*out_ms = v;
		return 0;
	}
	duration_format(lo, sizeof(lo), min_ms);
	duration_format(hi, sizeof(hi), max_ms);
	pr_err("invalid value '%s' for %s: expected a duration from %s to %s (e.g. 10, 0.5, "
	       "250ms, 1h30m)",
	       arg, opt, lo, hi);
	return -1;
}

int parse_duration_ns_opt(const char *opt, const char *arg, uint64_t min_ns, uint64_t max_ns,
			  uint64_t *out_ns)
{
	uint64_t v;

	if (!duration_parse_ns(arg, &v) && v >= min_ns && v <= max_ns) {
		*out_ns = v;
		return 0;
	}
	pr_err("invalid value '%s' for %s: expected a duration from %.0f us to %.0f s (e.g. 1ms, "
	       "500us, 0.002)",
	       arg, opt, (double)min_ns / NS_PER_US, (double)max_ns / NS_PER_SEC);
	return -1;
}

int parse_bytes_opt(const char *opt, const char *arg, uint64_t min, uint64_t *out)
{
	const char *end;
	uint64_t v = parse_bytes(arg, &end);

	if (v && !*end && v >= min) {
		*out = v;
		return 0;
	}
	pr_err("invalid value '%s' for %s: expected a size of at least %" PRIu64 "M, e.g. 64M", arg,
	       opt, min >> 20);
	return -1;
}

int parse_pid_list(const char *arg, int *pids, int max)
{
	char *copy = strdup(arg), *tok, *save = NULL;
	int n = 0, ret = -1;

	if (!copy)
		return -1;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		long pid;
		char path[64];

		if (parse_int_opt("-p", tok, 1, INT_MAX, &pid))
			goto out;
		if (n >= max) {
			pr_err("too many pids in -p (at most %d)", max);
			goto out;
		}
		snprintf(path, sizeof(path), "/proc/%ld", pid);
		if (access(path, F_OK)) {
			pr_err("no process with pid %ld -- check the pid with `ps -p %ld`", pid,
			       pid);
			goto out;
		}
		pids[n++] = (int)pid;
	}
	if (n == 0) {
		pr_err("-p needs at least one pid");
		goto out;
	}
	ret = n;
out:
	free(copy);
	return ret;
}

int main(int argc, char **argv)
{
	log_init();
	bpf_msgs__init();
	/* A closed pipe on stdout (sonde record -o - | head) is an ordinary
	 * end, not a crash. */
	signal(SIGPIPE, SIG_IGN);

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version") ||
	    !strcmp(argv[1], "-V")) {
		printf("sonde %s\n", SONDE_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	pr_err("unknown command '%s' -- see `sonde help`", argv[1]);
	return 2;
}
