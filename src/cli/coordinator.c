/* coordinator.c: `sonde coordinator` -- parses the options, reads the
 * servers from --server options and a --config file, starts the
 * coordinator of src/coord/coord.h on --listen and serves until SIGINT or
 * SIGTERM, then stops cleanly (requests in flight finish). */
#include "cli/cli.h"
#include "common/duration.h"
#include "common/log.h"
#include "coord/coord.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char coordinator_help[] =
	"Usage: sonde coordinator (--server [NAME=]URL ... | --config FILE)\n"
	"                         [--listen ADDR] [--timeout DURATION] [--threads N]\n"
	"\n"
	"One API and web UI over many sonde servers, each a site with its own store.\n"
	"Every query is sent to every server at once and their answers are merged\n"
	"exactly: flame graphs summed by stack, top functions and diffs computed from\n"
	"the merged profiles, time series summed, label values unioned, points and\n"
	"alerts together, pprof merged. A server that fails or takes longer than\n"
	"--timeout leaves the answer partial: JSON answers then carry\n"
	"\"partial\": true and \"failed\": [{\"server\": URL, \"error\": ...}], downloads\n"
	"the headers Sonde-Partial and Sonde-Failed; when every server fails the\n"
	"answer is a 502 (504 when they all timed out). Runs until Ctrl-C or SIGTERM.\n"
	"\n"
	"Options:\n"
	"  -s, --server [NAME=]URL  a sonde server (http://HOST:PORT); repeat for each\n"
	"  -c, --config FILE        servers from a YAML file:\n"
	"                             servers:\n"
	"                               - name: eu-1            # optional, unique\n"
	"                                 url: http://10.0.0.7:7470\n"
	"                                 labels: {region: eu}  # optional\n"
	"  -l, --listen ADDR        address of the API and UI (default 127.0.0.1:7480;\n"
	"                           HOST:PORT, :PORT, [V6]:PORT; port 0 picks a free one)\n"
	"  -T, --timeout DURATION   how long each server is given per request (default\n"
	"                           5s; e.g. 500ms, 30s)\n"
	"  -t, --threads N          HTTP worker threads (default 16: they wait on servers)\n"
	"  -h, --help               this text\n";

int cmd_coordinator(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"server", required_argument, NULL, 's'},
		{"config", required_argument, NULL, 'c'},
		{"listen", required_argument, NULL, 'l'},
		{"timeout", required_argument, NULL, 'T'},
		{"threads", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct coord_opts o = {.listen = COORD_DEFAULT_LISTEN};
	struct coord_config cfg = {0};
	struct coord *c = NULL;
	char err[1024];
	sigset_t set;
	uint64_t ms;
	long threads;
	int opt, sig, ret = 2;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "s:c:l:T:t:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			if (coord_config__add(&cfg, optarg, err, sizeof(err))) {
				pr_err("invalid value for --server: %s", err);
				goto cleanup;
			}
			break;
		case 'c':
			if (coord_config__load(&cfg, optarg, err, sizeof(err))) {
				pr_err("can't use --config: %s", err);
				ret = 1;
				goto cleanup;
			}
			break;
		case 'l':
			o.listen = optarg;
			break;
		case 'T':
			if (parse_duration_opt("--timeout", optarg, 10, 3600000, &ms))
				goto cleanup;
			o.timeout_ms = ms;
			break;
		case 't':
			if (parse_int_opt("--threads", optarg, 1, 1024, &threads))
				goto cleanup;
			o.threads = (unsigned)threads;
			break;
		case 'h':
			fputs(coordinator_help, stdout);
			ret = 0;
			goto cleanup;
		default:
			fputs(coordinator_help, stderr);
			goto cleanup;
		}
	}
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde coordinator --help`", argv[optind]);
		goto cleanup;
	}
	if (!cfg.n) {
		pr_err("no servers to coordinate -- give --server URL (repeated) or --config FILE");
		goto cleanup;
	}

	/* Signals go to sigwait() below, not to the HTTP threads, which
	 * inherit this mask. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	ret = 1;
	o.cfg = &cfg;
	c = coord__start(&o);
	if (!c)
		goto cleanup; /* it said why */
	{
		const char *colon = strrchr(o.listen, ':');
		int hostlen = colon ? (int)(colon - o.listen) : 0;
		char tmo[32];

		duration_format(tmo, sizeof(tmo),
				o.timeout_ms ? o.timeout_ms : COORD_DEFAULT_TIMEOUT_MS);
		printf("sonde coordinator: listening on http://%.*s:%d/ (%zu server%s, timeout "
		       "%s)\n",
		       hostlen ? hostlen : 9, hostlen ? o.listen : "127.0.0.1", coord__port(c),
		       cfg.n, cfg.n == 1 ? "" : "s", tmo);
	}
	fflush(stdout);
	if (sigwait(&set, &sig) == 0)
		pr_info("sonde coordinator: %s, stopping",
			sig == SIGINT ? "interrupted" : "terminated");
	ret = 0;
cleanup:
	coord__stop(c);
	coord_config__free(&cfg);
	return ret;
}
