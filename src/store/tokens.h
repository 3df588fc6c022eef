/* tokens.h: where the tokens of a Sonde store are kept -- the rows of
 * src/auth/tokens.h's projects and tokens, never a token itself, only its
 * SHA-256: in DIR/tokens.db beside the embedded store (tokens_sqlite.c: a
 * file of its own, so that the CLI can write it while a server holds the
 * store), or in the tokens table of a ClickHouse database
 * (clickhouse_tokens.c), so that every server on that database knows every
 * token. The store keeps the rows; making tokens, hashing them and checking
 * requests is src/auth/'s, the only user of this header. */
#ifndef SONDE_STORE_TOKENS_H
#define SONDE_STORE_TOKENS_H

#include <stdint.h>

enum token_role { TOKEN_INGEST = 1, TOKEN_READ = 2, TOKEN_ADMIN = 3 };

#define TOKEN_MAX_PROJECT 64
#define TOKEN_ID_LEN 12
#define TOKEN_HASH_LEN 64

/* A stored token: never the token itself. */
struct token_row {
	char id[TOKEN_ID_LEN + 1];
	char hash[TOKEN_HASH_LEN + 1]; /* SHA-256, lowercase hex */
	char project[TOKEN_MAX_PROJECT + 1];
	enum token_role role;
	int64_t created_ms, revoked_ms; /* revoked_ms 0: in force */
};

typedef void (*token_row_fn)(void *ctx, const struct token_row *row);

/* Where tokens are kept: the SQLite file or the ClickHouse table. Each
 * call returns 0 or a negative errno (-EAGAIN: the store is away). */
struct token_backend {
	int (*put)(struct token_backend *b, const struct token_row *row);
	/* -ENOENT: no token of that id. */
	int (*revoke)(struct token_backend *b, const char *id, int64_t when_ms);
	int (*list)(struct token_backend *b, token_row_fn fn, void *ctx);
	void (*close)(struct token_backend *b);
};

/* The backends: DIR/tokens.db (the directory is made if missing), and a
 * ClickHouse database's tokens table. NULL with errno set after logging
 * why. */
struct token_backend *token_backend_sqlite__open(const char *dir);
struct token_backend *token_backend_clickhouse__open(const char *url);

#endif
