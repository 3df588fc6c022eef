/* token.c: `sonde token create|list|revoke` -- the tokens of a store
 * (auth/tokens.h), written straight into it: DIR/tokens.db beside an
 * embedded store (while its server runs, too), or the tokens table of a
 * ClickHouse database, which every server on it reads. A new token is
 * printed once, on stdout; only its hash is kept. */
#include "auth/tokens.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
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
	time_t t = (time_t)(ms / MS_PER_SEC);
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

/* What a verb is given: create's project and role, revoke's token id. */
struct token_args {
	const char *project;
	enum token_role role;
	const char *id;
};

static int token_create(struct tokens *t, const struct token_args *a)
{
	char token[TOKEN_LEN + 1], id[TOKEN_ID_LEN + 1];
	int err = tokens__create(t, a->project, a->role, token, id);

	if (!err) {
		printf("%s\n", token);
		fflush(stdout);
		fprintf(stderr,
			"sonde token: created %s (project %s, role %s) -- keep the token: "
			"it is not stored and can't be shown again\n",
			id, a->project, token_role_name(a->role));
		memset(token, 0, sizeof(token));
	}
	return err;
}

static int token_list(struct tokens *t, const struct token_args *a)
{
	int n = 0;

	printf("%-12s  %-20s  %-6s  %-20s  %s\n", "ID", "PROJECT", "ROLE", "CREATED", "REVOKED");
	return tokens__list(t, list_row, &n);
}

static int token_revoke(struct tokens *t, const struct token_args *a)
{
	int err = tokens__revoke(t, a->id);

	if (err == -ENOENT)
		pr_err("no token with id '%s' -- see `sonde token list`", a->id);
	else if (!err)
		fprintf(stderr, "sonde token: revoked %s\n", a->id);
	return err;
}

/* The verbs: what each takes besides where the tokens are, and does. */
static const struct token_verb {
	const char *name;
	bool project_role; /* --project and --role, which it needs */
	bool id;	   /* one argument, a token's ID */
	int (*run)(struct tokens *t, const struct token_args *a);
} verbs[] = {
	{"create", true, false, token_create},
	{"list", false, false, token_list},
	{"revoke", false, true, token_revoke},
};

int cmd_token(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"data", required_argument, NULL, 'D'},	   {"store", required_argument, NULL, 'S'},
		{"project", required_argument, NULL, 'p'}, {"role", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},	   {},
	};
	const char *dir = NULL, *url = NULL, *role_name = NULL;
	const struct token_verb *v = NULL;
	struct token_args a = {0};
	struct tokens *t = NULL;
	int opt, err;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(token_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(verbs) && !v; i++)
		if (!strcmp(argv[1], verbs[i].name))
			v = &verbs[i];
	if (!v) {
		pr_err("unknown token command '%s' -- create, list or revoke (see `sonde token "
		       "--help`)",
		       argv[1]);
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
			a.project = optarg;
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
		       v->name);
		return 2;
	}
	if (v->project_role) {
		if (!token_project_valid(a.project)) {
			pr_err("sonde token %s needs --project P: 1 to 64 of A-Z a-z 0-9 _ . -%s",
			       v->name, a.project ? " (this one is not)" : "");
			return 2;
		}
		a.role = token_role_parse(role_name);
		if (!a.role) {
			pr_err("sonde token %s needs --role ingest, read or admin%s", v->name,
			       role_name ? " (not that)" : "");
			return 2;
		}
	} else if (a.project || role_name) {
		pr_err("--project and --role are for sonde token create");
		return 2;
	}
	if (v->id ? optind != argc - 1 : optind != argc) {
		if (v->id)
			pr_err("sonde token %s needs the token's ID (see `sonde token list`)",
			       v->name);
		else
			pr_err("unexpected argument '%s'", optind < argc ? argv[optind] : "");
		return 2;
	}
	a.id = v->id ? argv[optind] : NULL;

	t = tokens__open(url ? url : dir);
	if (!t)
		return 1; /* it said why */
	err = v->run(t, &a);
	if (err && err != -ENOENT)
		pr_err("sonde token %s failed: %s", v->name, strerror(-err));
	tokens__close(t);
	return err ? 1 : 0;
}
