/* coordinator.c: `sonde coordinator` -- parses the options, reads the
 * servers from --server options and a --config file, checks the TLS files
 * (net/tls.h: its own HTTPS, and its client side to https:// servers),
 * starts the coordinator of src/coord/coord.h on --listen and serves until
 * SIGINT or SIGTERM, then stops cleanly (requests in flight finish). */
#include "cli/cli.h"
#include "common/duration.h"
#include "common/log.h"
#include "coord/coord.h"
#include "net/http.h"
#include "net/tls.h"

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
	"                         [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
	"                         [--ca FILE] [--cert FILE --key FILE]\n"
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
	"  -s, --server [NAME=]URL  a sonde server (http://HOST:PORT, or https://HOST:PORT\n"
	"                           for one serving TLS); repeat for each\n"
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
	"      --tls-cert FILE      serve HTTPS, with this certificate (PEM, then any\n"
	"                           intermediates); plain HTTP on the port gets no answer\n"
	"      --tls-key FILE       the certificate's private key (PEM, unencrypted)\n"
	"      --tls-client-ca FILE mutual TLS: answer only clients that present a\n"
	"                           certificate signed by a CA of FILE (PEM); others get\n"
	"                           403\n"
	"      --ca FILE            trust the CA certificates of FILE (PEM), instead of the\n"
	"                           system's, to verify the https:// servers\n"
	"      --cert FILE          present this client certificate (PEM) to the https://\n"
	"                           servers, for their mutual TLS (--tls-client-ca)\n"
	"      --key FILE           the client certificate's private key (PEM, unencrypted)\n"
	"  -h, --help               this text\n";

/* getopt values of the long-only options. */
enum { OPT_TLS_CERT = 0x2001, OPT_TLS_KEY, OPT_TLS_CLIENT_CA, OPT_CA, OPT_CERT, OPT_KEY };

/* Checks the TLS options and files of both sides (the servers' side only
 * with an https:// server); 0, or the exit code after printing why. */
static int check_tls(const struct coord_config *cfg, const struct tls_server_opts *tls,
		     const struct tls_client_opts *ctls)
{
	struct tls_server_pem pem;
	char err[1024];
	bool https = false;

	if (tls_server__check_opts(tls, err, sizeof(err))) {
		pr_err("%s -- see `sonde coordinator --help`", err);
		return 2;
	}
	for (size_t i = 0; i < cfg->n; i++)
		https = https || !strncmp(cfg->sites[i].url, "https://", 8);
	if (tls_client__on(ctls) && !https) {
		pr_err("--ca, --cert and --key are for https:// servers, and no --server is one -- "
		       "see `sonde coordinator --help`");
		return 2;
	}
	if (tls_server__on(tls)) {
		if (tls_server__load(tls, &pem, err, sizeof(err))) {
			pr_err("can't serve HTTPS: %s", err);
			return 1;
		}
		tls_server_pem__free(&pem);
	}
	if (tls_client__check(ctls, err, sizeof(err))) {
		pr_err("can't use TLS to the servers: %s", err);
		return 1;
	}
	return 0;
}

int cmd_coordinator(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"server", required_argument, NULL, 's'},
		{"config", required_argument, NULL, 'c'},
		{"listen", required_argument, NULL, 'l'},
		{"timeout", required_argument, NULL, 'T'},
		{"threads", required_argument, NULL, 't'},
		{"tls-cert", required_argument, NULL, OPT_TLS_CERT},
		{"tls-key", required_argument, NULL, OPT_TLS_KEY},
		{"tls-client-ca", required_argument, NULL, OPT_TLS_CLIENT_CA},
		{"ca", required_argument, NULL, OPT_CA},
		{"cert", required_argument, NULL, OPT_CERT},
		{"key", required_argument, NULL, OPT_KEY},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct coord_opts o = {.listen = COORD_DEFAULT_LISTEN};
	struct coord_config cfg = {0};
	struct tls_server_opts tls = {0};
	struct tls_client_opts ctls = {0};
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
		case OPT_TLS_CERT:
			tls.cert = optarg;
			break;
		case OPT_TLS_KEY:
			tls.key = optarg;
			break;
		case OPT_TLS_CLIENT_CA:
			tls.client_ca = optarg;
			break;
		case OPT_CA:
			ctls.ca = optarg;
			break;
		case OPT_CERT:
			ctls.cert = optarg;
			break;
		case OPT_KEY:
			ctls.key = optarg;
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
	ret = check_tls(&cfg, &tls, &ctls);
	if (ret)
		goto cleanup;
	ret = 2;
	cfg.tls = &ctls;
	if (tls_server__on(&tls))
		o.tls = &tls;

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
		printf("sonde coordinator: listening on %s://%.*s:%d/ (%s%zu server%s, timeout "
		       "%s)\n",
		       tls.cert ? "https" : "http", hostlen ? hostlen : 9,
		       hostlen ? o.listen : "127.0.0.1", coord__port(c),
		       tls.client_ca ? "mutual TLS, " : "", cfg.n, cfg.n == 1 ? "" : "s", tmo);
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
