/* server.c: `sonde server` -- parses the options, checks the TLS files
 * (net/tls.h), opens the store (SQLite in --data, or ClickHouse at --store),
 * starts the HTTP server of src/server/server.h on --listen (HTTPS with
 * --tls-cert) and serves until SIGINT or SIGTERM, then stops cleanly
 * (requests in flight finish, the store is closed). */
#include "auth/tokens.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/duration.h"
#include "net/http.h"
#include "net/tls.h"
#include "server/server.h"
#include "store/store.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char server_help[] =
	"Usage: sonde server [--listen ADDR] [--data DIR | --store URL]\n"
	"                    [--retention DURATION] [--threads N] [--query-timeout DURATION]\n"
	"                    [--auth] [--max-series N] [--max-names SIZE]\n"
	"                    [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
	"\n"
	"The backend: ingests profile windows and metric points from agents and\n"
	"Pyroscope clients, stores them in an embedded SQLite database (or in\n"
	"ClickHouse, which several servers can share), answers the query API\n"
	"(docs/api.md) and serves the web UI. Runs until Ctrl-C or SIGTERM.\n"
	"\n"
	"Options:\n"
	"  -l, --listen ADDR        address of the API and UI (default 127.0.0.1:7470;\n"
	"                           HOST:PORT, :PORT, [V6]:PORT; port 0 picks a free one)\n"
	"  -D, --data DIR           where the store lives (default ./sonde-data; created)\n"
	"  -S, --store URL          a ClickHouse store instead (its HTTP interface):\n"
	"                           clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]\n"
	"                           (port 8123, database sonde by default; created when\n"
	"                           missing; USER and PASSWORD also from the environment:\n"
	"                           SONDE_CLICKHOUSE_USER, SONDE_CLICKHOUSE_PASSWORD)\n"
	"  -r, --retention DURATION how long data is kept (default 7d; e.g. 12h, 30d)\n"
	"  -t, --threads N          HTTP worker threads (default: the number of CPUs); the\n"
	"                           queries run on as many threads of their own (6 at\n"
	"                           most), so /healthz and ingest never wait behind them\n"
	"      --query-timeout DURATION\n"
	"                           how long one query may run before it is stopped and\n"
	"                           answered 503 (default 30s; e.g. 500ms, 2m)\n"
	"  -a, --auth               every request needs Authorization: Bearer TOKEN, a\n"
	"                           token of the store's (`sonde token create`); it reads\n"
	"                           and writes its own project alone (/healthz and the\n"
	"                           UI's files need none; the UI asks for a token)\n"
	"      --max-series N       series one project may hold (default 1000000); an\n"
	"                           ingest that would add one past it is refused (507)\n"
	"      --max-names SIZE     bytes of function names one project may hold\n"
	"                           (default 512M; a name counts 96 bytes besides its\n"
	"                           own; names are cut at 4096 bytes); SQLite store only\n"
	"      --tls-cert FILE      serve HTTPS, with this certificate (PEM, then any\n"
	"                           intermediates); plain HTTP on the port gets no answer\n"
	"      --tls-key FILE       the certificate's private key (PEM, unencrypted)\n"
	"      --tls-client-ca FILE mutual TLS: answer only clients that present a\n"
	"                           certificate signed by a CA of FILE (PEM); others get\n"
	"                           403 (agents: --cert and --key)\n"
	"  -h, --help               this text\n";

/* getopt values of the long-only options. */
enum {
	OPT_TLS_CERT = 0x2001,
	OPT_TLS_KEY,
	OPT_TLS_CLIENT_CA,
	OPT_QUERY_TIMEOUT,
	OPT_MAX_SERIES,
	OPT_MAX_NAMES
};

static void count_live(void *ctx, const struct token_row *row)
{
	*(size_t *)ctx += !row->revoked_ms;
}

int cmd_server(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"data", required_argument, NULL, 'D'},
		{"store", required_argument, NULL, 'S'},
		{"retention", required_argument, NULL, 'r'},
		{"threads", required_argument, NULL, 't'},
		{"query-timeout", required_argument, NULL, OPT_QUERY_TIMEOUT},
		{"auth", no_argument, NULL, 'a'},
		{"tls-cert", required_argument, NULL, OPT_TLS_CERT},
		{"tls-key", required_argument, NULL, OPT_TLS_KEY},
		{"tls-client-ca", required_argument, NULL, OPT_TLS_CLIENT_CA},
		{"max-series", required_argument, NULL, OPT_MAX_SERIES},
		{"max-names", required_argument, NULL, OPT_MAX_NAMES},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct server_opts o = {.listen = "127.0.0.1:7470"};
	const char *dir = "sonde-data", *url = NULL;
	struct server *srv = NULL;
	struct store *st = NULL;
	struct tokens *tokens = NULL;
	struct tls_server_opts tls = {0};
	struct tls_server_pem pem;
	char err[1024];
	bool auth = false, quota_set = false;
	struct store_quota quota = {STORE_DEFAULT_MAX_SERIES, STORE_DEFAULT_MAX_NAME_BYTES};
	sigset_t set;
	uint64_t retention, query_timeout;
	long threads, max_series;
	int opt, sig, ret = 1;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "l:D:S:r:t:ah", longopts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			o.listen = optarg;
			break;
		case 'D':
			dir = optarg;
			break;
		case 'S':
			url = optarg;
			break;
		case 'r':
			if (parse_duration_opt("--retention", optarg, 60000, DURATION_MAX_MS,
					       &retention))
				return 2;
			o.retention_ms = (int64_t)retention;
			break;
		case 't':
			if (parse_int_opt("--threads", optarg, 1, 1024, &threads))
				return 2;
			o.threads = (unsigned)threads;
			break;
		case OPT_QUERY_TIMEOUT:
			if (parse_duration_opt("--query-timeout", optarg, 100, 3600000,
					       &query_timeout))
				return 2;
			o.query_timeout_ms = query_timeout;
			break;
		case 'a':
			auth = true;
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
		case OPT_MAX_SERIES:
			if (parse_int_opt("--max-series", optarg, 1, LONG_MAX, &max_series))
				return 2;
			quota.max_series = (uint64_t)max_series;
			quota_set = true;
			break;
		case OPT_MAX_NAMES:
			if (parse_bytes_opt("--max-names", optarg, 1 << 20, &quota.max_name_bytes))
				return 2;
			quota_set = true;
			break;
		case 'h':
			fputs(server_help, stdout);
			return 0;
		default:
			fputs(server_help, stderr);
			return 2;
		}
	}
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde server --help`", argv[optind]);
		return 2;
	}
	if (tls_server__check_opts(&tls, err, sizeof(err))) {
		pr_err("%s -- see `sonde server --help`", err);
		return 2;
	}
	/* Bad TLS files stop the server before it opens the store. */
	if (tls_server__on(&tls)) {
		if (tls_server__load(&tls, &pem, err, sizeof(err))) {
			pr_err("can't serve HTTPS: %s", err);
			return 1;
		}
		tls_server_pem__free(&pem);
		o.tls = &tls;
	}

	/* Signals go to sigwait() below, not to the HTTP threads, which
	 * inherit this mask. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	st = url ? store_clickhouse__open(url) : store_sqlite__open(dir);
	if (!st)
		goto cleanup; /* the store said why */
	o.store = st;
	if (quota_set && store__set_quota(st, &quota)) {
		pr_err("--max-series and --max-names bound the SQLite store alone -- drop them "
		       "with --store");
		goto cleanup;
	}
	if (auth) {
		size_t live = 0;

		tokens = tokens__open(url ? url : dir);
		if (!tokens)
			goto cleanup; /* it said why */
		o.tokens = tokens;
		if (!tokens__list(tokens, count_live, &live) && !live)
			pr_warn("--auth and no token in force yet: every request will be refused "
				"until one is made -- sonde token create %s %s --project P --role "
				"admin",
				url ? "--store" : "--data", url ? "URL" : dir);
	}
	srv = server__start(&o);
	if (!srv)
		goto cleanup;
	{
		const char *colon = strrchr(o.listen, ':');
		int hostlen = colon ? (int)(colon - o.listen) : 0;
		long long hours = (o.retention_ms ? o.retention_ms : 7LL * 24 * 3600 * MS_PER_SEC) /
				  (3600 * MS_PER_SEC);
		/* The URL without its credentials (the store checked its form). */
		const char *at = url ? strchr(url, '@') : NULL, *slash;
		char url_shown[512] = "";

		if (url) {
			slash = strchr(url + 13, '/');
			snprintf(url_shown, sizeof(url_shown), "clickhouse://%s",
				 at && (!slash || at < slash) ? at + 1 : url + 13);
		}

		printf("sonde server: listening on %s://%.*s:%d/ (%sdata in %s, retention %lld "
		       "h%s)\n",
		       tls.cert ? "https" : "http", hostlen ? hostlen : 9,
		       hostlen ? o.listen : "127.0.0.1", server__port(srv),
		       tls.client_ca ? "mutual TLS, " : "", url ? url_shown : dir, hours,
		       auth ? ", tokens required" : "");
	}
	fflush(stdout);
	if (sigwait(&set, &sig) == 0)
		pr_info("sonde server: %s, stopping", sig == SIGINT ? "interrupted" : "terminated");
	ret = 0;
cleanup:
	server__stop(srv);
	tokens__close(tokens);
	store__close(st);
	return ret;
}
