/* fanout.c: one GET to every site of a request at once (coord_internal.h)
 * -- a libcurl multi handle with one easy handle per site, each bounded by
 * the coordinator's timeout and by the size of answer it accepts, every
 * answer handed to the caller as soon as it is complete so that merging
 * overlaps with waiting for the slower sites; https:// sites verified with
 * the config's TLS files, which also give the client certificate for their
 * mutual TLS (net/tls.h). Also the request's record of the sites that
 * failed, and each site's statistics for /metrics. */
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/sbuf.h"
#include "common/xalloc.h"
#include "coord/coord_internal.h"
#include "net/tls.h"

static const double bucket_bounds[COORD_NBUCKETS - 1] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

int coord_req__init(struct coord_req *r, struct coord *c, struct coord_call *call, const char *by)
{
	size_t n = c->cfg->n;

	memset(r, 0, sizeof(*r));
	r->base.ops = &coord_remote_ops;
	r->c = c;
	r->call = call;
	r->by = by;
	r->failed = calloc(n ? n : 1, sizeof(*r->failed));
	r->timed_out = calloc(n ? n : 1, sizeof(*r->timed_out));
	r->refused = calloc(n ? n : 1, sizeof(*r->refused));
	r->why = calloc(n ? n : 1, sizeof(*r->why));
	if (call->auth) {
		char *h = NULL;

		if (asprintf(&h, "Authorization: %s", call->auth) >= 0) {
			r->headers = curl_slist_append(NULL, h);
			free(h);
		}
		if (!r->headers) {
			coord_req__free(r);
			return -ENOMEM;
		}
	}
	if (!r->failed || !r->timed_out || !r->refused || !r->why) {
		coord_req__free(r);
		return -ENOMEM;
	}
	return 0;
}

void coord_req__free(struct coord_req *r)
{
	if (r->why)
		for (size_t i = 0; i < r->c->cfg->n; i++)
			free(r->why[i]);
	free(r->why);
	free(r->failed);
	free(r->timed_out);
	free(r->refused);
	curl_slist_free_all(r->headers);
	memset(r, 0, sizeof(*r));
}

void coord_req__fail(struct coord_req *r, size_t i, enum site_fail kind, const char *fmt, ...)
{
	va_list ap;
	char *why = NULL;

	if (r->failed[i])
		return;
	va_start(ap, fmt);
	if (vasprintf(&why, fmt, ap) < 0)
		why = NULL;
	va_end(ap);
	r->failed[i] = true;
	r->timed_out[i] = kind == SITE_FAIL_TIMEOUT;
	r->why[i] = why;
	r->nfailed++;
	pthread_mutex_lock(&r->c->lock);
	r->c->sites[i].failures[kind]++;
	pthread_mutex_unlock(&r->c->lock);
	pr_debug("coordinator: %s failed: %s", r->c->cfg->sites[i].url, why ? why : "?");
}

/* One site's transfer. */
struct xfer {
	struct coord_req *r;
	size_t site;
	CURL *easy;
	struct sbuf body;
	CURLcode rc;
	bool too_large, done;
	unsigned retry_after_s; /* the answer's Retry-After (seconds), 0: none */
	char err[CURL_ERROR_SIZE];
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct xfer *x = ctx;
	size_t n = size * nmemb;

	/* A short count makes curl fail the transfer (CURLE_WRITE_ERROR). */
	if (x->body.len + n > x->r->c->max_answer) {
		x->too_large = true;
		return 0;
	}
	return sbuf__add(&x->body, data, n) ? 0 : n;
}

/* Keeps a Retry-After of delay-seconds (a date is taken as none). */
static size_t on_header(char *data, size_t size, size_t nmemb, void *ctx)
{
	static const char name[] = "retry-after:";
	struct xfer *x = ctx;
	size_t n = size * nmemb, i = sizeof(name) - 1;
	unsigned long v = 0;

	if (n <= i || strncasecmp(data, name, i))
		return n;
	while (i < n && (data[i] == ' ' || data[i] == '\t'))
		i++;
	for (; i < n && data[i] >= '0' && data[i] <= '9' && v < 86400; i++)
		v = v * 10 + (unsigned long)(data[i] - '0');
	x->retry_after_s = v > 86400 ? 86400 : (unsigned)v;
	return n;
}

static void observe_latency(struct coord *c, size_t site, double secs)
{
	int b;

	for (b = 0; b < COORD_NBUCKETS - 1 && secs > bucket_bounds[b]; b++)
		;
	pthread_mutex_lock(&c->lock);
	c->sites[site].requests++;
	c->sites[site].buckets[b]++;
	c->sites[site].sum += secs;
	pthread_mutex_unlock(&c->lock);
}

/* The error of a non-200 answer: its {"error": ...} if it has one. */
static void http_error(struct xfer *x, long status)
{
	const char *msg = x->body.buf ? x->body.buf : "";
	const char *e = strstr(msg, "\"error\":\"");
	int len = 200;

	if (e) {
		msg = e + 9;
		e = strchr(msg, '"');
		if (e && e - msg < len)
			len = (int)(e - msg);
	}
	if (!x->r->failed[x->site]) {
		x->r->n401 += status == 401;
		x->r->refused[x->site] = status == 401 || status == 429;
		x->r->n429 += status == 429;
		if (status == 429 && x->retry_after_s > x->r->retry_after_s)
			x->r->retry_after_s = x->retry_after_s;
	}
	coord_req__fail(x->r, x->site, SITE_FAIL_HTTP, "HTTP %ld: %.*s", status, len, msg);
}

/* A transfer curl says is done: the site's answer, or why it has none. */
static int xfer__done(struct xfer *x, coord_answer_fn fn, void *ctx)
{
	const struct coord_site *site = &x->r->c->cfg->sites[x->site];
	CURLcode rc = x->rc;
	long status = 0;
	char why[512] = "";
	int err;

	if (rc == CURLE_OPERATION_TIMEDOUT) {
		coord_req__fail(x->r, x->site, SITE_FAIL_TIMEOUT,
				"no answer within %llu ms (--timeout)",
				(unsigned long long)x->r->c->timeout_ms);
		return 0;
	}
	if (x->too_large) {
		coord_req__fail(x->r, x->site, SITE_FAIL_TOO_LARGE,
				"answer over %llu bytes: ask for less (a shorter range, a "
				"narrower query)",
				(unsigned long long)x->r->c->max_answer);
		return 0;
	}
	if (rc != CURLE_OK) {
		coord_req__fail(x->r, x->site, SITE_FAIL_CONNECT, "%s%s",
				x->err[0] ? x->err : curl_easy_strerror(rc), tls_curl_hint(rc));
		return 0;
	}
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		http_error(x, status);
		return 0;
	}
	if (sbuf__add(&x->body, "", 0))
		return -ENOMEM;
	err = fn(ctx, x->site, x->body.buf ? x->body.buf : "", x->body.len, why, sizeof(why));
	if (err == -EINVAL)
		coord_req__fail(x->r, x->site, SITE_FAIL_BAD_ANSWER, "bad answer from %s: %s",
				site->url, why);
	sbuf__free(&x->body);
	return err == -EINVAL ? 0 : err;
}

int coord_req__fan(struct coord_req *r, const char *target, coord_answer_fn fn, void *ctx)
{
	const struct coord_config *cfg = r->c->cfg;
	struct xfer *xs = calloc(cfg->n ? cfg->n : 1, sizeof(*xs));
	CURLM *m = curl_multi_init();
	int running = 0, err = 0;
	size_t i, next = 0;
	curl_off_t us;

	if (!xs || !m) {
		err = -ENOMEM;
		goto cleanup;
	}
	r->fanouts++;
	for (i = 0; i < cfg->n; i++) {
		struct xfer *x = &xs[i];
		char *url = NULL;

		x->r = r;
		x->site = i;
		if (r->failed[i])
			continue;
		x->easy = curl_easy_init();
		if (!x->easy || asprintf(&url, "%s%s", cfg->sites[i].url, target) < 0) {
			err = -ENOMEM;
			goto cleanup;
		}
		curl_easy_setopt(x->easy, CURLOPT_URL, url);
		free(url);
		curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
		curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)r->c->timeout_ms);
		curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(x->easy, CURLOPT_USERAGENT, "sonde-coordinator");
		curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->err);
		curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
		curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, x);
		if (r->headers)
			curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, r->headers);
		if (tls_client__curl(cfg->tls, x->easy) ||
		    curl_multi_add_handle(m, x->easy) != CURLM_OK) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	do {
		CURLMsg *msg;
		int left;

		if (curl_multi_perform(m, &running) != CURLM_OK) {
			err = -ENOMEM;
			break;
		}
		while (!err && (msg = curl_multi_info_read(m, &left))) {
			struct xfer *x = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			curl_easy_getinfo(x->easy, CURLINFO_TOTAL_TIME_T, &us);
			observe_latency(r->c, x->site, (double)us / US_PER_SEC);
			x->rc = msg->data.result;
			x->done = true;
		}
		/* Answers are taken in the sites' order, each as soon as those
		 * before it are in: what the caller merges (the first module
		 * or source file known of a name, the order of points of one
		 * time) never depends on which site was quicker. */
		while (!err && next < cfg->n && (!xs[next].easy || xs[next].done)) {
			if (xs[next].easy)
				err = xfer__done(&xs[next], fn, ctx);
			next++;
		}
		if (!err && running && curl_multi_poll(m, NULL, 0, 1000, NULL) != CURLM_OK)
			err = -ENOMEM;
	} while (!err && (running || next < cfg->n));
cleanup:
	for (i = 0; xs && i < cfg->n; i++) {
		if (xs[i].easy) {
			curl_multi_remove_handle(m, xs[i].easy);
			curl_easy_cleanup(xs[i].easy);
		}
		sbuf__free(&xs[i].body);
	}
	if (m)
		curl_multi_cleanup(m);
	free(xs);
	return err;
}

/* ---- the selection as query arguments ---- */

static const char *const ops[] = {"=", "!=", "=~", "!~"};

/* The selector of q's matchers, in double quotes with the escapes the
 * server's parser reads. */
static int selector_text(struct sbuf *b, const struct store_query *q)
{
	int err = sbuf__puts(b, "{");

	for (size_t i = 0; i < q->nmatchers && !err; i++) {
		const struct store_matcher *mt = &q->matchers[i];

		err |= sbuf__printf(b, "%s%s%s\"", i ? "," : "", mt->name, ops[mt->op & 3]);
		for (const char *s = mt->value; *s && !err; s++) {
			switch (*s) {
			case '"':
			case '\\':
				err |= sbuf__printf(b, "\\%c", *s);
				break;
			case '\n':
				err |= sbuf__puts(b, "\\n");
				break;
			case '\t':
				err |= sbuf__puts(b, "\\t");
				break;
			case '\r':
				err |= sbuf__puts(b, "\\r");
				break;
			default:
				err |= sbuf__add(b, s, 1);
			}
		}
		err |= sbuf__puts(b, "\"");
	}
	err |= sbuf__puts(b, "}");
	return err ? -ENOMEM : 0;
}

int coord_query_args(struct sbuf *b, const struct store_query *q)
{
	struct sbuf sel = {0};
	char *esc = NULL;
	int err;

	err = selector_text(&sel, q);
	if (!err)
		esc = curl_easy_escape(NULL, sel.buf, (int)sel.len);
	if (!err && !esc)
		err = -ENOMEM;
	if (!err && sbuf__printf(b, "query=%s&from=%lld&until=%lld", esc, (long long)q->from_ms,
				 (long long)q->until_ms))
		err = -ENOMEM;
	curl_free(esc);
	sbuf__free(&sel);
	return err;
}
