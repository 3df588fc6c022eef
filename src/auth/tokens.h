/* tokens.h: projects and tokens -- who may ingest into and read which
 * project of a Sonde store. A token is a random secret ("sonde_" and 43
 * characters) handed out once by `sonde token create`; only its SHA-256 is
 * stored, beside the profiles, by the store (src/store/tokens.h): in
 * DIR/tokens.db next to the embedded store, or in the tokens table of a
 * ClickHouse database. A token has an id (the first 12 hex digits of its
 * hash, for lists and revocation), a project and a role: ingest (write
 * profiles, points and alerts), read (every query, the UI) or admin (both).
 *
 * A server checks each request's "Authorization: Bearer TOKEN" (or Basic
 * with the token as the password, as some Pyroscope clients send it)
 * against the tokens it read last: a token it doesn't know makes it read
 * them again (unless a read began since the request came; 20 reads a
 * second at most), and it reads them every few seconds
 * anyway, so that a token created anywhere works at once and a revoked one
 * stops within TOKENS_REFRESH_MS. Hashes are compared in constant time.
 * Failed attempts are counted by reason, and a client (an address) that
 * fails too often is refused for a while -- every request of it without a
 * valid token, which is still checked (a valid token always passes: the
 * callers behind one coordinator or proxy share its address).
 *
 * Used by `sonde token` (src/cli/token.c) and `sonde server --auth`
 * (src/server/server.c). */
#ifndef SONDE_AUTH_TOKENS_H
#define SONDE_AUTH_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The roles, the stored rows and their backends. */
#include "store/tokens.h"

/* "sonde_" and 43 characters of base64url: 32 random bytes. */
#define TOKEN_LEN 49
/* A known token is read again after this long: a revocation takes effect
 * within it, on every server. */
#define TOKENS_REFRESH_MS 2000
/* A client with this many failed attempts within TOKENS_FAIL_WINDOW_MS is
 * refused for TOKENS_BLOCK_MS (429) unless its token is valid: a request of
 * it with an unknown token causes no read of the tokens meanwhile. */
#define TOKENS_MAX_FAILS 20
#define TOKENS_FAIL_WINDOW_MS 60000
#define TOKENS_BLOCK_MS 30000

struct tokens;

/* The tokens of the store that spec names (a clickhouse:// URL, else the
 * --data directory). NULL with errno set after logging why. */
struct tokens *tokens__open(const char *spec);
/* NULL is a no-op. */
void tokens__close(struct tokens *t);

/* Whether project is a valid project name: 1 to 64 of [A-Za-z0-9_.-]. */
bool token_project_valid(const char *project);
/* "ingest", "read", "admin" <-> the role; 0 for an unknown name. */
enum token_role token_role_parse(const char *name);
const char *token_role_name(enum token_role role);

/* Makes and stores a new token: the token into token (TOKEN_LEN + 1
 * bytes), its id into id (TOKEN_ID_LEN + 1). -EINVAL for a bad project or
 * role. */
int tokens__create(struct tokens *t, const char *project, enum token_role role, char *token,
		   char *id);
/* Every stored token, revoked ones too, by creation time. */
int tokens__list(struct tokens *t, token_row_fn fn, void *ctx);
/* -ENOENT: no such id; 0 also when it was revoked already. */
int tokens__revoke(struct tokens *t, const char *id);

/* The outcome of a request's check. */
enum token_verdict {
	TOKEN_OK,
	TOKEN_MISSING,	   /* no Authorization header, or not Bearer/Basic */
	TOKEN_UNKNOWN,	   /* no such token */
	TOKEN_REVOKED,	   /* a revoked token */
	TOKEN_FORBIDDEN,   /* a good token without the role */
	TOKEN_LIMITED,	   /* the client failed too often, and this token isn't valid */
	TOKEN_UNAVAILABLE, /* the tokens can't be read (the store away) */
	TOKEN_NVERDICTS
};

/* Who a request is: its token's project and role. */
struct principal {
	char project[TOKEN_MAX_PROJECT + 1];
	enum token_role role;
	char id[TOKEN_ID_LEN + 1];
};

/* Checks a request's Authorization header (NULL: none) for a role that
 * covers need, client naming who asks (its address) for the limit on
 * failures. Fills *who on TOKEN_OK. Thread-safe. */
enum token_verdict tokens__check(struct tokens *t, const char *authorization, const char *client,
				 enum token_role need, struct principal *who);
/* Checks counted so far, by verdict. */
void tokens__counts(struct tokens *t, uint64_t counts[TOKEN_NVERDICTS]);
/* The name of a verdict for metrics and messages ("unknown"). */
const char *token_verdict_name(enum token_verdict v);

/* The token of an Authorization header value ("Bearer T", or "Basic"
 * base64 of "USER:T"), into out (size bytes); false when there is none or
 * it can't be a token. Outside data: bounded, never trusts a length. */
bool token_from_header(const char *authorization, char *out, size_t size);

#endif
