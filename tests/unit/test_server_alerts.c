/* test_server_alerts.c: the alerts a server keeps (src/server/alert_state.c,
 * included to reach its clock-taking functions): each project's bounds
 * are its own -- one project full of firing alerts leaves another's room
 * whole -- the bytes of a project's alerts are bounded as their count is,
 * resolved alerts make room first, and firing alerts that are not sent
 * again expire after four of their sender's re-send intervals (two hours
 * when sent once). The HTTP side (413 for a large alert, projects apart
 * through tokens) is test_faults_alerts.py's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "server/alert_state.c"

#define MIN_MS (60 * 1000LL)
#define HOUR_MS (60 * MIN_MS)

static json_t *alert(const char *status, const char *name, int i)
{
	char id[32];
	json_t *o;

	snprintf(id, sizeof(id), "%d", i);
	o = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s}", "status", status, "alert", name, "labels",
		      "alertname", name, "id", id, "startsAt", "2024-05-01T12:00:02.100Z");
	assert_non_null(o);
	return o;
}

/* Posts one alert of bytes for project at now. */
static int post(struct alert_state *a, const char *project, const char *status, int i, size_t bytes,
		int64_t now)
{
	json_t *o = alert(status, "A", i);
	int err = alert_state__post(a, project, o, &bytes, now);

	json_decref(o);
	return err;
}

static size_t count(struct alert_state *a, const char *project, int64_t now)
{
	json_t *arr = alert_state__list(a, project, now);
	size_t n;

	assert_non_null(arr);
	n = json_array_size(arr);
	json_decref(arr);
	return n;
}

/* One project's firing alerts fill its own room, not another's. */
static void test_projects_apart(void **state)
{
	struct alert_state *a = alert_state__new();
	json_t *many = json_array();
	size_t *bytes = calloc(ALERTS_MAX, sizeof(*bytes));
	int64_t now = 1000 * HOUR_MS;

	assert_non_null(a);
	for (int i = 0; i < ALERTS_MAX; i++) {
		json_array_append_new(many, alert("firing", "Flood", i));
		bytes[i] = 100;
	}
	assert_int_equal(alert_state__post(a, "b", many, bytes, now), 0);
	assert_int_equal(count(a, "b", now), ALERTS_MAX);
	assert_int_equal(post(a, "b", "firing", ALERTS_MAX, 100, now), -ENOSPC);
	/* Project a, and a server without --auth (NULL), still have room. */
	assert_int_equal(post(a, "a", "firing", 1, 100, now), 0);
	assert_int_equal(post(a, NULL, "firing", 1, 100, now), 0);
	assert_int_equal(count(a, "a", now), 1);
	assert_int_equal(count(a, NULL, now), 1);
	assert_int_equal(count(a, "c", now), 0);
	json_decref(many);
	free(bytes);
	alert_state__free(a);
}

/* The bytes of a project's alerts are bounded; resolved ones make room. */
static void test_bytes_bounded(void **state)
{
	struct alert_state *a = alert_state__new();
	size_t per = ALERT_MAX_BYTES, fit = ALERTS_MAX_BYTES / per;
	int64_t now = 1000 * HOUR_MS;
	size_t i;

	for (i = 0; i < fit; i++)
		assert_int_equal(post(a, "p", i ? "firing" : "resolved", (int)i, per, now + (int)i),
				 0);
	/* Full: the resolved one goes for a new one... */
	assert_int_equal(post(a, "p", "firing", (int)fit, per, now + 5000), 0);
	assert_int_equal(count(a, "p", now + 5000), fit);
	/* ...then, all firing, nothing more fits, even by growing one. */
	assert_int_equal(post(a, "p", "firing", (int)fit + 1, per, now + 5000), -ENOSPC);
	assert_int_equal(post(a, "p", "firing", 1, 2 * per, now + 5000), -ENOSPC);
	assert_int_equal(post(a, "p", "firing", 1, per / 2, now + 5000), 0);
	assert_int_equal(post(a, "p", "firing", (int)fit + 1, per / 2, now + 5000), 0);
	assert_int_equal(post(a, "q", "firing", 1, per, now + 5000), 0);
	alert_state__free(a);
}

/* Firing alerts not sent again expire; resolved ones stay an hour. */
static void test_expiry(void **state)
{
	struct alert_state *a = alert_state__new();
	int64_t t = 1000 * HOUR_MS, every = 30 * 1000;

	/* Sent once: two hours. */
	assert_int_equal(post(a, "p", "firing", 1, 100, t), 0);
	assert_int_equal(count(a, "p", t + 2 * HOUR_MS - 1), 1);
	assert_int_equal(count(a, "p", t + 2 * HOUR_MS), 0);

	/* Sent again every 30 s: gone four intervals after the last. */
	t += 3 * HOUR_MS;
	for (int i = 0; i < 4; i++)
		assert_int_equal(post(a, "p", "firing", 2, 100, t + i * every), 0);
	t += 3 * every;
	assert_int_equal(count(a, "p", t + 4 * every - 1), 1);
	assert_int_equal(count(a, "p", t + 4 * every), 0);
	/* Back after its time: a new alert, two hours again. */
	assert_int_equal(post(a, "p", "firing", 2, 100, t + 5 * every), 0);
	assert_int_equal(count(a, "p", t + 5 * every + 2 * HOUR_MS - 1), 1);

	/* An interval of a second still keeps it a minute. */
	t += 3 * HOUR_MS;
	assert_int_equal(post(a, "q", "firing", 3, 100, t), 0);
	assert_int_equal(post(a, "q", "firing", 3, 100, t + 1000), 0);
	assert_int_equal(count(a, "q", t + 1000 + MIN_MS - 1), 1);
	assert_int_equal(count(a, "q", t + 1000 + MIN_MS), 0);

	/* Resolved: an hour, resent or not. */
	assert_int_equal(post(a, "q", "firing", 4, 100, t), 0);
	assert_int_equal(post(a, "q", "resolved", 4, 100, t + every), 0);
	assert_int_equal(count(a, "q", t + every + HOUR_MS - 1), 1);
	assert_int_equal(count(a, "q", t + every + HOUR_MS), 0);
	alert_state__free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_projects_apart),
		cmocka_unit_test(test_bytes_bounded),
		cmocka_unit_test(test_expiry),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
