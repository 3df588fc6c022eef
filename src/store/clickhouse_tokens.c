/* clickhouse_tokens.c: the tokens of a ClickHouse store (tokens.h) --
 * the tokens table of its database, which every server on that database
 * reads: a row per token and version (ReplacingMergeTree by id; a
 * revocation is the row again with revoked_ms set and a higher version),
 * read back as the latest version of each id. Only hashes are stored. */
#include "store/clickhouse_internal.h"
#include "store/tokens.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"

struct ch_tokens {
	struct token_backend base; /* first: the backend is cast back */
	struct store *store;	   /* the ClickHouse store: its connections */
};

static struct ch_store *chs(struct token_backend *b)
{
	return ch_store(((struct ch_tokens *)b)->store);
}

static int ct_put(struct token_backend *b, const struct token_row *row)
{
	struct sbuf sql = {0};
	int err;

	err = sbuf__puts(&sql, "INSERT INTO tokens VALUES (");
	if (!err)
		err = ch_sql_str(&sql, row->id);
	if (!err)
		err = sbuf__puts(&sql, ", ");
	if (!err)
		err = ch_sql_str(&sql, row->hash);
	if (!err)
		err = sbuf__puts(&sql, ", ");
	if (!err)
		err = ch_sql_str(&sql, row->project);
	if (!err)
		err = sbuf__printf(&sql, ", %d, %" PRId64 ", 0, 1)", (int)row->role,
				   row->created_ms);
	if (!err)
		err = ch__query(chs(b), sql.buf, NULL, "store a token");
	sbuf__free(&sql);
	return err;
}

/* A token's latest version: what never changes, then when it was revoked. */
#define LATEST_FIXED                                                                               \
	"argMax(hash, ver), argMax(project, ver), argMax(role, ver), argMax(created_ms, ver)"
#define LATEST LATEST_FIXED ", argMax(revoked_ms, ver)"

static int ct_revoke(struct token_backend *b, const char *id, int64_t when_ms)
{
	struct sbuf sql = {0}, ans = {0};
	struct rb_reader r;
	uint64_t n = 0;
	int err;

	err = sbuf__puts(&sql, "SELECT count() FROM tokens WHERE id = ");
	if (!err)
		err = ch_sql_str(&sql, id);
	if (!err)
		err = sbuf__puts(&sql, " FORMAT RowBinary");
	if (!err)
		err = ch__query(chs(b), sql.buf, &ans, "find a token");
	if (!err) {
		r = rb_reader_of(&ans);
		n = rbr_u64(&r);
		if (r.bad)
			err = -EIO;
	}
	if (!err && !n)
		err = -ENOENT;
	/* The latest version again, revoked (the first revocation's time
	 * kept), one version up. */
	sql.len = 0;
	if (!err)
		err = sbuf__printf(
			&sql,
			"INSERT INTO tokens SELECT id, " LATEST_FIXED
			", if(argMax(revoked_ms, ver) = 0, toInt64(%" PRId64 ")"
			", argMax(revoked_ms, ver)), max(ver) + 1 FROM tokens WHERE id = ",
			when_ms);
	if (!err)
		err = ch_sql_str(&sql, id);
	if (!err)
		err = sbuf__puts(&sql, " GROUP BY id");
	if (!err)
		err = ch__query(chs(b), sql.buf, NULL, "revoke a token");
	sbuf__free(&sql);
	sbuf__free(&ans);
	return err;
}

/* Copies a string of the answer of at most size - 1 bytes; false if
 * longer. */
static bool take_str(struct rb_reader *r, char *out, size_t size)
{
	size_t n;
	const char *p = rbr_str(r, &n);

	if (n >= size)
		return false;
	memcpy(out, p, n);
	out[n] = '\0';
	return true;
}

static int ct_list(struct token_backend *b, token_row_fn fn, void *ctx)
{
	struct sbuf ans = {0};
	struct rb_reader r;
	int err;

	err = ch__query(chs(b), "SELECT id, " LATEST " FROM tokens GROUP BY id FORMAT RowBinary",
			&ans, "read the tokens");
	r = rb_reader_of(&ans);
	while (!err && rbr_more(&r)) {
		struct token_row row = {0};
		bool ok = take_str(&r, row.id, sizeof(row.id)) &&
			  take_str(&r, row.hash, sizeof(row.hash)) &&
			  take_str(&r, row.project, sizeof(row.project));

		row.role = (enum token_role)rbr_u8(&r);
		row.created_ms = (int64_t)rbr_u64(&r);
		row.revoked_ms = (int64_t)rbr_u64(&r);
		if (r.bad) {
			pr_warn("clickhouse: the tokens table's answer is damaged");
			err = -EIO;
			break;
		}
		/* a row another program wrote wrong is no token */
		if (!ok || strlen(row.hash) != TOKEN_HASH_LEN || row.role < TOKEN_INGEST ||
		    row.role > TOKEN_ADMIN)
			continue;
		fn(ctx, &row);
	}
	sbuf__free(&ans);
	return err;
}

static void ct_close(struct token_backend *b)
{
	struct ch_tokens *t = (struct ch_tokens *)b;

	store__close(t->store);
	free(t);
}

struct token_backend *token_backend_clickhouse__open(const char *url)
{
	struct ch_tokens *t;
	struct store *s = store_clickhouse__open(url);

	if (!s)
		return NULL;
	t = xcalloc(1, sizeof(*t));
	t->base = (struct token_backend){ct_put, ct_revoke, ct_list, ct_close};
	t->store = s;
	return &t->base;
}
