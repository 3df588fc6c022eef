/* run.c: `sonde run` -- everything on one machine in one process: the
 * embedded store in --data, the server (API and web UI) on --listen, and an
 * agent that ships its windows, points and alerts to that server over
 * loopback, as any agent would to a remote one. Takes every option of
 * `sonde agent` too. */
#include "agent/agent.h"
#include "cli/cli.h"
#include "common/log.h"
#include "common/duration.h"
#include "server/server.h"
#include "store/store.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char run_help[] =
	"Usage: sonde run [--listen ADDR] [--data DIR] [--retention DURATION]\n"
	"                 [any option of `sonde agent`]\n"
	"\n"
	"Profiles this machine and shows it in the browser: the agent (CPU sampling,\n"
	"CUDA and NCCL probes, metrics on :9091, stream on :9092, alerts) and the\n"
	"server with its embedded store and web UI, in one process. Prints the UI's\n"
	"address; runs until Ctrl-C.\n"
	"\n"
	"Options:\n"
	"  -l, --listen ADDR        the API and UI (default 127.0.0.1:7470; port 0\n"
	"                           picks a free one)\n"
	"  -D, --data DIR           where profiles are stored (default ./sonde-data)\n"
	"  -E, --retention DURATION how long they are kept (default 7d)\n"
	"  --window SECS            how often profiles reach the UI (default 10)\n"
	"  --service-by LIST        what names a process's service (default\n"
	"                           env:SONDE_SERVICE,process; see `sonde agent --help`)\n"
	"  ...                      and every option of `sonde agent --help`\n"
	"  -h, --help               this text\n";

/* The agent's options and run's own, in one getopt table. */
static struct option *run_options(void)
{
	static const struct option own[] = {
		{"listen", required_argument, NULL, 'l'},
		{"data", required_argument, NULL, 'D'},
		{"retention", required_argument, NULL, 'E'},
	};
	size_t n = 0, k = sizeof(own) / sizeof(own[0]);
	struct option *all;

	while (agent_longopts[n].name)
		n++;
	all = calloc(n + k + 1, sizeof(*all));
	if (!all)
		return NULL;
	memcpy(all, own, sizeof(own));
	memcpy(all + k, agent_longopts, n * sizeof(*all));
	return all;
}

int cmd_run(int argc, char **argv)
{
	struct server_opts so = {.listen = "127.0.0.1:7470"};
	struct option *opts = run_options();
	const char *dir = "sonde-data";
	char server_url[128], ui_url[160];
	struct server *srv = NULL;
	struct store *st = NULL;
	struct agent_opts o;
	uint64_t retention;
	int opt, ret = 1;

	if (!opts)
		return 1;
	agent_opts__init(&o);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "l:D:E:F:p:d:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			so.listen = optarg;
			break;
		case 'D':
			dir = optarg;
			break;
		case 'E':
			if (parse_duration_opt("--retention", optarg, 60000, DURATION_MAX_MS,
					       &retention))
				goto out_usage;
			so.retention_ms = (int64_t)retention;
			break;
		case 'h':
			fputs(run_help, stdout);
			ret = 0;
			goto out;
		case 'U':
			pr_err("sonde run has its own server: --server is for `sonde agent`");
			goto out_usage;
		case 'P':
			pr_err("--print-rules is an option of `sonde agent`");
			goto out_usage;
		case '?':
			fputs(run_help, stderr);
			goto out_usage;
		default:
			if (agent_parse_opt(&o, opt, optarg) < 0)
				goto out_usage;
		}
	}
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde run --help`", argv[optind]);
		goto out_usage;
	}
	if (agent_check_opts(&o))
		goto out_usage;

	st = store_sqlite__open(dir);
	if (!st)
		goto out;
	so.store = st;
	srv = server__start(&so);
	if (!srv)
		goto out;
	/* The agent ships over loopback whatever address the server binds. */
	snprintf(server_url, sizeof(server_url), "http://127.0.0.1:%d", server__port(srv));
	if (so.listen[0] == ':' || !strncmp(so.listen, "0.0.0.0:", 8) || so.listen[0] == '[')
		snprintf(ui_url, sizeof(ui_url), "http://127.0.0.1:%d/", server__port(srv));
	else
		snprintf(ui_url, sizeof(ui_url), "http://%.*s:%d/",
			 (int)(strrchr(so.listen, ':') - so.listen), so.listen, server__port(srv));
	o.server = server_url;
	o.ui_url = ui_url;
	/* The two lines a user sees are the agent's and the UI's address;
	 * where the store is, at info level (SONDE_LOG=info). */
	pr_info("run: store in %s/, server on %s", dir, server_url);
	ret = agent_run(&o);

out:
	server__stop(srv);
	store__close(st);
	free(opts);
	return ret;
out_usage:
	free(opts);
	return 2;
}
