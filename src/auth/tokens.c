/* tokens.c: the tokens of tokens.h -- making them, hashing them, and the
 * server's check of a request against the tokens it has read from the
 * store's backend (src/store/tokens.h: tokens_sqlite.c or
 * clickhouse_tokens.c), with the limit on a client's failed attempts. */
#include "auth/tokens.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/xalloc.h"

/* Reads of the tokens that tokens not known may cause, at most, a second
 * (a flood of made-up tokens from many addresses). */
#define MAX_RELOADS_PER_S 20
/* Clients whose failures are remembered. */
#define MAX_CLIENTS 4096

struct client_slot {
	uint64_t key; /* 0: empty */
	int fails;
	int64_t window_ms, blocked_until_ms;
};

struct tokens {
	struct token_backend *b;
	pthread_mutex_t reload_lock; /* one reload at a time */
	pthread_rwlock_t lock;	     /* rows, loaded_ms */
	struct token_row *rows;	     /* by hash */
	size_t nrows;
	int64_t loaded_ms; /* when the last read began; 0: never */
	int64_t burst_ms;  /* this second of reads, and how many */
	int burst_n;
	pthread_mutex_t clients_lock;
	struct client_slot clients[MAX_CLIENTS];
	uint64_t counts[TOKEN_NVERDICTS];
};

static const char *const role_names[] = {
	[TOKEN_INGEST] = "ingest", [TOKEN_READ] = "read", [TOKEN_ADMIN] = "admin"};

static const char *const verdict_names[TOKEN_NVERDICTS] = {
	[TOKEN_OK] = "ok",
	[TOKEN_MISSING] = "missing",
	[TOKEN_UNKNOWN] = "unknown",
	[TOKEN_REVOKED] = "revoked",
	[TOKEN_FORBIDDEN] = "forbidden",
	[TOKEN_LIMITED] = "rate_limited",
	[TOKEN_UNAVAILABLE] = "unavailable",
};

bool token_project_valid(const char *p)
{
	size_t i;

	if (!p || !*p || strlen(p) > TOKEN_MAX_PROJECT)
		return false;
	for (i = 0; p[i]; i++)
		if (!isalnum((unsigned char)p[i]) && !strchr("_.-", p[i]))
			return false;
	return true;
}

enum token_role token_role_parse(const char *name)
{
	int r;

	for (r = TOKEN_INGEST; r <= TOKEN_ADMIN; r++)
		if (name && !strcmp(name, role_names[r]))
			return (enum token_role)r;
	return 0;
}

const char *token_role_name(enum token_role role)
{
	return role >= TOKEN_INGEST && role <= TOKEN_ADMIN ? role_names[role] : "?";
}

const char *token_verdict_name(enum token_verdict v)
{
	return v < TOKEN_NVERDICTS ? verdict_names[v] : "?";
}

/* ---- tokens and their hashes ---- */

static void hex(const unsigned char *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

/* SHA-256 of token as hex into out (TOKEN_HASH_LEN + 1). */
static int hash_token(const char *token, char *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!EVP_Digest(token, strlen(token), md, &n, EVP_sha256(), NULL) || n != 32)
		return -EIO;
	hex(md, n, out);
	return 0;
}

/* 32 random bytes as "sonde_" and unpadded base64url. */
static int new_token(char *out)
{
	unsigned char raw[32], b64[64];
	size_t i;
	int n;

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -errno ? -errno : -EIO;
	n = EVP_EncodeBlock(b64, raw, sizeof(raw));
	OPENSSL_cleanse(raw, sizeof(raw));
	while (n > 0 && b64[n - 1] == '=')
		n--;
	if (n != TOKEN_LEN - 6)
		return -EIO;
	memcpy(out, "sonde_", 6);
	for (i = 0; i < (size_t)n; i++)
		out[6 + i] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : (char)b64[i];
	out[TOKEN_LEN] = '\0';
	OPENSSL_cleanse(b64, sizeof(b64));
	return 0;
}

/* A token's characters: what new_token() makes, and what other clients'
 * tokens are made of (base64, hex, JWT-like dots). */
static bool token_chars(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("-_.~+/=", s[i]))
			return false;
	return n > 0;
}

bool token_from_header(const char *h, char *out, size_t size)
{
	size_t n;

	if (!h || !size)
		return false;
	while (*h == ' ' || *h == '\t')
		h++;
	if (!strncasecmp(h, "Bearer ", 7)) {
		h += 7;
		while (*h == ' ')
			h++;
		n = strcspn(h, " \t");
		if (n >= size || !token_chars(h, n) || h[n + strspn(h + n, " \t")])
			return false;
		memcpy(out, h, n);
		out[n] = '\0';
		return true;
	}
	if (!strncasecmp(h, "Basic ", 6)) {
		unsigned char dec[256];
		const char *colon;
		int m;

		h += 6;
		while (*h == ' ')
			h++;
		n = strcspn(h, " \t");
		/* base64 of at most sizeof(dec) bytes, in whole quads */
		if (!n || n % 4 || n / 4 * 3 > sizeof(dec) - 1 || !token_chars(h, n))
			return false;
		m = EVP_DecodeBlock(dec, (const unsigned char *)h, (int)n);
		if (m < 0)
			return false;
		/* EVP_DecodeBlock counts the padding's bytes too */
		if (n >= 1 && h[n - 1] == '=')
			m--;
		if (n >= 2 && h[n - 2] == '=')
			m--;
		dec[m] = '\0';
		colon = memchr(dec, ':', (size_t)m);
		if (!colon || memchr(dec, '\0', (size_t)m))
			return false;
		colon++;
		n = (size_t)m - (size_t)(colon - (const char *)dec);
		if (n >= size || !token_chars(colon, n))
			return false;
		memcpy(out, colon, n);
		out[n] = '\0';
		OPENSSL_cleanse(dec, sizeof(dec));
		return true;
	}
	return false;
}

/* ---- opening, making, listing, revoking ---- */

struct tokens *tokens__open(const char *spec)
{
	struct tokens *t;
	struct token_backend *b;

	if (!spec) {
		errno = EINVAL;
		return NULL;
	}
	b = strncmp(spec, "clickhouse://", 13) ? token_backend_sqlite__open(spec)
					       : token_backend_clickhouse__open(spec);
	if (!b)
		return NULL;
	t = xcalloc(1, sizeof(*t));
	t->b = b;
	pthread_mutex_init(&t->reload_lock, NULL);
	pthread_rwlock_init(&t->lock, NULL);
	pthread_mutex_init(&t->clients_lock, NULL);
	return t;
}

void tokens__close(struct tokens *t)
{
	if (!t)
		return;
	t->b->close(t->b);
	free(t->rows);
	pthread_mutex_destroy(&t->reload_lock);
	pthread_rwlock_destroy(&t->lock);
	pthread_mutex_destroy(&t->clients_lock);
	free(t);
}

int tokens__create(struct tokens *t, const char *project, enum token_role role, char *token,
		   char *id)
{
	struct token_row row = {.role = role, .created_ms = (int64_t)wall_ms()};
	int err;

	if (!token_project_valid(project) || role < TOKEN_INGEST || role > TOKEN_ADMIN)
		return -EINVAL;
	err = new_token(token);
	if (!err)
		err = hash_token(token, row.hash);
	if (err)
		return err;
	memcpy(row.id, row.hash, TOKEN_ID_LEN);
	row.id[TOKEN_ID_LEN] = '\0';
	snprintf(row.project, sizeof(row.project), "%s", project);
	err = t->b->put(t->b, &row);
	if (err) {
		OPENSSL_cleanse(token, TOKEN_LEN + 1);
		return err;
	}
	memcpy(id, row.id, TOKEN_ID_LEN + 1);
	return 0;
}

struct collect {
	struct token_row *rows;
	size_t n, cap;
	int err;
};

static void collect_row(void *ctx, const struct token_row *row)
{
	struct collect *c = ctx;

	if (c->err)
		return;
	c->err = array_grow((void **)&c->rows, &c->cap, c->n + 1, sizeof(*c->rows));
	if (!c->err)
		c->rows[c->n++] = *row;
}

static int cmp_created(const void *a, const void *b)
{
	const struct token_row *x = a, *y = b;

	if (x->created_ms != y->created_ms)
		return x->created_ms < y->created_ms ? -1 : 1;
	return strcmp(x->id, y->id);
}

static int cmp_hash(const void *a, const void *b)
{
	return strcmp(((const struct token_row *)a)->hash, ((const struct token_row *)b)->hash);
}

int tokens__list(struct tokens *t, token_row_fn fn, void *ctx)
{
	struct collect c = {0};
	size_t i;
	int err;

	err = t->b->list(t->b, collect_row, &c);
	if (!err)
		err = c.err;
	if (!err && c.n)
		qsort(c.rows, c.n, sizeof(*c.rows), cmp_created);
	for (i = 0; !err && i < c.n; i++)
		fn(ctx, &c.rows[i]);
	free(c.rows);
	return err;
}

int tokens__revoke(struct tokens *t, const char *id)
{
	size_t i, n = id ? strlen(id) : 0;

	if (n != TOKEN_ID_LEN)
		return -ENOENT;
	for (i = 0; i < n; i++)
		if (!isxdigit((unsigned char)id[i]) || isupper((unsigned char)id[i]))
			return -ENOENT;
	return t->b->revoke(t->b, id, (int64_t)wall_ms());
}

/* ---- checking requests ---- */

/* Reads the tokens again; under reload_lock. */
static int reload(struct tokens *t)
{
	int64_t began = (int64_t)mono_ms();
	struct collect c = {0};
	struct token_row *old;
	int err;

	if (began - t->burst_ms >= 1000) {
		t->burst_ms = began;
		t->burst_n = 0;
	}
	t->burst_n++;
	err = t->b->list(t->b, collect_row, &c);
	if (!err)
		err = c.err;
	if (err) {
		free(c.rows);
		return err;
	}
	if (c.n)
		qsort(c.rows, c.n, sizeof(*c.rows), cmp_hash);
	pthread_rwlock_wrlock(&t->lock);
	old = t->rows;
	t->rows = c.rows;
	t->nrows = c.n;
	t->loaded_ms = began ? began : 1;
	pthread_rwlock_unlock(&t->lock);
	free(old);
	return 0;
}

/* The row of hash into *out; under t->lock. The search compares hashes
 * of tokens, never tokens; the match is confirmed in constant time. */
static bool find(const struct tokens *t, const char *hash, struct token_row *out)
{
	struct token_row key;
	const struct token_row *r;

	memcpy(key.hash, hash, sizeof(key.hash));
	r = t->nrows ? bsearch(&key, t->rows, t->nrows, sizeof(*t->rows), cmp_hash) : NULL;
	if (!r || CRYPTO_memcmp(r->hash, hash, TOKEN_HASH_LEN))
		return false;
	*out = *r;
	return true;
}

static struct client_slot *client_slot(struct tokens *t, const char *client, bool add)
{
	uint64_t key =
		hash_bytes(client ? client : "", client ? strlen(client) : 0, 0x41555448) | 1;
	struct client_slot *oldest = NULL;
	size_t i, k = key % MAX_CLIENTS;

	/* a short probe; past it the oldest entry of the probe is reused */
	for (i = 0; i < 16; i++) {
		struct client_slot *c = &t->clients[(k + i) % MAX_CLIENTS];

		if (c->key == key)
			return c;
		if (!c->key || !oldest || c->window_ms < oldest->window_ms)
			oldest = c;
		if (!c->key)
			break;
	}
	if (!add)
		return NULL;
	memset(oldest, 0, sizeof(*oldest));
	oldest->key = key;
	return oldest;
}

static bool client_blocked(struct tokens *t, const char *client, int64_t now)
{
	struct client_slot *c;
	bool blocked;

	pthread_mutex_lock(&t->clients_lock);
	c = client_slot(t, client, false);
	blocked = c && c->blocked_until_ms > now;
	pthread_mutex_unlock(&t->clients_lock);
	return blocked;
}

static void client_failed(struct tokens *t, const char *client, int64_t now)
{
	struct client_slot *c;

	pthread_mutex_lock(&t->clients_lock);
	c = client_slot(t, client, true);
	if (now - c->window_ms > TOKENS_FAIL_WINDOW_MS) {
		c->window_ms = now;
		c->fails = 0;
	}
	if (++c->fails >= TOKENS_MAX_FAILS) {
		c->blocked_until_ms = now + TOKENS_BLOCK_MS;
		c->fails = 0;
		c->window_ms = now;
		pr_warn("auth: %s failed %d times within %d s: refused for %d s", client,
			TOKENS_MAX_FAILS, TOKENS_FAIL_WINDOW_MS / MS_PER_SEC,
			TOKENS_BLOCK_MS / MS_PER_SEC);
	}
	pthread_mutex_unlock(&t->clients_lock);
}

static enum token_verdict counted(struct tokens *t, enum token_verdict v)
{
	__atomic_fetch_add(&t->counts[v], 1, __ATOMIC_RELAXED);
	return v;
}

enum token_verdict tokens__check(struct tokens *t, const char *authorization, const char *client,
				 enum token_role need, struct principal *who)
{
	int64_t now = (int64_t)mono_ms(), loaded;
	char token[256], hash[TOKEN_HASH_LEN + 1];
	struct token_row row;
	bool found, blocked = client_blocked(t, client, now);

	/* A blocked client's requests are still checked, cheaply (a hash and
	 * a search of the tokens read): a valid token always passes, so that
	 * others' failures from the same address -- every caller of a
	 * coordinator or a proxy shares its address -- never lock it out. What
	 * a blocked client loses is the read of the tokens that an unknown
	 * token causes, and the answer's telling unknown from missing. */
	if (!token_from_header(authorization, token, sizeof(token)) || hash_token(token, hash)) {
		if (blocked)
			return counted(t, TOKEN_LIMITED);
		client_failed(t, client, now);
		return counted(t, TOKEN_MISSING);
	}
	OPENSSL_cleanse(token, sizeof(token));
	pthread_rwlock_rdlock(&t->lock);
	found = find(t, hash, &row);
	loaded = t->loaded_ms;
	pthread_rwlock_unlock(&t->lock);
	/* Read the tokens again when they are old, or for a token not known
	 * unless a read began since this request did (a token made a moment
	 * ago works at once) or the client is blocked. */
	if (!loaded || now - loaded >= TOKENS_REFRESH_MS || (!found && !blocked && loaded <= now)) {
		pthread_mutex_lock(&t->reload_lock);
		pthread_rwlock_rdlock(&t->lock);
		loaded = t->loaded_ms;
		pthread_rwlock_unlock(&t->lock);
		if (!loaded || now - loaded >= TOKENS_REFRESH_MS ||
		    (!blocked && loaded <= now &&
		     (now - t->burst_ms >= 1000 || t->burst_n < MAX_RELOADS_PER_S))) {
			int err = reload(t);

			if (err)
				pr_warn("auth: can't read the tokens: %s%s", strerror(-err),
					loaded ? " -- going on with those read before" : "");
		}
		pthread_mutex_unlock(&t->reload_lock);
		pthread_rwlock_rdlock(&t->lock);
		found = find(t, hash, &row);
		loaded = t->loaded_ms;
		pthread_rwlock_unlock(&t->lock);
		if (!loaded)
			return counted(t, TOKEN_UNAVAILABLE);
	}
	if (!found || row.revoked_ms) {
		if (blocked)
			return counted(t, TOKEN_LIMITED);
		client_failed(t, client, now);
		return counted(t, found ? TOKEN_REVOKED : TOKEN_UNKNOWN);
	}
	if ((row.role & need) != need)
		return counted(t, TOKEN_FORBIDDEN);
	memcpy(who->project, row.project, sizeof(who->project));
	memcpy(who->id, row.id, sizeof(who->id));
	who->role = row.role;
	return counted(t, TOKEN_OK);
}

void tokens__counts(struct tokens *t, uint64_t counts[TOKEN_NVERDICTS])
{
	int i;

	for (i = 0; i < TOKEN_NVERDICTS; i++)
		counts[i] = __atomic_load_n(&t->counts[i], __ATOMIC_RELAXED);
}
