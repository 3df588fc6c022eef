/* token.c: `sonde token create|list|revoke` -- the tokens of a store
 * (auth/tokens.h), written straight into it: DIR/tokens.db beside an
 * embedded store (while its server runs, too), or the tokens table of a
 * ClickHouse database, which every server on it reads. A new token is
 * printed once, on stdout; only its hash is kept. */
#include "auth/tokens.h"
#include "cli/cli.h"
#include "common/log.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char token_help[] =
	"Usage: sonde token create (--data DIR | --store URL) --project P --role ROLE\n"
	"       sonde token list   (--data DIR | --store URL)\n"
	"       sonde token revoke (--data DIR | --store URL) ID\n"
	"\n"
	"The tokens that `sonde server --auth` asks of every request (Authorization:\n"
	"Bearer TOKEN). A token belongs to one project, whose data it alone reads and\n"
	"writes, and has one role: ingest (agents and clients that send profiles,\n"
	"points and alerts), read (queries and the web UI) or admin (both). `create`\n"
	"prints the new token on stdout -- once: only its hash is stored -- and its\n"
	"id on stderr; `list` shows every token's id, project, role, creation and\n"
	"revocation; `revoke ID` ends one (servers stop taking it within 2 s).\n"
	"\n"
	"Options:\n"
	"  -D, --data DIR      the store's --data directory (tokens in DIR/tokens.db;\n"
	"                      a running server's too)\n"
	"  -S, --store URL     a ClickHouse store: "
	"clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DB]\n"
	"  -p, --project P     the project: 1 to 64 of A-Z a-z 0-9 _ . -\n"
	"  -r, --role ROLE     ingest, read or admin\n"
	"  -h, --help          this text\n";

static void print_time(char *out, size_t size, int64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (!ms || !gmtime_r(&t, &tm) || !strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, size, "-");
}

static void list_row(void *ctx, const struct token_row *row)
{
	char created[32], revoked[32];

	print_time(created, sizeof(created), row->created_ms);
	print_time(revoked, sizeof(revoked), row->revoked_ms);
	printf("%-12s  %-20s  %-6s  %-20s  %s\n", row->id, row->project, token_role_name(row->role),
	       created, revoked);
	(*(int *)ctx)++;
}

int cmd_token(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"data", required_argument, NULL, 'D'},	   {"store", required_argument, NULL, 'S'},
		{"project", required_argument, NULL, 'p'}, {"role", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},	   {},
	};
	const char *dir = NULL, *url = NULL, *project = NULL, *role_name = NULL, *verb;
	enum token_role role = 0;
	struct tokens *t = NULL;
	int opt, err, ret = 1, n = 0;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(token_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	verb = argv[1];
	if (strcmp(verb, "create") && strcmp(verb, "list") && strcmp(verb, "revoke")) {
		pr_err("unknown token command '%s' -- create, list or revoke (see `sonde token "
		       "--help`)",
		       verb);
		return 2;
	}
	optind = 2;
	while ((opt = getopt_long(argc, argv, "D:S:p:r:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'D':
			dir = optarg;
			break;
		case 'S':
			url = optarg;
			break;
		case 'p':
			project = optarg;
			break;
		case 'r':
			role_name = optarg;
			break;
		case 'h':
			fputs(token_help, stdout);
			return 0;
		default:
			fputs(token_help, stderr);
			return 2;
		}
	}
	if (!dir == !url) {
		pr_err("sonde token %s needs one of --data DIR and --store URL: where the tokens "
		       "are",
		       verb);
		return 2;
	}
	if (!strcmp(verb, "create")) {
		if (!token_project_valid(project)) {
			pr_err("sonde token create needs --project P: 1 to 64 of A-Z a-z 0-9 _ . "
			       "-%s",
			       project ? " (this one is not)" : "");
			return 2;
		}
		role = token_role_parse(role_name);
		if (!role) {
			pr_err("sonde token create needs --role ingest, read or admin%s",
			       role_name ? " (not that)" : "");
			return 2;
		}
	} else if (project || role_name) {
		pr_err("--project and --role are for sonde token create");
		return 2;
	}
	if (!strcmp(verb, "revoke") ? optind != argc - 1 : optind != argc) {
		pr_err(!strcmp(verb, "revoke") ? "sonde token revoke needs the token's ID (see "
						 "`sonde token list`)"
					       : "unexpected argument '%s'",
		       optind < argc ? argv[optind] : "");
		return 2;
	}

	t = tokens__open(url ? url : dir);
	if (!t)
		return 1; /* it said why */
	if (!strcmp(verb, "create")) {
		char token[TOKEN_LEN + 1], id[TOKEN_ID_LEN + 1];

		err = tokens__create(t, project, role, token, id);
		if (!err) {
			printf("%s\n", token);
			fflush(stdout);
			fprintf(stderr,
				"sonde token: created %s (project %s, role %s) -- keep the token: "
				"it is not stored and can't be shown again\n",
				id, project, token_role_name(role));
			memset(token, 0, sizeof(token));
		}
	} else if (!strcmp(verb, "list")) {
		printf("%-12s  %-20s  %-6s  %-20s  %s\n", "ID", "PROJECT", "ROLE", "CREATED",
		       "REVOKED");
		err = tokens__list(t, list_row, &n);
	} else {
		err = tokens__revoke(t, argv[optind]);
		if (err == -ENOENT)
			pr_err("no token with id '%s' -- see `sonde token list`", argv[optind]);
		else if (!err)
			fprintf(stderr, "sonde token: revoked %s\n", argv[optind]);
	}
	if (err && err != -ENOENT)
		pr_err("sonde token %s failed: %s", verb, strerror(-err));
	ret = err ? 1 : 0;
	tokens__close(t);
	return ret;
}
