/* clickhouse_http.c: how the ClickHouse store talks to its server -- POSTs
 * over ClickHouse's HTTP interface with libcurl (connections kept and reused
 * from a pool, so that a query costs no TCP handshake), errors turned into
 * errnos (-EAGAIN for a server away or overloaded: the caller answers 503
 * and is asked again later). The transport alone: what is sent and how an
 * answer is read are clickhouse_rowbinary.c's, and the fuzz target of the
 * store's answers (tests/fuzz/fuzz_clickhouse.c) puts its own transport
 * in this file's place. */
#include "store/clickhouse_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

/* A query may take long (a day of a fleet); a server that doesn't answer a
 * connection in this time is away. */
#define CONNECT_TIMEOUT_MS 3000L
#define QUERY_TIMEOUT_MS 120000L

struct ch_conn {
	struct ch_conn *next;
	CURL *curl;
};

static struct ch_conn *conn_take(struct ch_store *s)
{
	struct ch_conn *c;

	pthread_mutex_lock(&s->conn_lock);
	c = s->idle;
	if (c)
		s->idle = c->next;
	pthread_mutex_unlock(&s->conn_lock);
	if (c)
		return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->curl = curl_easy_init();
	if (!c->curl) {
		free(c);
		return NULL;
	}
	return c;
}

static void conn_give(struct ch_store *s, struct ch_conn *c)
{
	pthread_mutex_lock(&s->conn_lock);
	c->next = s->idle;
	s->idle = c;
	pthread_mutex_unlock(&s->conn_lock);
}

void ch__close_conns(struct ch_store *s)
{
	struct ch_conn *c, *next;

	pthread_mutex_lock(&s->conn_lock);
	for (c = s->idle; c; c = next) {
		next = c->next;
		curl_easy_cleanup(c->curl);
		free(c);
	}
	s->idle = NULL;
	pthread_mutex_unlock(&s->conn_lock);
}

struct answer {
	struct sbuf *out;
	bool over; /* past CH_MAX_ANSWER */
};

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
	struct answer *a = ctx;
	size_t len = size * n;

	if (!a->out)
		return len;
	if (a->out->len + len > CH_MAX_ANSWER) {
		a->over = true;
		return 0;
	}
	return sbuf__add(a->out, p, len) ? 0 : len;
}

/* The first line of a ClickHouse error ("Code: 60, e.displayText() =
 * DB::Exception: Table sonde.x doesn't exist"), at most 300 bytes, for the
 * log. */
static void error_line(const struct sbuf *b, char *msg, size_t size)
{
	size_t n = 0, i;

	for (i = 0; i < b->len && n + 1 < size && n < 300; i++) {
		char c = b->buf[i];

		if (c == '\n')
			break;
		msg[n++] = c >= 0x20 && c < 0x7f ? c : '?';
	}
	msg[n] = '\0';
}

/* ClickHouse's error codes that mean "later": too many queries or parts at
 * once, a timeout, memory short. */
static int errno_of_code(long code)
{
	switch (code) {
	case 159: /* TIMEOUT_EXCEEDED */
	case 202: /* TOO_MANY_SIMULTANEOUS_QUERIES */
	case 252: /* TOO_MANY_PARTS */
	case 209: /* SOCKET_TIMEOUT */
	case 210: /* NETWORK_ERROR */
		return -EAGAIN;
	case 241: /* MEMORY_LIMIT_EXCEEDED */
		return -ENOMEM;
	default:
		return -EIO;
	}
}

int ch__post(struct ch_store *s, const char *url, const void *body, size_t len, struct sbuf *out,
	     const char *what)
{
	struct sbuf errbuf = {0};
	struct answer a = {.out = out ? out : &errbuf};
	struct ch_conn *c = conn_take(s);
	struct curl_slist *hdr = NULL;
	char msg[320];
	long status = 0;
	CURLcode rc;
	int err = 0;

	if (!c)
		return -ENOMEM;
	if (out)
		out->len = 0;
	curl_easy_reset(c->curl);
	hdr = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	curl_easy_setopt(c->curl, CURLOPT_URL, url);
	curl_easy_setopt(c->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, body ? body : "");
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, QUERY_TIMEOUT_MS);
	curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->curl, CURLOPT_ACCEPT_ENCODING, "");
	if (s->url.user) {
		curl_easy_setopt(c->curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(c->curl, CURLOPT_USERNAME, s->url.user);
		curl_easy_setopt(c->curl, CURLOPT_PASSWORD, s->url.password ? s->url.password : "");
	}
	rc = curl_easy_perform(c->curl);
	curl_slist_free_all(hdr);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	if (a.over) {
		pr_warn("clickhouse: can't %s: the answer is larger than %u MiB", what,
			CH_MAX_ANSWER >> 20);
		err = -EIO;
	} else if (rc != CURLE_OK) {
		/* ClickHouse away fails every request of a stream of ingests:
		 * said every 10 s with the count of the others. */
		static struct log_limit away;
		unsigned long long skipped = 0;

		if (log_limit__take(&away, 10000, &skipped))
			pr_warn("clickhouse: can't %s: %s (%s; %llu more calls failed since the "
				"last such line)",
				what, curl_easy_strerror(rc), s->url.base, skipped);
		err = rc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EAGAIN;
	} else if (status != 200) {
		long code = 0;

		error_line(a.out, msg, sizeof(msg));
		sscanf(msg, "Code: %ld", &code);
		pr_warn("clickhouse: can't %s: HTTP %ld: %s", what, status, msg);
		err = status == 503 ? -EAGAIN : errno_of_code(code);
	}
	if (!err) {
		double t = 0;

		curl_easy_getinfo(c->curl, CURLINFO_TOTAL_TIME, &t);
		pr_debug("clickhouse: %s: %.1f ms, %zu bytes sent, %zu received", what,
			 t * MS_PER_SEC, len, out ? out->len : 0);
	}
	sbuf__free(&errbuf);
	if (err == -EAGAIN || a.over) {
		/* The connection may be half-used: don't keep it. */
		curl_easy_cleanup(c->curl);
		free(c);
	} else {
		conn_give(s, c);
	}
	return err;
}

char *ch__url(const struct ch_url *u, const char *sql)
{
	struct sbuf b = {0};
	char *esc = NULL;
	int err;

	/* The settings a read may need: a long list of series ids (a fleet's
	 * every series over a day: 100 nodes hold some 40 000) is a long
	 * query of many elements, past ClickHouse's defaults (256 KiB, 50 000
	 * elements). */
	err = sbuf__printf(&b,
			   "%s?database=%s&max_query_size=67108864&max_ast_elements=4000000"
			   "&max_expanded_ast_elements=4000000",
			   u->base, u->database);
	if (!err && sql) {
		esc = curl_easy_escape(NULL, sql, 0);
		err = esc ? sbuf__printf(&b, "&query=%s", esc) : -ENOMEM;
		curl_free(esc);
	}
	if (err) {
		sbuf__free(&b);
		return NULL;
	}
	return sbuf__steal(&b, NULL);
}
