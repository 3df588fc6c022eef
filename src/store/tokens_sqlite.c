/* tokens_sqlite.c: the tokens of an embedded store, in DIR/tokens.db -- a
 * database of its own beside the store's sonde.db, which a running server
 * holds locked: `sonde token` writes here while the server reads (WAL, a
 * busy timeout). Only hashes are stored (tokens.h). */
#include "store/tokens.h"

#include <errno.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/xalloc.h"

struct sqlite_tokens {
	struct token_backend base; /* first: the backend is cast back */
	sqlite3 *db;
	char path[PATH_MAX];
};

static int fail(struct sqlite_tokens *t, const char *what)
{
	int rc = sqlite3_errcode(t->db);

	pr_err("auth: can't %s in %s: %s", what, t->path, sqlite3_errmsg(t->db));
	return rc == SQLITE_BUSY || rc == SQLITE_LOCKED ? -EAGAIN
	       : rc == SQLITE_FULL			? -ENOSPC
							: -EIO;
}

static int st_put(struct token_backend *b, const struct token_row *row)
{
	struct sqlite_tokens *t = (struct sqlite_tokens *)b;
	sqlite3_stmt *st = NULL;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(
		t->db,
		"INSERT INTO tokens (id, hash, project, role, created_ms, revoked_ms)"
		" VALUES (?, ?, ?, ?, ?, 0)",
		-1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, row->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, row->hash, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, row->project, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 4, (int)row->role);
		sqlite3_bind_int64(st, 5, row->created_ms);
		rc = sqlite3_step(st);
	}
	if (rc != SQLITE_DONE)
		err = fail(t, "store a token");
	sqlite3_finalize(st);
	return err;
}

static int st_revoke(struct token_backend *b, const char *id, int64_t when_ms)
{
	struct sqlite_tokens *t = (struct sqlite_tokens *)b;
	sqlite3_stmt *st = NULL;
	int rc, err = 0, found = 0;

	rc = sqlite3_prepare_v2(
		t->db,
		"UPDATE tokens SET revoked_ms = CASE WHEN revoked_ms = 0 THEN ? ELSE"
		" revoked_ms END WHERE id = ?",
		-1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, when_ms);
		sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
		found = sqlite3_changes(t->db);
	}
	if (rc != SQLITE_DONE)
		err = fail(t, "revoke a token");
	sqlite3_finalize(st);
	return err ? err : found ? 0 : -ENOENT;
}

/* Copies a text column of at most size - 1 bytes; false if longer. */
static bool column(sqlite3_stmt *st, int i, char *out, size_t size)
{
	const unsigned char *v = sqlite3_column_text(st, i);
	size_t n = v ? (size_t)sqlite3_column_bytes(st, i) : 0;

	if (n >= size)
		return false;
	memcpy(out, v ? (const char *)v : "", n);
	out[n] = '\0';
	return true;
}

static int st_list(struct token_backend *b, token_row_fn fn, void *ctx)
{
	struct sqlite_tokens *t = (struct sqlite_tokens *)b;
	sqlite3_stmt *st = NULL;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(
		t->db, "SELECT id, hash, project, role, created_ms, revoked_ms FROM tokens", -1,
		&st, NULL);
	while (rc == SQLITE_OK || rc == SQLITE_ROW) {
		struct token_row row = {0};

		rc = sqlite3_step(st);
		if (rc != SQLITE_ROW)
			break;
		row.role = (enum token_role)sqlite3_column_int(st, 3);
		row.created_ms = sqlite3_column_int64(st, 4);
		row.revoked_ms = sqlite3_column_int64(st, 5);
		/* a row another program wrote wrong is no token */
		if (!column(st, 0, row.id, sizeof(row.id)) ||
		    !column(st, 1, row.hash, sizeof(row.hash)) ||
		    !column(st, 2, row.project, sizeof(row.project)) ||
		    strlen(row.hash) != TOKEN_HASH_LEN || row.role < TOKEN_INGEST ||
		    row.role > TOKEN_ADMIN) {
			pr_warn("auth: %s has a malformed token row: skipped", t->path);
			continue;
		}
		fn(ctx, &row);
	}
	if (rc != SQLITE_DONE)
		err = fail(t, "read the tokens");
	sqlite3_finalize(st);
	return err;
}

static void st_close(struct token_backend *b)
{
	struct sqlite_tokens *t = (struct sqlite_tokens *)b;

	sqlite3_close(t->db);
	free(t);
}

struct token_backend *token_backend_sqlite__open(const char *dir)
{
	struct sqlite_tokens *t = xcalloc(1, sizeof(*t));
	char *msg = NULL;
	int rc;

	t->base = (struct token_backend){st_put, st_revoke, st_list, st_close};
	if (mkdir(dir, 0700) && errno != EEXIST) {
		pr_err("auth: can't create the directory %s: %s -- check the --data path", dir,
		       strerror(errno));
		free(t);
		return NULL;
	}
	if (snprintf(t->path, sizeof(t->path), "%s/tokens.db", dir) >= (int)sizeof(t->path)) {
		pr_err("auth: the --data path %s is too long", dir);
		free(t);
		errno = ENAMETOOLONG;
		return NULL;
	}
	rc = sqlite3_open_v2(t->path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_busy_timeout(t->db, 5000);
		rc = sqlite3_exec(t->db,
				  "PRAGMA journal_mode = WAL;"
				  "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY,"
				  " hash TEXT NOT NULL UNIQUE, project TEXT NOT NULL,"
				  " role INTEGER NOT NULL, created_ms INTEGER NOT NULL,"
				  " revoked_ms INTEGER NOT NULL DEFAULT 0)",
				  NULL, NULL, &msg);
	}
	if (rc != SQLITE_OK) {
		pr_err("auth: can't open the tokens in %s: %s -- is it a Sonde --data directory?",
		       t->path,
		       msg     ? msg
		       : t->db ? sqlite3_errmsg(t->db)
			       : sqlite3_errstr(rc));
		sqlite3_free(msg);
		sqlite3_close(t->db);
		free(t);
		errno = EIO;
		return NULL;
	}
	chmod(t->path, 0600);
	return &t->base;
}
