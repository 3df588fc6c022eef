/* test_server_api.c: the HTTP API of src/server/ end to end on a real
 * server (server__start on 127.0.0.1, port 0) over an in-memory store,
 * driven by libcurl: agent ingest split into series with exact totals, the
 * query routes (labels, values, flame graph, Pyroscope render, diff, top,
 * timeseries, points, pprof and speedscope downloads), Pyroscope ingest
 * (folded, lines, raw and multipart pprof), alerts, /metrics, /healthz, the
 * UI; every malformed request its 4xx with a JSON message and the server
 * answering after it; a store failure never acknowledged; concurrent
 * clients; retention applied at start. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <jansson.h>

#include "common/sbuf.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "common/clock.h"
#include "server/server.h"
#include "server/ui_assets.h"

#include "test_server_memstore.h"
#include "test_server_pprof.h"

#define MB (1024 * 1024)

static struct memstore *ms;
static bool expect_continue; /* let curl wait for "100 Continue" */
static struct server *srv;
static char base[64];

struct resp {
	long code;
	char *body;
	size_t len;
	char ctype[128], allow[64], disp[256];
	json_t *json;
};

static size_t on_body(char *p, size_t sz, size_t n, void *ctx)
{
	struct resp *r = ctx;

	r->body = realloc(r->body, r->len + sz * n + 1);
	memcpy(r->body + r->len, p, sz * n);
	r->len += sz * n;
	r->body[r->len] = '\0';
	return sz * n;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t outlen)
{
	size_t k = strlen(name);

	if (n > k && !strncasecmp(line, name, k)) {
		size_t v = n - k;

		while (v && (line[k + v - 1] == '\r' || line[k + v - 1] == '\n'))
			v--;
		snprintf(out, outlen, "%.*s", (int)v, line + k);
	}
}

static size_t on_header(char *p, size_t sz, size_t n, void *ctx)
{
	struct resp *r = ctx;

	header_value(p, sz * n, "Content-Type: ", r->ctype, sizeof(r->ctype));
	header_value(p, sz * n, "Allow: ", r->allow, sizeof(r->allow));
	header_value(p, sz * n, "Content-Disposition: ", r->disp, sizeof(r->disp));
	return sz * n;
}

struct upload {
	const char *data;
	size_t len, pos;
};

static size_t on_read(char *buf, size_t sz, size_t n, void *ctx)
{
	struct upload *u = ctx;
	size_t k = sz * n < u->len - u->pos ? sz * n : u->len - u->pos;

	memcpy(buf, u->data + u->pos, k);
	u->pos += k;
	return k;
}

static void resp__free(struct resp *r)
{
	free(r->body);
	json_decref(r->json);
	memset(r, 0, sizeof(*r));
}

/* One request; body NULL for GET. chunked sends without Content-Length. */
static void http(struct resp *r, const char *method, const char *path, const char *ctype,
		 const void *body, size_t len, bool chunked)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	struct upload up = {body, len, 0};
	char url[8192], hdr[256];

	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "%s%s", base, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	if (ctype) {
		snprintf(hdr, sizeof(hdr), "Content-Type: %s", ctype);
		h = curl_slist_append(h, hdr);
	}
	if (!expect_continue)
		h = curl_slist_append(h, "Expect:");
	if (!strcmp(method, "POST")) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		if (chunked) {
			h = curl_slist_append(h, "Transfer-Encoding: chunked");
			curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
			curl_easy_setopt(c, CURLOPT_READDATA, &up);
		} else {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, body ? body : "");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		}
	} else if (strcmp(method, "GET")) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	r->code = -1;
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->code);
	if (r->body && strstr(r->ctype, "json"))
		r->json = json_loadb(r->body, r->len, 0, NULL);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
}

/* The compact JSON text of j equals want. */
static void assert_json(json_t *j, const char *want)
{
	char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);

	assert_non_null(text);
	assert_string_equal(text, want);
	free(text);
}

static void get(struct resp *r, const char *path)
{
	http(r, "GET", path, NULL, NULL, 0, false);
}

/* Expects a 4xx/5xx JSON error naming what. */
static void expect_error(struct resp *r, long code, const char *what)
{
	const char *msg = json_string_value(json_object_get(r->json, "error"));

	if (r->code != code || !msg || !strstr(msg, what))
		fail_msg("expected %ld naming '%s', got %ld: %s", code, what, r->code,
			 r->body ? r->body : "(no body)");
	assert_string_equal(r->ctype, "application/json");
}

static void healthy(void)
{
	struct resp r;

	get(&r, "/healthz");
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "ok\n");
	resp__free(&r);
}

static int setup(void **state)
{
	struct server_opts o = {
		.listen = "127.0.0.1:0", .threads = 4, .retention_ms = 3600 * 1000LL};

	curl_global_init(CURL_GLOBAL_ALL);
	ms = memstore__new();
	o.store = &ms->base;
	srv = server__start(&o);
	assert_non_null(srv);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", server__port(srv));
	return 0;
}

static int teardown(void **state)
{
	server__stop(srv);
	store__close(&ms->base);
	curl_global_cleanup();
	return 0;
}

static int64_t now_s(void)
{
	return (int64_t)wall_ms() / 1000;
}

static const struct tsample agent_samples[] = {
	{"main;run;hot_a", {60, 60 * 10101010LL}, "comm=shares,pid=#42,tid=#43"},
	{"main;run;hot_b", {30, 30 * 10101010LL}, "comm=shares,pid=#42,tid=#44"},
	{"main;run;hot_c", {10, 10 * 10101010LL}, "comm=shares,pid=#42,tid=#43"},
	{"main;loop", {20, 20 * 10101010LL}, "comm=python3,pid=#7,cgroup=/job"},
	{"main;io;read_[k]", {5, 5 * 10101010LL}, "comm=python3,pid=#7,cgroup=/job"},
};

static void ingest_agent_window(int64_t from_ms, const char *node)
{
	struct resp r;
	char path[256];
	size_t len;
	uint8_t *body = make_pprof(&tp_cpu, agent_samples, ARRAY_SIZE(agent_samples), true, &len);

	snprintf(path, sizeof(path), "/api/v1/ingest?from=%" PRId64 "&until=%" PRId64 "&node=%s",
		 from_ms, from_ms + 10000, node);
	http(&r, "POST", path, "application/octet-stream", body, len, false);
	if (r.code != 200)
		fail_msg("ingest: %ld %s", r.code, r.body);
	assert_int_equal(json_integer_value(json_object_get(r.json, "series")), 2);
	assert_int_equal(json_integer_value(json_object_get(r.json, "samples")), 5);
	resp__free(&r);
	free(body);
}

/* The value of the flamebearer node at path (names root first, after
 * "total") -- decoded from the levels. */
static int64_t fb_total(json_t *fb, const char *const *path, size_t n)
{
	json_t *names = json_object_get(fb, "names"), *levels = json_object_get(fb, "levels");
	int64_t lo = 0, hi = INT64_MAX, found = -1;

	for (size_t d = 1; d <= n; d++) {
		json_t *lv = json_array_get(levels, d);
		int64_t x = 0;

		found = -1;
		for (size_t k = 0; k + 3 < json_array_size(lv); k += 4) {
			int64_t dx = json_integer_value(json_array_get(lv, k));
			int64_t t = json_integer_value(json_array_get(lv, k + 1));
			const char *nm = json_string_value(json_array_get(
				names, json_integer_value(json_array_get(lv, k + 3))));

			x += dx;
			if (x >= lo && x + t <= hi && !strcmp(nm, path[d - 1])) {
				lo = x;
				hi = x + t;
				found = t;
				break;
			}
			x += t;
		}
		if (found < 0)
			return -1;
	}
	return found;
}

static void test_agent_roundtrip(void **state)
{
	int64_t t0 = (now_s() - 600) * 1000;
	struct resp r;
	char path[512];
	const char *hot_a[] = {"main", "run", "hot_a"}, *read[] = {"main", "io", "read_[k]"};

	ingest_agent_window(t0, "n1");
	ingest_agent_window(t0 + 10000, "n1");
	ingest_agent_window(t0, "n2");

	get(&r, "/api/v1/labels");
	assert_int_equal(r.code, 200);
	assert_json(json_object_get(r.json, "names"),
		    "[\"cgroup\",\"comm\",\"node\",\"pid\",\"service_name\",\"type\"]");
	resp__free(&r);
	get(&r, "/api/v1/label/values?name=comm");
	assert_json(json_object_get(r.json, "values"), "[\"python3\",\"shares\"]");
	resp__free(&r);

	/* Three windows of 100 + 25 samples. */
	snprintf(path, sizeof(path), "/api/v1/flamegraph?from=%" PRId64 "&until=%" PRId64,
		 t0 - 60000, t0 + 60000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	{
		json_t *fb = json_object_get(r.json, "flamebearer");

		assert_int_equal(json_integer_value(json_object_get(fb, "numTicks")), 375);
		assert_int_equal(fb_total(fb, hot_a, 3), 180);
		assert_int_equal(fb_total(fb, read, 3), 15);
		assert_string_equal(json_string_value(json_object_get(
					    json_object_get(r.json, "metadata"), "units")),
				    "samples");
		assert_true(json_is_object(json_object_get(r.json, "timeline")));
	}
	resp__free(&r);

	/* A selector: node n2 and shares only. */
	snprintf(path, sizeof(path),
		 "/api/v1/flamegraph?query=%%7Bnode%%3D%%22n2%%22%%2Ccomm%%3D~%%22sh.*%%22%%7D"
		 "&from=%" PRId64 "&until=%" PRId64,
		 t0 - 60000, t0 + 60000);
	get(&r, path);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(r.json, "flamebearer"),
							    "numTicks")),
			 100);
	resp__free(&r);

	/* Totals by process, busiest first, with the windows' extent: shares
	 * 2 x 100 samples from t0 on n1 and 100 on n2 (each window 10 s). */
	snprintf(path, sizeof(path), "/api/v1/totals?by=comm&from=%" PRId64 "&until=%" PRId64,
		 t0 - 60000, t0 + 60000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	{
		json_t *g = json_object_get(r.json, "groups"), *g0 = json_array_get(g, 0);

		assert_int_equal(json_array_size(g), 2);
		assert_string_equal(json_string_value(json_object_get(g0, "value")), "shares");
		assert_true(json_integer_value(json_object_get(g0, "total")) >
			    json_integer_value(json_object_get(json_array_get(g, 1), "total")));
		assert_int_equal(json_integer_value(json_object_get(r.json, "from_ms")), t0);
		assert_int_equal(json_integer_value(json_object_get(g0, "from_ms")), t0);
		assert_int_equal(json_integer_value(json_object_get(r.json, "until_ms")),
				 t0 + 20000);
		assert_int_equal(
			json_integer_value(json_object_get(g0, "total")) +
				json_integer_value(json_object_get(json_array_get(g, 1), "total")),
			375);
	}
	resp__free(&r);
	snprintf(path, sizeof(path), "/api/v1/totals?by=comm&from=%" PRId64 "&until=%" PRId64,
		 t0 + 600000, t0 + 700000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_true(json_is_null(json_object_get(r.json, "from_ms")));
	assert_int_equal(json_array_size(json_object_get(r.json, "groups")), 0);
	resp__free(&r);

	/* Top, by self and by total. */
	snprintf(path, sizeof(path), "/api/v1/top?from=%" PRId64 "&until=%" PRId64 "&limit=2",
		 t0 - 60000, t0 + 60000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_int_equal(json_integer_value(json_object_get(r.json, "total")), 375);
	{
		json_t *fns = json_object_get(r.json, "functions");

		assert_int_equal(json_array_size(fns), 2);
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(fns, 0), "name")),
			"hot_a");
		assert_int_equal(
			json_integer_value(json_object_get(json_array_get(fns, 0), "self")), 180);
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(fns, 0), "module")),
			"app");
	}
	resp__free(&r);
	snprintf(path, sizeof(path),
		 "/api/v1/top?from=%" PRId64 "&until=%" PRId64 "&sort=total&limit=1", t0 - 60000,
		 t0 + 60000);
	get(&r, path);
	assert_string_equal(
		json_string_value(json_object_get(
			json_array_get(json_object_get(r.json, "functions"), 0), "name")),
		"main");
	resp__free(&r);

	/* Timeseries: 10 s steps, each window in its own. */
	snprintf(path, sizeof(path),
		 "/api/v1/timeseries?from=%" PRId64 "&until=%" PRId64 "&step=10000&type=cpu", t0,
		 t0 + 30000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_json(json_object_get(r.json, "values"), "[250,125,0]");
	assert_int_equal(json_integer_value(json_object_get(r.json, "step_ms")), 10000);
	assert_string_equal(json_string_value(json_object_get(r.json, "unit")), "samples");
	resp__free(&r);

	/* Diff: the first 10 s against the second. */
	snprintf(path, sizeof(path),
		 "/api/v1/diff?from=%" PRId64 "&until=%" PRId64 "&right_from=%" PRId64
		 "&right_until=%" PRId64,
		 t0, t0 + 10000, t0 + 10000, t0 + 20000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_int_equal(json_integer_value(json_object_get(r.json, "leftTicks")), 250);
	assert_int_equal(json_integer_value(json_object_get(r.json, "rightTicks")), 125);
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(r.json, "metadata"), "format")),
		"double");
	assert_int_equal(
		json_array_size(json_array_get(
			json_object_get(json_object_get(r.json, "flamebearer"), "levels"), 0)),
		7);
	resp__free(&r);

	/* Downloads. */
	snprintf(path, sizeof(path),
		 "/api/v1/pprof?query=%%7Btype%%3D%%22cpu%%22%%7D&from=%" PRId64 "&until=%" PRId64,
		 t0 - 60000, t0 + 60000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.ctype, "application/octet-stream");
	assert_string_equal(r.disp, "attachment; filename=\"sonde-cpu.pb.gz\"");
	{
		struct profile *p = profile__read_pprof(r.body, r.len, 64 * MB);

		assert_non_null(p);
		assert_int_equal(p->total, 375);
		profile__free(p);
	}
	resp__free(&r);
	snprintf(path, sizeof(path), "/api/v1/speedscope?from=%" PRId64 "&until=%" PRId64,
		 t0 - 60000, t0 + 60000);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_non_null(r.json);
	assert_non_null(json_object_get(r.json, "shared"));
	resp__free(&r);
}

static void test_pyroscope(void **state)
{
	int64_t t = now_s() - 300;
	const char folded[] = "main;run;hot_a 600\nmain;run;hot_b 300\nmain;run;hot_c 100\n";
	const char *hot_b[] = {"main", "run", "hot_b"};
	struct resp r;
	char path[512];

	snprintf(path, sizeof(path),
		 "/ingest?name=pyapp.cpu%%7Benv%%3Dprod%%7D&from=%" PRId64 "&until=%" PRId64
		 "&sampleRate=100&spyName=pyspy&format=folded",
		 t, t + 10);
	http(&r, "POST", path, "text/plain", folded, strlen(folded), false);
	assert_int_equal(r.code, 200);
	resp__free(&r);

	/* lines */
	snprintf(path, sizeof(path),
		 "/ingest?name=pyapp.cpu%%7Benv%%3Dstaging%%7D&from=%" PRId64 "&until=%" PRId64
		 "&format=lines",
		 t, t + 10);
	http(&r, "POST", path, NULL, "main;x\nmain;x\n", 14, false);
	assert_int_equal(r.code, 200);
	resp__free(&r);

	/* pprof, raw and multipart (as Pyroscope's Go client sends it). */
	{
		const struct tsample ts[] = {{"main;gofn", {7, 70000000}, ""}};
		const struct tpprof tp = {.types = {{"samples", "count"}, {"cpu", "nanoseconds"}},
					  .ntypes = 2,
					  .period_type = {"cpu", "nanoseconds"},
					  .period = 10000000};
		size_t len;
		uint8_t *pb = make_pprof(&tp, ts, 1, true, &len);
		struct sbuf mp = {0};

		snprintf(path, sizeof(path),
			 "/ingest?name=goapp.cpu&from=%" PRId64 "&until=%" PRId64 "&format=pprof",
			 t, t + 10);
		http(&r, "POST", path, "application/octet-stream", pb, len, false);
		assert_int_equal(r.code, 200);
		resp__free(&r);

		sbuf__puts(&mp, "--XyZ\r\nContent-Disposition: form-data; name=\"profile\"; "
				"filename=\"profile.pprof\"\r\nContent-Type: "
				"application/octet-stream\r\n\r\n");
		sbuf__add(&mp, pb, len);
		sbuf__puts(&mp, "\r\n--XyZ\r\nContent-Disposition: form-data; "
				"name=\"sample_type_config\"\r\n\r\n{}\r\n--XyZ--\r\n");
		snprintf(path, sizeof(path),
			 "/ingest?name=goapp.cpu%%7Bvia%%3Dmultipart%%7D&from=%" PRId64
			 "&until=%" PRId64 "&format=pprof",
			 t, t + 10);
		http(&r, "POST", path, "multipart/form-data; boundary=XyZ", mp.buf, mp.len, false);
		assert_int_equal(r.code, 200);
		resp__free(&r);
		/* A multipart body without the profile part. */
		http(&r, "POST", path, "multipart/form-data; boundary=XyZ",
		     "--XyZ\r\nContent-Disposition: form-data; "
		     "name=\"other\"\r\n\r\nx\r\n--XyZ--\r\n",
		     66, false);
		expect_error(&r, 400, "no 'profile' part");
		resp__free(&r);
		sbuf__free(&mp);
		free(pb);
	}

	/* Render: Pyroscope seconds, APP.TYPE{...} selectors. */
	snprintf(path, sizeof(path),
		 "/pyroscope/render?query=pyapp.cpu%%7Benv%%3D%%22prod%%22%%7D&from=%" PRId64
		 "&until=%" PRId64 "&format=json",
		 t - 60, t + 60);
	get(&r, path);
	assert_int_equal(r.code, 200);
	{
		json_t *fb = json_object_get(r.json, "flamebearer");

		assert_int_equal(json_integer_value(json_object_get(fb, "numTicks")), 1000);
		assert_int_equal(json_integer_value(json_object_get(fb, "maxSelf")), 600);
		assert_int_equal(fb_total(fb, hot_b, 3), 300);
		assert_string_equal(json_string_value(json_object_get(
					    json_object_get(r.json, "metadata"), "appName")),
				    "pyapp");
	}
	resp__free(&r);
	snprintf(path, sizeof(path),
		 "/pyroscope/render?query=pyapp.cpu%%7Benv%%3D%%22staging%%22%%7D&from=%" PRId64
		 "&until=%" PRId64,
		 t - 60, t + 60);
	get(&r, path);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(r.json, "flamebearer"),
							    "numTicks")),
			 2);
	resp__free(&r);
	snprintf(path, sizeof(path),
		 "/pyroscope/render?query=goapp.cpu&from=%" PRId64 "&until=%" PRId64, t - 60,
		 t + 60);
	get(&r, path);
	/* Raw and multipart: 7 samples each, nanoseconds back into samples. */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(r.json, "flamebearer"),
							    "numTicks")),
			 14);
	resp__free(&r);
	snprintf(path, sizeof(path),
		 "/pyroscope/render?query=goapp.cpu%%7Bvia%%3D%%22multipart%%22%%7D&from=%" PRId64
		 "&until=%" PRId64 "&format=collapsed",
		 t - 60, t + 60);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "main;gofn 7\n");
	resp__free(&r);
	/* Render-diff in Pyroscope's argument names. */
	snprintf(path, sizeof(path),
		 "/pyroscope/"
		 "render-diff?leftQuery=pyapp.cpu%%7Benv%%3D%%22prod%%22%%7D&leftFrom=%" PRId64
		 "&leftUntil=%" PRId64 "&rightQuery=pyapp.cpu%%7Benv%%3D%%22staging%%22%%7D",
		 t - 60, t + 60);
	get(&r, path);
	assert_int_equal(r.code, 200);
	assert_int_equal(json_integer_value(json_object_get(r.json, "leftTicks")), 1000);
	assert_int_equal(json_integer_value(json_object_get(r.json, "rightTicks")), 2);
	resp__free(&r);
}

static void test_points_and_alerts(void **state)
{
	int64_t t = (int64_t)wall_ms() - 5000;
	char body[1024], path[256];
	struct resp r;

	snprintf(body, sizeof(body),
		 "{\"points\": [{\"name\": \"gpu_memory_used_bytes\", \"labels\": {\"node\": "
		 "\"gpu-7\", \"pid\": \"4242\", \"gpu_id\": \"0\"}, \"ts_ms\": %" PRId64
		 ", \"value\": 6.4e10}, {\"name\": \"gpu_memory_used_bytes\", \"labels\": "
		 "{\"node\": "
		 "\"gpu-7\", \"pid\": \"4242\", \"gpu_id\": \"0\"}, \"ts_ms\": %" PRId64
		 ", \"value\": 1.5}, {\"name\": \"nccl_calls\", \"ts_ms\": %" PRId64
		 ", \"value\": 3}]}",
		 t, t + 1000, t);
	http(&r, "POST", "/api/v1/ingest/points", "application/json", body, strlen(body), false);
	assert_int_equal(r.code, 200);
	assert_int_equal(json_integer_value(json_object_get(r.json, "points")), 3);
	resp__free(&r);
	snprintf(path, sizeof(path),
		 "/api/v1/points?name=gpu_memory_used_bytes&query=%%7Bpid%%3D%%224242%%22%%7D");
	get(&r, path);
	assert_int_equal(r.code, 200);
	{
		json_t *s = json_array_get(json_object_get(r.json, "series"), 0);
		json_t *pts = json_object_get(s, "points");

		assert_int_equal(json_array_size(json_object_get(r.json, "series")), 1);
		assert_string_equal(
			json_string_value(json_object_get(json_object_get(s, "labels"), "gpu_id")),
			"0");
		assert_int_equal(json_array_size(pts), 2);
		assert_int_equal(json_integer_value(json_array_get(json_array_get(pts, 0), 0)), t);
		assert_true(json_number_value(json_array_get(json_array_get(pts, 0), 1)) == 6.4e10);
		assert_true(json_number_value(json_array_get(json_array_get(pts, 1), 1)) == 1.5);
	}
	resp__free(&r);
	get(&r, "/api/v1/points?query=%7B%7D");
	expect_error(&r, 400, "name is missing");
	resp__free(&r);

	/* Alerts: latest state per label set; firing first, then resolved,
	 * newest first. */
	{
		const char *a1 =
			"{\"status\": \"firing\", \"alert\": \"GpuMemoryHigh\", \"labels\": "
			"{\"alertname\": \"GpuMemoryHigh\", \"gpu_id\": \"0\"}, "
			"\"annotations\": {\"summary\": \"93%\"}, \"startsAt\": "
			"\"2024-05-01T12:00:02.100Z\", \"endsAt\": null, \"value\": 0.93}";
		const char *a2 =
			"{\"status\": \"firing\", \"alert\": \"NcclCollectiveStuck\", "
			"\"labels\": {\"alertname\": \"NcclCollectiveStuck\", \"rank\": "
			"\"3\"}, \"annotations\": {}, \"startsAt\": "
			"\"2024-05-01T11:00:00.000Z\", \"endsAt\": null, \"value\": \"+Inf\"}";
		const char *a2r = "{\"status\": \"resolved\", \"alert\": \"NcclCollectiveStuck\", "
				  "\"labels\": {\"rank\": \"3\", \"alertname\": "
				  "\"NcclCollectiveStuck\"}, \"startsAt\": "
				  "\"2024-05-01T11:00:00.000Z\", \"endsAt\": "
				  "\"2024-05-01T11:01:02.000Z\", \"value\": 1}";
		const char *a3 = "{\"status\": \"firing\", \"alert\": \"Newer\", \"labels\": "
				 "{\"alertname\": \"Newer\"}, \"startsAt\": "
				 "\"2024-05-02T00:00:00Z\", \"endsAt\": null, \"value\": 1}";
		json_t *alerts;

		http(&r, "POST", "/api/v1/alerts", "application/json", a1, strlen(a1), false);
		assert_int_equal(r.code, 200);
		resp__free(&r);
		http(&r, "POST", "/api/v1/alerts", "application/json", a2, strlen(a2), false);
		resp__free(&r);
		http(&r, "POST", "/api/v1/alerts", "application/json", a3, strlen(a3), false);
		resp__free(&r);
		http(&r, "POST", "/api/v1/alerts", "application/json", a2r, strlen(a2r), false);
		assert_int_equal(r.code, 200);
		resp__free(&r);
		get(&r, "/api/v1/alerts");
		assert_int_equal(r.code, 200);
		alerts = json_object_get(r.json, "alerts");
		assert_int_equal(json_array_size(alerts), 3);
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(alerts, 0), "alert")),
			"Newer");
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(alerts, 1), "alert")),
			"GpuMemoryHigh");
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(alerts, 2), "status")),
			"resolved");
		resp__free(&r);
		http(&r, "POST", "/api/v1/alerts", "application/json", "{\"status\": \"burning\"}",
		     21, false);
		expect_error(&r, 400, "\"status\"");
		resp__free(&r);
		http(&r, "POST", "/api/v1/alerts", "application/json", "{", 1, false);
		expect_error(&r, 400, "not JSON");
		resp__free(&r);
	}
}

/* ---- bad requests: each answered with its 4xx, nothing stored, the
 * server still up ---- */

static size_t stored_windows(void)
{
	size_t n;

	pthread_mutex_lock(&ms->lock);
	n = ms->nw;
	pthread_mutex_unlock(&ms->lock);
	return n;
}

/* Nothing was stored since before, and the server still answers. */
static void nothing_stored(size_t before)
{
	assert_int_equal(stored_windows(), before);
	healthy();
}

/* A valid pprof of one sample (free() it). */
static uint8_t *good_pprof(size_t *len)
{
	const struct tsample good[] = {{"main;a", {1, 10101010}, "comm=x"}};

	return make_pprof(&tp_cpu, good, 1, false, len);
}

static void test_bad_routes_and_methods(void **state)
{
	size_t before = stored_windows();
	struct resp r;

	get(&r, "/api/v1/nothing");
	expect_error(&r, 404, "/api/v1/nothing");
	resp__free(&r);
	http(&r, "DELETE", "/api/v1/labels", NULL, NULL, 0, false);
	expect_error(&r, 405, "use GET");
	assert_string_equal(r.allow, "GET, HEAD");
	resp__free(&r);
	get(&r, "/api/v1/ingest");
	expect_error(&r, 405, "use POST");
	resp__free(&r);
	nothing_stored(before);
}

/* Wrong content type: 415 before the body is read. */
static void test_bad_content_types(void **state)
{
	size_t len, before = stored_windows();
	uint8_t *pb = good_pprof(&len);
	struct resp r;

	http(&r, "POST", "/api/v1/ingest", "text/html", pb, len, false);
	expect_error(&r, 415, "text/html");
	resp__free(&r);
	http(&r, "POST", "/api/v1/ingest/points", "application/x-www-form-urlencoded", "a=b", 3,
	     false);
	expect_error(&r, 415, "not JSON");
	resp__free(&r);
	nothing_stored(before);
	free(pb);
}

static void test_bad_protobuf(void **state)
{
	size_t len, before = stored_windows();
	uint8_t *pb = good_pprof(&len);
	struct resp r;

	http(&r, "POST", "/api/v1/ingest", "application/x-protobuf", pb, len - 3, false);
	expect_error(&r, 400, "not a valid pprof");
	resp__free(&r);
	http(&r, "POST", "/api/v1/ingest", "application/octet-stream", "garbage!", 8, false);
	expect_error(&r, 400, "not a valid pprof");
	resp__free(&r);
	nothing_stored(before);
	free(pb);
}

/* Headers only: the answer comes without a byte of the body. */
static void test_announced_body_too_big(void **state)
{
	size_t before = stored_windows();
	char req[512], buf[4096];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(server__port(srv))};
	ssize_t n, got = 0;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	snprintf(req, sizeof(req),
		 "POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\nContent-Type: "
		 "application/octet-stream\r\nContent-Length: 1073741824\r\n\r\n");
	assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
	while ((n = read(fd, buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += n;
	buf[got] = '\0';
	close(fd);
	assert_non_null(strstr(buf, "HTTP/1.1 413"));
	assert_non_null(strstr(buf, "1073741824 bytes is over the limit"));
	nothing_stored(before);
}

/* Oversized: by Content-Length (answered before reading) and chunked
 * (dropped past the limit, never buffered). */
static void test_body_too_big(void **state)
{
	size_t before = stored_windows();
	char *big = calloc(1, 17 * MB);
	struct resp r;

	expect_continue = true;
	http(&r, "POST", "/api/v1/ingest", "application/octet-stream", big, 17 * MB, false);
	expect_continue = false;
	expect_error(&r, 413, "over the limit");
	resp__free(&r);
	http(&r, "POST", "/api/v1/ingest", "application/octet-stream", big, 17 * MB, true);
	expect_error(&r, 413, "over the limit");
	resp__free(&r);
	free(big);
	nothing_stored(before);
}

static void test_gzip_bomb(void **state)
{
	size_t n = 80 * MB, zlen = 200000, before = stored_windows();
	uint8_t *zeros = calloc(1, n), *z = malloc(zlen);
	struct resp r;
	z_stream zs;

	memset(&zs, 0, sizeof(zs));
	deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
	zs.next_in = zeros;
	zs.avail_in = (uInt)n;
	zs.next_out = z;
	zs.avail_out = (uInt)zlen;
	deflate(&zs, Z_FINISH);
	http(&r, "POST", "/api/v1/ingest", "application/octet-stream", z, zlen - zs.avail_out,
	     false);
	expect_error(&r, 413, "decompressed");
	resp__free(&r);
	deflateEnd(&zs);
	free(zeros);
	free(z);
	nothing_stored(before);
}

/* Labels: bad names, non-UTF-8 and huge values in the query. */
static void test_bad_labels(void **state)
{
	size_t len, before = stored_windows();
	uint8_t *pb = good_pprof(&len);
	char path[1200] = "/api/v1/ingest?node=";
	struct resp r;

	http(&r, "POST", "/api/v1/ingest?bad%20name=x", "application/octet-stream", pb, len, false);
	expect_error(&r, 400, "'bad name'");
	resp__free(&r);
	http(&r, "POST", "/api/v1/ingest?node=%ff%fe", "application/octet-stream", pb, len, false);
	expect_error(&r, 400, "label 'node' has a value that is not UTF-8");
	resp__free(&r);
	memset(path + strlen(path), 'x', 1100);
	http(&r, "POST", path, "application/octet-stream", pb, len, false);
	expect_error(&r, 400, "label 'node' has a value of 1100 bytes");
	resp__free(&r);
	nothing_stored(before);
	free(pb);
}

static void test_bad_ingest_times(void **state)
{
	size_t len, before = stored_windows();
	uint8_t *pb = good_pprof(&len);
	struct resp r;

	http(&r, "POST", "/api/v1/ingest?from=10&until=5", "application/octet-stream", pb, len,
	     false);
	expect_error(&r, 400, "after until");
	resp__free(&r);
	http(&r, "POST", "/api/v1/ingest?from=yesterday", "application/octet-stream", pb, len,
	     false);
	expect_error(&r, 400, "yesterday");
	resp__free(&r);
	nothing_stored(before);
	free(pb);
}

/* Queries: bad selectors, times, ranges, arguments. */
static void test_bad_queries(void **state)
{
	static const struct {
		const char *path, *what;
	} bad[] = {
		{"/api/v1/flamegraph?query=%7Btype%3D%22cpu%22", "offset 11"},
		{"/api/v1/flamegraph?query=%7Bcomm%3D~%22(%22%7D", "bad regex"},
		{"/api/v1/flamegraph?from=now&until=now-1h", "must be before"},
		{"/api/v1/flamegraph?from=soon", "bad from"},
		{"/api/v1/flamegraph?max_nodes=0", "max_nodes"},
		{"/api/v1/top?sort=fast", "sort"},
		{"/api/v1/top?limit=-1", "limit"},
		{"/api/v1/timeseries?from=0&until=now&step=1", "steps"},
		{"/api/v1/label/values?name=1x", "label name"},
		{"/api/v1/totals?by=1x", "label name"},
		{"/api/v1/totals", "label name"},
		{"/pyroscope/render?format=html", "format"},
	};
	size_t before = stored_windows();
	struct resp r;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		get(&r, bad[i].path);
		expect_error(&r, 400, bad[i].what);
		resp__free(&r);
	}
	nothing_stored(before);
}

static void test_bad_pyroscope_ingest(void **state)
{
	static const struct {
		const char *path, *body, *what;
	} bad[] = {
		{"/ingest?name=&format=folded", "a 1\n", "name is missing"},
		{"/ingest?name=app.cpu&format=trie", "a 1\n", "format 'trie'"},
		{"/ingest?name=app.cpu", "a;b 1\nbroken line\n", "line 2"},
		{"/ingest?name=app.cpu&sampleRate=-4", "a 1\n", "sampleRate"},
		{"/ingest?name=app.cpu%7Bbad%20key%3Dv%7D", "a 1\n", "label name"},
	};
	size_t before = stored_windows();
	struct resp r;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		http(&r, "POST", bad[i].path, NULL, bad[i].body, strlen(bad[i].body), false);
		expect_error(&r, 400, bad[i].what);
		resp__free(&r);
	}
	nothing_stored(before);
}

/* A store that fails: the ingest is not acknowledged. */
static void test_store_failure(void **state)
{
	const struct tsample good[] = {{"main;a", {1, 10101010}, "comm=x"}};
	struct resp r;
	size_t len;
	uint8_t *pb = make_pprof(&tp_cpu, good, 1, false, &len);

	pthread_mutex_lock(&ms->lock);
	ms->fail_puts = 1;
	pthread_mutex_unlock(&ms->lock);
	http(&r, "POST", "/api/v1/ingest", "application/octet-stream", pb, len, false);
	assert_true(r.code >= 500);
	assert_non_null(strstr(json_string_value(json_object_get(r.json, "error")),
			       "can't store the profile"));
	resp__free(&r);
	http(&r, "POST", "/api/v1/ingest", "application/octet-stream", pb, len, false);
	assert_int_equal(r.code, 200);
	resp__free(&r);
	free(pb);
}

static void test_ui_and_metrics(void **state)
{
	struct resp r;

	get(&r, "/");
	assert_int_equal(r.code, 200);
	assert_string_equal(r.ctype, "text/html; charset=utf-8");
	assert_non_null(strstr(r.body, "<html"));
	resp__free(&r);
	get(&r, "/ui/");
	assert_int_equal(r.code, 200);
	resp__free(&r);
	get(&r, "/ui/some/view");
	assert_int_equal(r.code, 200);
	assert_string_equal(r.ctype, "text/html; charset=utf-8");
	resp__free(&r);
	for (const struct ui_asset *a = ui_assets; a->path; a++) {
		char path[512];

		get(&r, a->path);
		assert_int_equal(r.code, 200);
		assert_string_equal(r.ctype, a->content_type);
		assert_int_equal(r.len, a->len);
		resp__free(&r);
		snprintf(path, sizeof(path), "/ui%s", a->path);
		get(&r, path);
		assert_int_equal(r.code, 200);
		assert_int_equal(r.len, a->len);
		resp__free(&r);
	}
	get(&r, "/nope.js");
	expect_error(&r, 404, "/nope.js");
	resp__free(&r);

	get(&r, "/metrics");
	assert_int_equal(r.code, 200);
	assert_non_null(strstr(r.ctype, "text/plain"));
	assert_non_null(strstr(r.body, "sonde_server_requests_total{route=\"/api/v1/ingest\","
				       "code=\"200\"}"));
	assert_non_null(strstr(r.body, "sonde_server_requests_total{route=\"/api/v1/ingest\","
				       "code=\"413\"}"));
	assert_non_null(strstr(r.body, "sonde_server_query_duration_seconds_bucket{route=\""
				       "/api/v1/flamegraph\",le=\"+Inf\"}"));
	assert_non_null(strstr(r.body, "sonde_server_ingest_samples_total "));
	assert_non_null(strstr(r.body, "sonde_server_store_windows "));
	/* Retention ran at start with the server's retention. */
	assert_non_null(strstr(r.body, "sonde_server_expire_runs_total 1"));
	assert_non_null(strstr(r.body, "sonde_server_retention_seconds 3600\n"));
	resp__free(&r);
	pthread_mutex_lock(&ms->lock);
	assert_true(ms->expires >= 1);
	assert_true(ms->last_expire_before > (int64_t)wall_ms() - 3600 * 1000LL - 600000);
	assert_true(ms->last_expire_before < (int64_t)wall_ms() - 3600 * 1000LL + 1000);
	pthread_mutex_unlock(&ms->lock);
}

/* Clients at once: ingests and queries interleaved; every ingest counted. */
#define NTHREADS 6
#define PER_THREAD 20

static void *client(void *arg)
{
	long id = (long)arg;
	const struct tsample ts[] = {{"main;conc", {3, 3 * 10101010LL}, "comm=conc"}};
	size_t len;
	uint8_t *pb = make_pprof(&tp_cpu, ts, 1, true, &len);
	int64_t t0 = (now_s() - 900) * 1000;
	long ok = 0;

	for (int i = 0; i < PER_THREAD; i++) {
		struct resp r;
		char path[256];

		snprintf(path, sizeof(path),
			 "/api/v1/ingest?from=%" PRId64 "&until=%" PRId64 "&client=c%ld", t0,
			 t0 + 1000, id);
		http(&r, "POST", path, "application/octet-stream", pb, len, false);
		ok += r.code == 200;
		resp__free(&r);
		get(&r, "/api/v1/flamegraph?query=%7Bcomm%3D%22conc%22%7D&from=now-1h");
		ok += r.code == 200;
		resp__free(&r);
	}
	free(pb);
	return (void *)ok;
}

static void test_concurrent(void **state)
{
	pthread_t th[NTHREADS];
	long total = 0;
	struct resp r;
	char path[256];

	for (long i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, client, (void *)i);
	for (int i = 0; i < NTHREADS; i++) {
		void *ok;

		pthread_join(th[i], &ok);
		total += (long)ok;
	}
	assert_int_equal(total, 2 * NTHREADS * PER_THREAD);
	snprintf(path, sizeof(path), "/api/v1/top?query=%%7Bcomm%%3D%%22conc%%22%%7D&from=now-1h");
	get(&r, path);
	assert_int_equal(json_integer_value(json_object_get(r.json, "total")),
			 3 * NTHREADS * PER_THREAD);
	resp__free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agent_roundtrip),
		cmocka_unit_test(test_pyroscope),
		cmocka_unit_test(test_points_and_alerts),
		cmocka_unit_test(test_bad_routes_and_methods),
		cmocka_unit_test(test_bad_content_types),
		cmocka_unit_test(test_bad_protobuf),
		cmocka_unit_test(test_announced_body_too_big),
		cmocka_unit_test(test_body_too_big),
		cmocka_unit_test(test_gzip_bomb),
		cmocka_unit_test(test_bad_labels),
		cmocka_unit_test(test_bad_ingest_times),
		cmocka_unit_test(test_bad_queries),
		cmocka_unit_test(test_bad_pyroscope_ingest),
		cmocka_unit_test(test_store_failure),
		/* After the bad requests: it counts their 413. */
		cmocka_unit_test(test_ui_and_metrics),
		cmocka_unit_test(test_concurrent),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
