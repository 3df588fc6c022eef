/* test_metrics.c: unit tests of src/metrics -- the log-linear histogram
 * (bucket arithmetic, quantile error within the documented 1/64 on known
 * distributions, exact count/sum/min/max, fixed bounds, merge, bounded
 * memory), gpu_metrics (memory accounting per pid and device, capacities,
 * stuck collectives, the process cap), the Prometheus exposition (HELP/TYPE
 * once per family, families contiguous, label escaping, cumulative buckets,
 * the seed's names), the series walk (same samples as the exposition), the
 * JSON snapshot (the seed's fields) and the simulator. The WebSocket accept
 * key and address parsing are src/net's (test_net.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"
#include "metrics/histogram.h"
#include "metrics/simulate.h"

#define GIB (1024ull * 1024 * 1024)

/* ---- helpers ---- */

static uint64_t rng_state = 42;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unif(void)
{
	return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank quantile of sorted v. */
static uint64_t exact_quantile(const uint64_t *v, size_t n, double q)
{
	size_t rank = (size_t)ceil(q * (double)n);

	if (rank < 1)
		rank = 1;
	return v[rank - 1];
}

static struct gpu_metrics *new_metrics(bool simulated)
{
	struct gpu_metrics_opts o = {.simulated = simulated, .node = "testnode"};
	struct gpu_metrics *m = gpu_metrics__new(&o);

	assert_non_null(m);
	return m;
}

static char *expo(struct gpu_metrics *m)
{
	size_t len = 0;
	char *s = gpu_metrics__prometheus(m, &len);

	assert_non_null(s);
	assert_int_equal(strlen(s), len);
	return s;
}

/* The value of the exposition line "name{labels} value" written exactly as
 * given (labels in emission order), or NAN when absent. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	return NAN;
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, line, n) && (l[n] == '\n' || l[n] == '\0'))
			return true;
	return false;
}

static json_t *snap(struct gpu_metrics *m)
{
	json_t *o = gpu_metrics__snapshot(m);

	assert_non_null(o);
	return o;
}

/* ---- histogram ---- */

static void test_hist_buckets(void **state)
{
	uint64_t lo, hi, prev_hi = 0;
	const uint64_t probes[] = {
		0,	    1,	       31,   32,   33,	    63,		64,
		65,	    1000,      4095, 4096, 1000000, 1ull << 40, (1ull << 63) - 1,
		1ull << 63, UINT64_MAX};

	/* Buckets tile [0, 2^64) without gap or overlap. */
	for (size_t b = 0; b < HIST_CHUNKS * HIST_SUB; b++) {
		hist_bucket_range(b, &lo, &hi);
		if (b)
			assert_int_equal(lo, prev_hi + 1);
		else
			assert_int_equal(lo, 0);
		assert_true(hi >= lo);
		/* Resolution: exact below 32, at most 1/32 of the bound above. */
		if (lo < HIST_SUB)
			assert_int_equal(hi, lo);
		else
			assert_true((double)(hi - lo + 1) <= (double)lo / 32.0);
		prev_hi = hi;
	}
	assert_int_equal(prev_hi, UINT64_MAX);
	for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
		size_t b = hist_bucket(probes[i]);

		assert_true(b < HIST_CHUNKS * HIST_SUB);
		hist_bucket_range(b, &lo, &hi);
		assert_true(lo <= probes[i] && probes[i] <= hi);
	}
}

enum dist { UNIFORM, EXPONENTIAL, LOGNORMAL, BIMODAL, SMALL_INTS };

static uint64_t draw(enum dist d)
{
	double z;

	switch (d) {
	case UNIFORM:
		return 1 + rnd() % 1000000;
	case EXPONENTIAL:
		return (uint64_t)(-log(unif()) * 50000.0);
	case LOGNORMAL:
		z = sqrt(-2 * log(unif())) * cos(2 * M_PI * unif());
		return (uint64_t)(6000.0 * exp(0.8 * z));
	case BIMODAL:
		return unif() < 0.9 ? 5000 + rnd() % 2000 : 30000000 + rnd() % 40000000;
	case SMALL_INTS:
		return rnd() % 32;
	}
	return 0;
}

static void test_hist_quantile_error(void **state)
{
	static const double qs[] = {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0};
	const size_t n = 200000;
	uint64_t *v = malloc(n * sizeof(*v));

	assert_non_null(v);
	for (int d = UNIFORM; d <= SMALL_INTS; d++) {
		struct hist h;
		double worst = 0;

		hist__init(&h, NULL, 0);
		for (size_t i = 0; i < n; i++) {
			v[i] = draw(d);
			hist__add(&h, v[i]);
		}
		qsort(v, n, sizeof(*v), cmp_u64);
		for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
			uint64_t truth = exact_quantile(v, n, qs[i]);
			uint64_t est = hist__quantile(&h, qs[i]);
			double err = truth ? fabs((double)est - (double)truth) / (double)truth
					   : (double)est;

			if (d == SMALL_INTS)
				assert_int_equal(est, truth); /* exact below 32 */
			if (err > worst)
				worst = err;
			if (err > 1.0 / 64) {
				print_error("dist %d q %g: truth %" PRIu64 " est %" PRIu64
					    " err %.4f\n",
					    d, qs[i], truth, est, err);
				fail();
			}
		}
		/* The extremes are exact. */
		assert_int_equal(hist__quantile(&h, 0), v[0]);
		assert_int_equal(hist__quantile(&h, 1), v[n - 1]);
		hist__fini(&h);
	}
	free(v);
}

static void test_hist_exact_totals(void **state)
{
	struct hist h, a, b;
	uint64_t sum = 0;

	hist__init(&h, NULL, 0);
	assert_int_equal(hist__quantile(&h, 0.5), 0);
	hist__init(&a, NULL, 0);
	hist__init(&b, NULL, 0);
	for (uint64_t i = 1; i <= 100000; i++) {
		uint64_t x = i * 7919 % 1000003;

		hist__add(&h, x);
		hist__add(i % 2 ? &a : &b, x);
		sum += x;
	}
	assert_int_equal(h.count, 100000);
	assert_int_equal(h.sum, sum);
	hist__merge(&a, &b);
	assert_int_equal(a.count, h.count);
	assert_int_equal(a.sum, h.sum);
	assert_int_equal(a.min, h.min);
	assert_int_equal(a.max, h.max);
	for (double q = 0.05; q < 1; q += 0.05)
		assert_int_equal(hist__quantile(&a, q), hist__quantile(&h, q));
	/* Bounded memory, whatever the values. */
	for (int e = 0; e < 64; e++)
		hist__add(&h, 1ull << e);
	hist__add(&h, UINT64_MAX);
	assert_true(hist__mem(&h) <= HIST_CHUNKS * HIST_SUB * sizeof(uint64_t));
	hist__fini(&h);
	hist__fini(&a);
	hist__fini(&b);
	hist__fini(NULL);
}

static void test_hist_fixed_bounds(void **state)
{
	static const uint64_t bounds[] = {10, 100, 1000};
	struct hist h;

	hist__init(&h, bounds, 3);
	assert_int_equal(hist__cumulative(&h, 0), 0);
	assert_int_equal(hist__cumulative(&h, 3), 0);
	/* le is inclusive: 10 counts in le=10. */
	hist__add(&h, 0);
	hist__add(&h, 10);
	hist__add(&h, 11);
	hist__add(&h, 100);
	hist__add(&h, 999);
	hist__add(&h, 1000);
	hist__add(&h, 1001);
	hist__add(&h, UINT64_MAX);
	assert_int_equal(hist__cumulative(&h, 0), 2);
	assert_int_equal(hist__cumulative(&h, 1), 4);
	assert_int_equal(hist__cumulative(&h, 2), 6);
	assert_int_equal(hist__cumulative(&h, 3), 8);
	hist__fini(&h);
}

/* ---- gpu_metrics: accounting ---- */

static void test_memory_accounting(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	char *t;

	gpu_metrics__alloc(m, 100, 0, 1000);
	gpu_metrics__alloc(m, 100, 0, 500);
	gpu_metrics__release(m, 100, 0, 1000);
	gpu_metrics__alloc(m, 100, 1, 7 * GIB);
	gpu_metrics__alloc(m, 200, 0, 300);
	gpu_metrics__release(m, 200, 0, 300);
	/* A free larger than what we saw stops at zero (allocated before us). */
	gpu_metrics__alloc(m, 300, 2, 10);
	gpu_metrics__release(m, 300, 2, 50);
	t = expo(m);
	assert_true(sample(t, "zernel_gpu_memory_used_bytes{pid=\"100\",gpu_id=\"0\"}") == 500);
	assert_true(sample(t, "zernel_gpu_memory_peak_bytes{pid=\"100\",gpu_id=\"0\"}") == 1500);
	assert_true(sample(t, "zernel_gpu_memory_used_bytes{pid=\"100\",gpu_id=\"1\"}") ==
		    (double)(7 * GIB));
	assert_true(sample(t, "zernel_gpu_memory_peak_bytes{pid=\"100\",gpu_id=\"1\"}") ==
		    (double)(7 * GIB));
	assert_true(sample(t, "zernel_gpu_memory_used_bytes{pid=\"200\",gpu_id=\"0\"}") == 0);
	assert_true(sample(t, "zernel_gpu_memory_peak_bytes{pid=\"200\",gpu_id=\"0\"}") == 300);
	assert_true(sample(t, "zernel_gpu_memory_used_bytes{pid=\"300\",gpu_id=\"2\"}") == 0);
	assert_true(sample(t, "sonde_gpu_memory_used_bytes{pid=\"100\",gpu_id=\"0\"}") == 500);
	assert_true(sample(t, "sonde_cuda_memory_allocations_total{pid=\"100\",gpu_id=\"0\"}") ==
		    2);
	assert_true(sample(t, "sonde_cuda_memory_frees_total{pid=\"100\",gpu_id=\"0\"}") == 1);
	assert_true(sample(t, "sonde_gpu_device_memory_used_bytes{gpu_id=\"0\"}") == 500);
	/* No capacity yet: no ratio. */
	assert_null(strstr(t, "sonde_gpu_memory_used_ratio{"));
	free(t);

	/* The process goes: what it held is freed, its counters stay for the
	 * grace, marked with its exit time, then go. */
	gpu_metrics__process_exit(m, 100);
	t = expo(m);
	assert_true(sample(t, "sonde_gpu_memory_used_bytes{pid=\"100\",gpu_id=\"0\"}") == 0);
	assert_true(sample(t, "sonde_cuda_memory_allocations_total{pid=\"100\",gpu_id=\"0\"}") ==
		    2);
	assert_true(sample(t, "sonde_gpu_device_memory_used_bytes{gpu_id=\"0\"}") == 0);
	assert_true(sample(t, "sonde_process_exit_time_seconds{pid=\"100\"}") > 1.7e9);
	assert_null(strstr(t, "sonde_process_exit_time_seconds{pid=\"200\"}"));
	free(t);
	gpu_metrics__expire(m, 3600 * 1000); /* within the grace: kept */
	t = expo(m);
	assert_non_null(strstr(t, "pid=\"100\""));
	free(t);
	gpu_metrics__expire(m, 0);
	t = expo(m);
	assert_null(strstr(t, "pid=\"100\""));
	assert_true(sample(t, "zernel_gpu_memory_peak_bytes{pid=\"200\",gpu_id=\"0\"}") == 300);
	assert_true(sample(t, "sonde_agent_tracked_processes") == 2);
	free(t);
	/* A new process of an exited one's pid starts from 0. */
	gpu_metrics__alloc(m, 200, 0, 10);
	gpu_metrics__process_exit(m, 200);
	gpu_metrics__alloc(m, 200, 0, 7);
	t = expo(m);
	assert_true(sample(t, "sonde_cuda_memory_allocations_total{pid=\"200\",gpu_id=\"0\"}") ==
		    1);
	assert_true(sample(t, "sonde_gpu_memory_used_bytes{pid=\"200\",gpu_id=\"0\"}") == 7);
	assert_null(strstr(t, "sonde_process_exit_time_seconds{pid=\"200\"}"));
	free(t);
	gpu_metrics__free(m);
	gpu_metrics__free(NULL);
}

/* CUPTI's memory records: plain allocations by their bytes; those from a
 * pool of the process's own by what the pool holds (it keeps memory
 * released to it), trimmed and destroyed pools followed; an imported
 * pool's memory is another process's. */
static void test_cupti_pool_memory(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	const char *
		cupti = "sonde_gpu_process_memory_bytes{pid=\"100\",gpu_id=\"0\",source=\"cupti\"}",
	       *reserved =
		       "sonde_gpu_memory_pool_bytes{pid=\"100\",gpu_id=\"0\",state=\"reserved\"}",
	       *used = "sonde_gpu_memory_pool_bytes{pid=\"100\",gpu_id=\"0\",state=\"used\"}";
	char *t;

	gpu_metrics__cupti_memory(m, 100, 0, &(struct gpu_cupti_mem){.alloc = true, .bytes = 1000});
	gpu_metrics__cupti_memory(m, 100, 0,
				  &(struct gpu_cupti_mem){.alloc = true,
							  .bytes = 300,
							  .from = GPU_MEM_POOL,
							  .pool = 0xa000,
							  .pool_size = 2048});
	gpu_metrics__cupti_memory(m, 100, 0,
				  &(struct gpu_cupti_mem){.alloc = true,
							  .bytes = 200,
							  .from = GPU_MEM_POOL,
							  .pool = 0xa000,
							  .pool_size = 2048});
	/* Released to the pool, which keeps it. */
	gpu_metrics__cupti_memory(
		m, 100, 0,
		&(struct gpu_cupti_mem){
			.bytes = 300, .from = GPU_MEM_POOL, .pool = 0xa000, .pool_size = 2048});
	gpu_metrics__cupti_memory(m, 100, 0,
				  &(struct gpu_cupti_mem){.alloc = true,
							  .bytes = 1 << 20,
							  .from = GPU_MEM_IMPORTED_POOL,
							  .pool = 0xb000});
	t = expo(m);
	assert_true(sample(t, cupti) == 1000 + 2048);
	assert_true(sample(t, reserved) == 2048);
	assert_true(sample(t, used) == 200);
	/* The probes' own account: untouched. */
	assert_true(isnan(sample(t, "sonde_gpu_memory_used_bytes{pid=\"100\",gpu_id=\"0\"}")));
	free(t);
	/* Trimmed to 512, then a second pool, then the first destroyed. */
	gpu_metrics__cupti_pool(m, 100, 0, 0xa000, 512, false);
	gpu_metrics__cupti_pool(m, 100, 0, 0xc000, 4096, false);
	t = expo(m);
	assert_true(sample(t, cupti) == 1000 + 512 + 4096);
	assert_true(sample(t, reserved) == 512 + 4096);
	free(t);
	gpu_metrics__cupti_pool(m, 100, 0, 0xa000, 0, true);
	t = expo(m);
	assert_true(sample(t, cupti) == 1000 + 4096);
	assert_true(sample(t, reserved) == 4096);
	assert_true(sample(t, used) == 0);
	free(t);
	gpu_metrics__free(m);
}

/* Kernels' GPU time from their intervals: overlap counted once, per device;
 * the busy ratio once a window has closed, over that window. */
static void test_kernel_busy(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	struct proc_times win = {.wall_ns = 1000};
	struct verdict_out v = {.verdict = V_IDLE};
	char *t;

	gpu_metrics__kernel(m, 100, 0, 0, 100);
	gpu_metrics__kernel(m, 100, 0, 50, 150); /* 50 ns of it new */
	gpu_metrics__kernel(m, 100, 0, 60, 120); /* inside: none */
	gpu_metrics__kernel(m, 100, 0, 200, 300);
	gpu_metrics__kernel(m, 100, 1, 10, 20);
	t = expo(m);
	assert_true(sample(t, "sonde_gpu_kernels_total{pid=\"100\",gpu_id=\"0\"}") == 4);
	assert_true(fabs(sample(t, "sonde_gpu_kernel_seconds_total{pid=\"100\",gpu_id=\"0\"}") -
			 250e-9) < 1e-15);
	assert_true(fabs(sample(t, "sonde_gpu_kernel_seconds_total{pid=\"100\",gpu_id=\"1\"}") -
			 10e-9) < 1e-15);
	/* No window yet: no ratio. */
	assert_null(strstr(t, "sonde_gpu_busy_ratio{"));
	free(t);
	gpu_metrics__proc_window(m, 100, &win, &win, 100, &v);
	gpu_metrics__kernel(m, 100, 0, 400, 500);
	t = expo(m);
	assert_true(fabs(sample(t, "sonde_gpu_busy_ratio{pid=\"100\",gpu_id=\"0\"}") - 0.25) <
		    1e-9);
	free(t);
	/* ... and in the JSON snapshot, as the verdict's evidence. */
	{
		json_t *o = snap(m), *p = json_array_get(json_object_get(o, "processes"), 0);
		json_t *busy = json_object_get(json_object_get(p, "verdict"), "gpu_busy");

		assert_non_null(busy);
		assert_true(fabs(json_real_value(json_object_get(busy, "0")) - 0.25) < 1e-9);
		assert_true(fabs(json_real_value(json_object_get(busy, "1")) - 0.01) < 1e-9);
		json_decref(o);
	}
	/* The next window holds only what ran since. */
	gpu_metrics__proc_window(m, 100, &win, &win, 100, &v);
	t = expo(m);
	assert_true(fabs(sample(t, "sonde_gpu_busy_ratio{pid=\"100\",gpu_id=\"0\"}") - 0.1) < 1e-9);
	assert_true(sample(t, "sonde_gpu_busy_ratio{pid=\"100\",gpu_id=\"1\"}") == 0);
	free(t);
	gpu_metrics__free(m);
}

static void test_capacity_and_ratio(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	char *t;

	gpu_metrics__device_capacity(m, 0, 100 * GIB, "config");
	/* A more trusted source replaces; a less trusted one doesn't. */
	gpu_metrics__device_capacity(m, 0, 80 * GIB, "nvml");
	gpu_metrics__device_capacity(m, 0, 40 * GIB, "app");
	gpu_metrics__device_capacity(m, 1, 16 * GIB, "app");
	gpu_metrics__alloc(m, 7, 0, 60 * GIB);
	gpu_metrics__alloc(m, 8, 0, 16 * GIB);
	gpu_metrics__alloc(m, 7, 1, 4 * GIB);
	t = expo(m);
	assert_true(sample(t, "sonde_gpu_memory_capacity_bytes{gpu_id=\"0\",source=\"nvml\"}") ==
		    (double)(80 * GIB));
	assert_true(sample(t, "sonde_gpu_memory_capacity_bytes{gpu_id=\"1\",source=\"app\"}") ==
		    (double)(16 * GIB));
	assert_null(strstr(t, "source=\"config\""));
	assert_true(sample(t, "sonde_gpu_memory_used_ratio{pid=\"7\",gpu_id=\"0\"}") == 0.75);
	assert_true(sample(t, "sonde_gpu_memory_used_ratio{pid=\"8\",gpu_id=\"0\"}") == 0.2);
	assert_true(sample(t, "sonde_gpu_memory_used_ratio{pid=\"7\",gpu_id=\"1\"}") == 0.25);
	assert_true(sample(t, "sonde_gpu_device_memory_used_ratio{gpu_id=\"0\"}") == 0.95);
	assert_true(sample(t, "sonde_gpu_device_memory_used_bytes{gpu_id=\"0\"}") ==
		    (double)(76 * GIB));
	free(t);
	gpu_metrics__free(m);
}

/* A process that sees GPUs 3 and 5 of the machine as its CUDA devices 0 and
 * 1 (CUDA_VISIBLE_DEVICES=3,5): what the probes saw it allocate on its
 * device 0 is set against the driver's account of GPU 3; the driver's
 * series keep NVML's index, a GPU the process can't name (-1) has none. */
static void test_driver_memory_visible(void **state)
{
	const struct gpu_proc_mem rows[] = {{400, 3, 7000, 0}, {400, 5, 800, 1}, {400, 6, 50, -1}};
	const char *u = "sonde_gpu_process_memory_unattributed_bytes";
	struct gpu_metrics *m = new_metrics(false);
	json_t *o, *x;
	char *t, line[128];

	gpu_metrics__alloc(m, 400, 0, 1000);
	gpu_metrics__alloc(m, 400, 1, 300);
	gpu_metrics__set_driver_memory(m, rows, 3);
	t = expo(m);
	snprintf(line, sizeof(line), "%s{pid=\"400\",gpu_id=\"3\"}", u);
	assert_true(sample(t, line) == 6000);
	snprintf(line, sizeof(line), "%s{pid=\"400\",gpu_id=\"5\"}", u);
	assert_true(sample(t, line) == 500);
	snprintf(line, sizeof(line), "%s{pid=\"400\",gpu_id=\"6\"}", u);
	assert_true(isnan(sample(t, line)));
	snprintf(line, sizeof(line), "%s{pid=\"400\",gpu_id=\"0\"}", u);
	assert_true(isnan(sample(t, line)));
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"400\",gpu_id=\"3\","
			      "source=\"nvml\"}") == 7000);
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"400\",gpu_id=\"0\","
			      "source=\"allocations\"}") == 1000);
	free(t);
	o = snap(m);
	x = json_object_get(o, "nvml_memory");
	assert_int_equal(json_array_size(x), 3);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(x, 0), "cuda_gpu_id")),
			 0);
	assert_null(json_object_get(json_array_get(x, 2), "cuda_gpu_id"));
	x = json_object_get(json_array_get(json_object_get(o, "processes"), 0), "memory");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(x, 0), "nvml_bytes")),
			 7000);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(x, 1), "nvml_bytes")),
			 800);
	json_decref(o);
	gpu_metrics__free(m);
}

/* The driver's account (NVML) beside the probes': by source, and what the
 * driver holds that no probe saw. */
static void test_driver_memory(void **state)
{
	/* Not sorted: the metrics sort. */
	const struct gpu_proc_mem rows[] = {
		{300, 0, 5000, 0}, {100, 1, 2000, 1}, {100, 0, 4000, 0}, {200, 0, 100, 0}};
	const char *u = "sonde_gpu_process_memory_unattributed_bytes";
	struct gpu_metrics *m = new_metrics(false);
	json_t *o, *x;
	char *t, line[128];

	gpu_metrics__alloc(m, 100, 0, 1000);
	gpu_metrics__alloc(m, 200, 0, 9000);
	gpu_metrics__set_driver_memory(m, rows, 4);
	gpu_metrics__device_driver_used(m, 0, 12345);
	t = expo(m);
	assert_true(sample(t, "sonde_gpu_device_memory_nvml_used_bytes{gpu_id=\"0\"}") == 12345);
	assert_true(isnan(sample(t, "sonde_gpu_device_memory_nvml_used_bytes{gpu_id=\"1\"}")));
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"100\",gpu_id=\"0\","
			      "source=\"allocations\"}") == 1000);
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"100\",gpu_id=\"0\","
			      "source=\"nvml\"}") == 4000);
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"100\",gpu_id=\"1\","
			      "source=\"nvml\"}") == 2000);
	/* A process no probe saw: its driver number only. */
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"300\",gpu_id=\"0\","
			      "source=\"nvml\"}") == 5000);
	assert_null(strstr(t, "pid=\"300\",gpu_id=\"0\",source=\"allocations\""));
	snprintf(line, sizeof(line), "%s{pid=\"100\",gpu_id=\"0\"}", u);
	assert_true(sample(t, line) == 3000);
	/* Less than the probes saw (a free the driver already did): 0. */
	snprintf(line, sizeof(line), "%s{pid=\"200\",gpu_id=\"0\"}", u);
	assert_true(sample(t, line) == 0);
	/* Only where both say. */
	snprintf(line, sizeof(line), "%s{pid=\"100\",gpu_id=\"1\"}", u);
	assert_true(isnan(sample(t, line)));
	snprintf(line, sizeof(line), "%s{pid=\"300\",gpu_id=\"0\"}", u);
	assert_true(isnan(sample(t, line)));
	assert_true(has_line(t, "# TYPE sonde_gpu_process_memory_bytes gauge"));
	/* The seed's and the probes' families are as they were; 300 is no
	 * tracked process. */
	assert_true(sample(t, "sonde_gpu_memory_used_bytes{pid=\"100\",gpu_id=\"0\"}") == 1000);
	assert_null(strstr(t, "sonde_gpu_memory_used_bytes{pid=\"300\""));
	assert_true(sample(t, "sonde_agent_tracked_processes") == 2);
	free(t);

	o = snap(m);
	x = json_object_get(o, "nvml_memory");
	assert_int_equal(json_array_size(x), 4);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(x, 0), "pid")), 100);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(x, 3), "used_bytes")),
			 5000);
	x = json_array_get(
		json_object_get(json_array_get(json_object_get(o, "processes"), 0), "memory"), 0);
	assert_int_equal(json_integer_value(json_object_get(x, "current_bytes")), 1000);
	assert_int_equal(json_integer_value(json_object_get(x, "nvml_bytes")), 4000);
	x = json_array_get(json_object_get(o, "devices"), 0);
	assert_int_equal(json_integer_value(json_object_get(x, "nvml_used_bytes")), 12345);
	json_decref(o);

	/* The next account replaces the last: 300 is gone. An exit takes the
	 * process's driver rows with its other series. */
	gpu_metrics__set_driver_memory(m, rows + 1, 3);
	gpu_metrics__process_exit(m, 100);
	gpu_metrics__expire(m, 0);
	t = expo(m);
	assert_null(strstr(t, "pid=\"300\""));
	assert_null(strstr(t, "pid=\"100\""));
	assert_true(sample(t, "sonde_gpu_process_memory_bytes{pid=\"200\",gpu_id=\"0\","
			      "source=\"nvml\"}") == 100);
	free(t);
	gpu_metrics__set_driver_memory(m, NULL, 0);
	t = expo(m);
	assert_null(strstr(t, "source=\"nvml\""));
	free(t);
	gpu_metrics__free(m);
}

static void test_launches_waits_copies_nccl(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	char *t;

	for (int i = 1; i <= 1000; i++)
		gpu_metrics__launch(m, 42, (uint64_t)i * 1000); /* 1..1000 us */
	gpu_metrics__wait(m, 42, "cudaStreamSynchronize", 2000000);
	gpu_metrics__wait(m, 42, "cudaStreamSynchronize", 3000000);
	gpu_metrics__wait(m, 42, "cudaDeviceSynchronize", 500000000);
	gpu_metrics__copy(m, 42, GPU_COPY_H2D, 4096);
	gpu_metrics__copy(m, 42, GPU_COPY_H2D, 4096);
	gpu_metrics__copy(m, 42, GPU_COPY_D2H, 100);
	gpu_metrics__nccl(m, 42, NCCL_OP_ALLREDUCE, 1 << 20, 30000000);
	gpu_metrics__nccl(m, 43, NCCL_OP_ALLREDUCE, 1 << 20, 40000000);
	gpu_metrics__nccl(m, 42, NCCL_OP_SEND, 64, 1000);
	t = expo(m);
	assert_true(sample(t, "sonde_cuda_launches_total{pid=\"42\"}") == 1000);
	assert_true(sample(t, "zernel_cuda_launch_latency_seconds_count{pid=\"42\"}") == 1000);
	assert_true(fabs(sample(t, "zernel_cuda_launch_latency_seconds_sum{pid=\"42\"}") - 0.5005) <
		    1e-12);
	assert_true(fabs(sample(t, "zernel_cuda_launch_latency_seconds{pid=\"42\",quantile="
				   "\"0.5\"}") -
			 500e-6) <= 500e-6 / 64);
	assert_true(fabs(sample(t, "zernel_cuda_launch_latency_seconds{pid=\"42\",quantile="
				   "\"0.99\"}") -
			 990e-6) <= 990e-6 / 64);
	/* Histogram buckets: exact, cumulative, +Inf = count. */
	assert_true(
		sample(t, "sonde_cuda_launch_duration_seconds_bucket{pid=\"42\",le=\"1e-06\"}") ==
		1);
	assert_true(
		sample(t, "sonde_cuda_launch_duration_seconds_bucket{pid=\"42\",le=\"0.0001\"}") ==
		100);
	assert_true(
		sample(t, "sonde_cuda_launch_duration_seconds_bucket{pid=\"42\",le=\"0.00025\"}") ==
		250);
	assert_true(
		sample(t, "sonde_cuda_launch_duration_seconds_bucket{pid=\"42\",le=\"+Inf\"}") ==
		1000);
	assert_true(sample(t, "sonde_cuda_launch_duration_seconds_count{pid=\"42\"}") == 1000);
	assert_true(sample(t, "sonde_cuda_sync_wait_seconds_count{pid=\"42\",api="
			      "\"cudaStreamSynchronize\"}") == 2);
	assert_true(sample(t, "sonde_cuda_sync_wait_seconds_sum{pid=\"42\",api="
			      "\"cudaStreamSynchronize\"}") == 0.005);
	assert_true(sample(t, "sonde_cuda_sync_wait_seconds_bucket{pid=\"42\",api="
			      "\"cudaDeviceSynchronize\",le=\"0.25\"}") == 0);
	assert_true(sample(t, "sonde_cuda_sync_wait_seconds_bucket{pid=\"42\",api="
			      "\"cudaDeviceSynchronize\",le=\"0.5\"}") == 1);
	assert_true(sample(t, "sonde_cuda_memcpy_bytes_total{pid=\"42\",kind=\"h2d\"}") == 8192);
	assert_true(sample(t, "sonde_cuda_memcpy_calls_total{pid=\"42\",kind=\"h2d\"}") == 2);
	assert_true(sample(t, "sonde_cuda_memcpy_bytes_total{pid=\"42\",kind=\"d2h\"}") == 100);
	assert_null(strstr(t, "kind=\"d2d\""));
	assert_true(sample(t, "sonde_nccl_calls_total{op=\"allreduce\"}") == 2);
	assert_true(sample(t, "sonde_nccl_bytes_total{op=\"allreduce\"}") == 2 << 20);
	assert_true(sample(t, "sonde_nccl_calls_total{op=\"send\"}") == 1);
	assert_true(sample(t, "sonde_nccl_calls_total{op=\"recv\"}") == 0);
	assert_true(sample(t, "zernel_nccl_collective_duration_seconds_count{op=\"allreduce\"}") ==
		    2);
	assert_true(sample(t, "zernel_nccl_collective_duration_seconds_sum{op=\"allreduce\"}") ==
		    0.07);
	/* Within the resolution; the maximum is exact. */
	assert_true(fabs(sample(t, "zernel_nccl_collective_duration_seconds{op=\"allreduce\","
				   "quantile=\"0.5\"}") -
			 0.03) <= 0.03 / 64);
	assert_true(sample(t, "zernel_nccl_collective_duration_seconds{op=\"allreduce\",quantile="
			      "\"0.99\"}") == 0.04);
	assert_null(strstr(t, "zernel_nccl_collective_duration_seconds{op=\"recv\""));
	assert_true(sample(t, "sonde_nccl_duration_seconds_count{op=\"recv\"}") == 0);
	free(t);
	gpu_metrics__free(m);
}

static void test_stuck(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	char *t;
	json_t *o;

	gpu_metrics__set_stuck(m, 9, NCCL_OP_ALLREDUCE, 3, 8, 0x7f00dead0000ull, 12.5);
	gpu_metrics__set_stuck(m, 9, NCCL_OP_ALLREDUCE, 3, 8, 0x7f00dead0000ull, 61);
	gpu_metrics__set_stuck(m, 10, NCCL_OP_BROADCAST, 0, 8, 0x1, 2);
	t = expo(m);
	assert_true(sample(t, "sonde_nccl_stuck_seconds{pid=\"9\",op=\"allreduce\",rank=\"3\","
			      "comm=\"0x7f00dead0000\"}") == 61);
	assert_true(sample(t, "sonde_nccl_stuck_seconds{pid=\"10\",op=\"broadcast\",rank=\"0\","
			      "comm=\"0x1\"}") == 2);
	free(t);
	o = snap(m);
	assert_int_equal(json_array_size(json_object_get(o, "stuck")), 2);
	json_decref(o);
	gpu_metrics__set_stuck(m, 9, NCCL_OP_ALLREDUCE, 3, 8, 0x7f00dead0000ull, 0);
	gpu_metrics__process_exit(m, 10);
	t = expo(m);
	assert_null(strstr(t, "sonde_nccl_stuck_seconds{"));
	assert_true(has_line(t, "# TYPE sonde_nccl_stuck_seconds gauge"));
	free(t);
	gpu_metrics__free(m);
}

/* DataLoader waits longer than a second: one series per waiting thread,
 * at the loop's line, with the process's name when known; cleared when the
 * batch comes, or when the process exits. */
static void test_dataloader_stuck(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	json_t *o, *e;
	char *t;

	gpu_metrics__set_name(m, 9, "python3");
	gpu_metrics__set_dataloader_stuck(m, 9, 9, "/srv/train.py", 42, "train", 3.5);
	gpu_metrics__set_dataloader_stuck(m, 9, 9, "/srv/train.py", 42, "train", 61);
	gpu_metrics__set_dataloader_stuck(m, 10, 11, "we\"ird.py", 0, "", 2);
	t = expo(m);
	assert_true(has_line(t, "# TYPE sonde_dataloader_stuck_seconds gauge"));
	assert_true(sample(t,
			   "sonde_dataloader_stuck_seconds{pid=\"9\",tid=\"9\",file=\"/srv/"
			   "train.py\",line=\"42\",function=\"train\",process=\"python3\"}") == 61);
	assert_true(sample(t, "sonde_dataloader_stuck_seconds{pid=\"10\",tid=\"11\",file=\"we\\\""
			      "ird.py\",line=\"0\",function=\"\"}") == 2);
	free(t);
	o = snap(m);
	assert_int_equal(json_array_size(json_object_get(o, "dataloader_stuck")), 2);
	e = json_array_get(json_object_get(o, "dataloader_stuck"), 0);
	assert_int_equal(json_integer_value(json_object_get(e, "line")), 42);
	assert_string_equal(json_string_value(json_object_get(e, "function")), "train");
	assert_string_equal(json_string_value(json_object_get(e, "process")), "python3");
	assert_true(json_real_value(json_object_get(e, "seconds")) == 61);
	json_decref(o);
	gpu_metrics__set_dataloader_stuck(m, 9, 9, NULL, 0, NULL, 0);
	gpu_metrics__process_exit(m, 10);
	t = expo(m);
	assert_null(strstr(t, "sonde_dataloader_stuck_seconds{"));
	free(t);
	gpu_metrics__free(m);
}

static void test_process_cap(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	char *t;

	for (uint32_t pid = 1; pid <= 4096; pid++)
		gpu_metrics__launch(m, pid, 1000);
	gpu_metrics__launch(m, 5000, 1000);
	gpu_metrics__alloc(m, 5001, 0, 1);
	gpu_metrics__launch(m, 1, 1000); /* tracked ones still count */
	t = expo(m);
	assert_true(sample(t, "sonde_agent_tracked_processes") == 4096);
	assert_true(sample(t, "sonde_agent_untracked_events_total") == 2);
	assert_true(sample(t, "sonde_cuda_launches_total{pid=\"1\"}") == 2);
	assert_null(strstr(t, "pid=\"5000\""));
	free(t);
	gpu_metrics__free(m);
}

/* ---- exposition format ---- */

struct family {
	char name[128], type[16];
	bool help, done;
};

/* Checks the text format rules that matter to Prometheus: HELP then TYPE
 * once per family, every sample after its family's TYPE and before the next
 * family (families contiguous), sample names of histograms and summaries
 * only with their suffixes, label values properly quoted and escaped.
 * Returns the number of samples. */
static size_t check_format(const char *text)
{
	struct family fams[128];
	size_t nfams = 0, samples = 0;
	struct family *cur = NULL;
	const char *l = text;

	assert_true(text[strlen(text) - 1] == '\n');
	while (*l) {
		const char *end = strchr(l, '\n');
		char name[128], type[16];
		size_t n;

		assert_non_null(end);
		if (!strncmp(l, "# HELP ", 7)) {
			assert_int_equal(sscanf(l + 7, "%127s", name), 1);
			for (size_t i = 0; i < nfams; i++)
				assert_string_not_equal(fams[i].name, name);
			assert_true(nfams < 128);
			if (cur)
				cur->done = true;
			cur = &fams[nfams++];
			memset(cur, 0, sizeof(*cur));
			snprintf(cur->name, sizeof(cur->name), "%s", name);
			cur->help = true;
		} else if (!strncmp(l, "# TYPE ", 7)) {
			assert_int_equal(sscanf(l + 7, "%127s %15s", name, type), 2);
			assert_non_null(cur);
			assert_string_equal(cur->name, name);
			assert_int_equal(cur->type[0], 0);
			snprintf(cur->type, sizeof(cur->type), "%s", type);
		} else {
			const char *p = l, *brace;
			char base[128];

			assert_non_null(cur);
			assert_true(cur->type[0]);
			n = strcspn(l, "{ ");
			snprintf(base, sizeof(base), "%.*s", (int)n, l);
			if (strcmp(base, cur->name)) {
				size_t fl = strlen(cur->name);
				const char *suffix = base + fl;

				assert_true(!strncmp(base, cur->name, fl));
				if (!strcmp(cur->type, "histogram"))
					assert_true(!strcmp(suffix, "_bucket") ||
						    !strcmp(suffix, "_sum") ||
						    !strcmp(suffix, "_count"));
				else if (!strcmp(cur->type, "summary"))
					assert_true(!strcmp(suffix, "_sum") ||
						    !strcmp(suffix, "_count"));
				else
					fail_msg("sample %s outside family %s", base, cur->name);
			}
			p = l + n;
			brace = p;
			if (*brace == '{') {
				p++;
				while (*p != '}') {
					size_t kl = strspn(p, "abcdefghijklmnopqrstuvwxyz_");

					assert_true(kl > 0);
					p += kl;
					assert_int_equal(*p++, '=');
					assert_int_equal(*p++, '"');
					while (*p != '"') {
						assert_true(p < end);
						if (*p == '\\') {
							p++;
							assert_true(*p == '\\' || *p == '"' ||
								    *p == 'n');
						}
						p++;
					}
					p++;
					if (*p == ',')
						p++;
				}
				p++;
			}
			assert_int_equal(*p, ' ');
			{
				char *vend;
				const char *v = p + 1;

				if (strncmp(v, "NaN", 3) && strncmp(v, "+Inf", 4)) {
					strtod(v, &vend);
					assert_true(vend == end);
				}
			}
			samples++;
		}
		l = end + 1;
	}
	for (size_t i = 0; i < nfams; i++) {
		assert_true(fams[i].help);
		assert_true(fams[i].type[0]);
	}
	return samples;
}

static void test_exposition_format(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	struct agent_health h = {.cpu_samples = 10,
				 .cpu_drops = 1,
				 .gpu_events = 20,
				 .gpu_drops = 2,
				 .probe_attached = 5,
				 .probe_attach_failures = 3,
				 .map_fill_ratio = 0.25};
	char *t;

	/* Empty: every family still declared; the seed's dataloader family too. */
	t = expo(m);
	check_format(t);
	assert_true(has_line(t, "# TYPE zernel_dataloader_wait_seconds summary"));
	assert_true(has_line(t, "# TYPE zernel_gpu_memory_used_bytes gauge"));
	assert_true(has_line(t, "# TYPE zernel_cuda_launch_latency_seconds summary"));
	assert_true(has_line(t, "# TYPE zernel_nccl_collective_duration_seconds summary"));
	assert_true(has_line(t, "# TYPE sonde_cuda_launch_duration_seconds histogram"));
	assert_true(has_line(t, "sonde_agent_simulated 0"));
	free(t);

	gpu_metrics__set_health(m, &h);
	gpu_metrics__launch(m, 1, 5000);
	gpu_metrics__alloc(m, 1, 0, 1 << 30);
	gpu_metrics__dataloader_wait(m, 1, 8000000);
	/* Label values are escaped: backslash, double quote, newline. */
	gpu_metrics__wait(m, 1, "we\"ird\\api\nname", 1000);
	gpu_metrics__nccl(m, 1, NCCL_OP_ALLGATHER, 10, 10);
	gpu_metrics__copy(m, 1, GPU_COPY_DEFAULT, 1);
	gpu_metrics__set_stuck(m, 1, NCCL_OP_ALLREDUCE, 0, 2, 0xabc, 1);
	gpu_metrics__device_capacity(m, 0, 2ull << 30, "nvml");
	t = expo(m);
	assert_true(check_format(t) > 100);
	assert_true(sample(t, "sonde_cuda_sync_wait_seconds_count{pid=\"1\",api="
			      "\"we\\\"ird\\\\api\\nname\"}") == 1);
	assert_true(sample(t, "zernel_dataloader_wait_seconds{pid=\"1\",quantile=\"0.5\"}") ==
		    0.008);
	assert_true(sample(t, "zernel_dataloader_wait_seconds_count{pid=\"1\"}") == 1);
	assert_true(sample(t, "sonde_dataloader_wait_seconds_count{pid=\"1\"}") == 1);
	assert_true(sample(t, "sonde_agent_cpu_samples_total") == 10);
	assert_true(sample(t, "sonde_agent_cpu_drops_total") == 1);
	assert_true(sample(t, "sonde_agent_gpu_events_total") == 20);
	assert_true(sample(t, "sonde_agent_gpu_drops_total") == 2);
	assert_true(sample(t, "sonde_agent_probes_attached") == 5);
	assert_true(sample(t, "sonde_agent_probe_attach_failures_total") == 3);
	assert_true(sample(t, "sonde_agent_bpf_map_fill_ratio") == 0.25);
	assert_true(sample(t, "sonde_cuda_memcpy_bytes_total{pid=\"1\",kind=\"default\"}") == 1);
	/* Integers print exactly; values round-trip. */
	assert_true(has_line(t, "zernel_gpu_memory_used_bytes{pid=\"1\",gpu_id=\"0\"} 1073741824"));
	assert_true(has_line(t, "sonde_gpu_memory_used_ratio{pid=\"1\",gpu_id=\"0\"} 0.5"));
	assert_true(has_line(t, "zernel_cuda_launch_latency_seconds{pid=\"1\",quantile=\"0.5\"} "
				"5e-06"));
	free(t);
	gpu_metrics__free(m);

	m = new_metrics(true);
	t = expo(m);
	assert_true(has_line(t, "sonde_agent_simulated 1"));
	free(t);
	gpu_metrics__free(m);
}

/* ---- the series walk ---- */

struct collect {
	char *buf;
	size_t len, cap;
	size_t n;
};

/* Renders each series as its exposition line would be. */
static void collect_fn(void *ctx, const char *name, const char *const *labels, double value)
{
	struct collect *c = ctx;
	char line[1024];
	int n = snprintf(line, sizeof(line), "%s", name);

	if (labels && labels[0]) {
		n += snprintf(line + n, sizeof(line) - (size_t)n, "{");
		for (size_t i = 0; labels[i]; i += 2) {
			n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s=\"", i ? "," : "",
				      labels[i]);
			for (const char *s = labels[i + 1]; *s; s++) {
				if (*s == '\\' || *s == '"')
					n += snprintf(line + n, sizeof(line) - (size_t)n, "\\%c",
						      *s);
				else if (*s == '\n')
					n += snprintf(line + n, sizeof(line) - (size_t)n, "\\n");
				else
					line[n++] = *s;
			}
			n += snprintf(line + n, sizeof(line) - (size_t)n, "\"");
		}
		n += snprintf(line + n, sizeof(line) - (size_t)n, "}");
	}
	/* Compare values through the same %.17g round trip. */
	n += snprintf(line + n, sizeof(line) - (size_t)n, " %.17g\n", value);
	if (c->len + (size_t)n + 1 > c->cap) {
		c->cap = (c->cap + (size_t)n + 1) * 2;
		c->buf = realloc(c->buf, c->cap);
		assert_non_null(c->buf);
	}
	memcpy(c->buf + c->len, line, (size_t)n + 1);
	c->len += (size_t)n;
	c->n++;
}

static void test_each_matches_exposition(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	struct collect c = {0};
	char *t, *l, *save = NULL, *mine = NULL;
	size_t mlen = 0, samples = 0;
	FILE *f;

	gpu_metrics__launch(m, 1, 5000);
	gpu_metrics__alloc(m, 1, 0, 1 << 30);
	gpu_metrics__device_capacity(m, 0, 4ull << 30, "app");
	gpu_metrics__wait(m, 2, "a\"b", 1000);
	gpu_metrics__nccl(m, 1, NCCL_OP_ALLREDUCE, 10, 10000000);
	gpu_metrics__dataloader_wait(m, 3, 1000000);
	gpu_metrics__set_stuck(m, 1, NCCL_OP_ALLREDUCE, 0, 2, 0xabc, 70);
	gpu_metrics__each(m, collect_fn, &c);
	t = expo(m);
	/* Re-render the exposition's samples with %.17g values. */
	f = open_memstream(&mine, &mlen);
	assert_non_null(f);
	for (l = strtok_r(t, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *sp;

		if (l[0] == '#')
			continue;
		sp = strrchr(l, ' ');
		fprintf(f, "%.*s %.17g\n", (int)(sp - l), l,
			!strcmp(sp + 1, "+Inf") ? INFINITY : strtod(sp + 1, NULL));
		samples++;
	}
	fclose(f);
	assert_int_equal(c.n, samples);
	assert_string_equal(c.buf, mine);
	/* What the alert engine's defaults look for. */
	assert_non_null(
		strstr(c.buf, "sonde_gpu_memory_used_ratio{pid=\"1\",gpu_id=\"0\"} 0.25\n"));
	assert_non_null(strstr(c.buf, "sonde_nccl_stuck_seconds{pid=\"1\",op=\"allreduce\","
				      "rank=\"0\",comm=\"0xabc\"} 70\n"));
	free(mine);
	free(t);
	free(c.buf);

	/* An exited process's series, kept in /metrics for the grace, are
	 * not the alert engine's: an alert on it resolves at its exit. */
	gpu_metrics__process_exit(m, 1);
	memset(&c, 0, sizeof(c));
	gpu_metrics__each(m, collect_fn, &c);
	t = expo(m);
	assert_non_null(strstr(t, "sonde_cuda_launches_total{pid=\"1\"}"));
	assert_null(strstr(c.buf, "pid=\"1\""));
	assert_non_null(strstr(c.buf, "pid=\"2\""));
	free(t);
	free(c.buf);
	gpu_metrics__free(m);
}

/* A process's service and job: sonde_process_info, and /json. */
static void test_process_info(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	json_t *o, *pr, *job;
	char *t;

	gpu_metrics__launch(m, 7, 1000);
	gpu_metrics__set_info(m, 7, "train.py", "job=10.0.0.1:29500\nrank=3\nworld_size=8\n");
	gpu_metrics__launch(m, 8, 1000);
	gpu_metrics__set_info(m, 8, "server", NULL);
	gpu_metrics__launch(m, 9, 1000); /* never told */
	t = expo(m);
	assert_true(sample(t, "sonde_process_info{pid=\"7\",service_name=\"train.py\","
			      "job=\"10.0.0.1:29500\",rank=\"3\",world_size=\"8\"}") == 1);
	assert_true(sample(t, "sonde_process_info{pid=\"8\",service_name=\"server\"}") == 1);
	assert_null(strstr(t, "sonde_process_info{pid=\"9\""));
	free(t);
	o = gpu_metrics__snapshot(m);
	pr = json_array_get(json_object_get(o, "processes"), 0);
	assert_int_equal(json_integer_value(json_object_get(pr, "pid")), 7);
	assert_string_equal(json_string_value(json_object_get(pr, "service")), "train.py");
	job = json_object_get(pr, "job");
	assert_string_equal(json_string_value(json_object_get(job, "rank")), "3");
	assert_string_equal(json_string_value(json_object_get(job, "job")), "10.0.0.1:29500");
	pr = json_array_get(json_object_get(o, "processes"), 1);
	assert_null(json_object_get(pr, "job"));
	json_decref(o);
	gpu_metrics__free(m);
}

/* ---- the JSON snapshot ---- */

static void test_snapshot_fields(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	json_t *o, *g, *e;
	char *text;
	size_t len;

	o = snap(m);
	/* The seed's fields exist even with no data. */
	assert_true(json_is_array(json_object_get(o, "gpu_utilization")));
	assert_true(json_is_real(json_object_get(o, "cuda_latency_p50_us")));
	assert_true(json_is_real(json_object_get(o, "cuda_latency_p99_us")));
	assert_true(json_is_real(json_object_get(o, "nccl_allreduce_p50_ms")));
	assert_true(json_is_real(json_object_get(o, "nccl_allreduce_p99_ms")));
	assert_true(json_is_real(json_object_get(o, "dataloader_wait_p50_ms")));
	assert_true(json_is_integer(json_object_get(o, "last_update_ms")));
	assert_true(json_is_false(json_object_get(o, "simulated")));
	assert_string_equal(json_string_value(json_object_get(o, "node")), "testnode");
	json_decref(o);

	for (int i = 0; i < 99; i++)
		gpu_metrics__launch(m, 1000, 142000);
	gpu_metrics__launch(m, 1000, 891000);
	gpu_metrics__launch(m, 1000, 891000);
	gpu_metrics__alloc(m, 1000, 0, 83886080000ull);
	gpu_metrics__alloc(m, 1001, 1, 1000);
	gpu_metrics__release(m, 1001, 1, 400);
	gpu_metrics__nccl(m, 1000, NCCL_OP_ALLREDUCE, 1, 34000000);
	gpu_metrics__dataloader_wait(m, 1000, 8000000);
	o = snap(m);
	g = json_object_get(o, "gpu_utilization");
	assert_int_equal(json_array_size(g), 2);
	e = json_array_get(g, 0);
	assert_string_equal(json_string_value(json_object_get(e, "key")), "1000:0");
	assert_int_equal(json_integer_value(json_object_get(e, "current_bytes")), 83886080000ll);
	assert_int_equal(json_integer_value(json_object_get(e, "peak_bytes")), 83886080000ll);
	e = json_array_get(g, 1);
	assert_string_equal(json_string_value(json_object_get(e, "key")), "1001:1");
	assert_int_equal(json_integer_value(json_object_get(e, "current_bytes")), 600);
	assert_int_equal(json_integer_value(json_object_get(e, "peak_bytes")), 1000);
	assert_true(fabs(json_real_value(json_object_get(o, "cuda_latency_p50_us")) - 142) <=
		    142.0 / 64);
	assert_true(fabs(json_real_value(json_object_get(o, "cuda_latency_p99_us")) - 891) <=
		    891.0 / 64);
	assert_true(json_real_value(json_object_get(o, "nccl_allreduce_p50_ms")) == 34);
	assert_true(json_real_value(json_object_get(o, "nccl_allreduce_p99_ms")) == 34);
	assert_true(json_real_value(json_object_get(o, "dataloader_wait_p50_ms")) == 8);
	assert_int_equal(json_integer_value(json_object_get(o, "cuda_launches_total")), 101);
	json_decref(o);

	text = gpu_metrics__snapshot_text(m, &len);
	assert_non_null(text);
	assert_int_equal(strlen(text), len);
	o = json_loads(text, 0, NULL);
	assert_non_null(o);
	assert_true(json_is_object(json_object_get(o, "health")));
	assert_true(json_is_array(json_object_get(o, "processes")));
	assert_true(json_is_array(json_object_get(o, "nccl")));
	json_decref(o);
	free(text);
	gpu_metrics__free(m);
}

/* Every entry of a pid carries its process's name ("process"): the one
 * set, else /proc/PID/comm's; none for a pid that is no one's. */
static void test_snapshot_process_names(void **state)
{
	struct gpu_metrics *m = new_metrics(false);
	const uint32_t named = 4242, nobody = 4194304 + 1; /* above any pid_max */
	char self[32] = "";
	json_t *o, *e;
	size_t i, seen = 0;
	FILE *f = fopen("/proc/self/comm", "r");

	assert_non_null(f);
	assert_non_null(fgets(self, sizeof(self), f));
	fclose(f);
	self[strcspn(self, "\n")] = '\0';
	gpu_metrics__alloc(m, (uint32_t)getpid(), 0, 1000);
	gpu_metrics__set_name(m, named, "trainer-with-a-long-name");
	gpu_metrics__alloc(m, named, 1, 2000);
	gpu_metrics__set_stuck(m, named, NCCL_OP_ALLREDUCE, 1, 2, 0x7f00, 75);
	gpu_metrics__launch(m, nobody, 5000);
	o = snap(m);
	json_array_foreach(json_object_get(o, "gpu_utilization"), i, e)
	{
		json_int_t pid = json_integer_value(json_object_get(e, "pid"));
		const char *name = json_string_value(json_object_get(e, "process"));

		assert_non_null(name);
		/* Kept as the kernel keeps a name: 15 characters. */
		assert_string_equal(name, pid == named ? "trainer-with-a-" : self);
		seen++;
	}
	assert_int_equal(seen, 2);
	json_array_foreach(json_object_get(o, "processes"), i, e)
	{
		json_int_t pid = json_integer_value(json_object_get(e, "pid"));

		if (pid == nobody)
			assert_null(json_object_get(e, "process"));
		else
			assert_string_equal(json_string_value(json_object_get(e, "process")),
					    pid == named ? "trainer-with-a-" : self);
	}
	e = json_array_get(json_object_get(o, "stuck"), 0);
	assert_string_equal(json_string_value(json_object_get(e, "process")), "trainer-with-a-");
	json_decref(o);
	gpu_metrics__free(m);

	/* Simulated pids are no one's here: the simulator names them. */
	m = new_metrics(true);
	gpu_metrics__alloc(m, (uint32_t)getpid(), 0, 1000);
	o = snap(m);
	e = json_array_get(json_object_get(o, "gpu_utilization"), 0);
	assert_null(json_object_get(e, "process"));
	json_decref(o);
	gpu_metrics__free(m);
}

/* ---- the simulator ---- */

/* The snapshot without its clock fields. */
static char *sim_run(uint64_t seed, uint64_t ms)
{
	struct gpu_metrics *m = new_metrics(true);
	struct simulator *s = simulator__new(m, seed);
	json_t *o;
	char *text;

	for (uint64_t t = 1000; t <= 1000 + ms; t += 500)
		simulator__tick(s, t);
	o = snap(m);
	json_object_del(o, "time_ms");
	json_object_del(o, "start_ms");
	json_object_del(o, "last_update_ms");
	text = json_dumps(o, JSON_SORT_KEYS);
	json_decref(o);
	simulator__free(s);
	gpu_metrics__free(m);
	return text;
}

/* Before any tick the metrics already hold the job's first step -- its
 * processes with their memory, launches, waits and collectives: the first
 * snapshot an agent serves is never an empty machine. */
static void test_simulator_first_snapshot(void **state)
{
	struct gpu_metrics *m = new_metrics(true);
	struct simulator *s = simulator__new(m, 3);
	const char *want[] = {"1000:0", "1001:1", "1002:0"};
	json_t *o = snap(m), *gpu = json_object_get(o, "gpu_utilization"), *e;
	bool seen[ARRAY_SIZE(want)] = {false};
	char *t;
	size_t i;

	assert_int_equal(json_array_size(gpu), ARRAY_SIZE(want));
	json_array_foreach(gpu, i, e)
	{
		const char *key = json_string_value(json_object_get(e, "key"));

		assert_non_null(key);
		assert_true(json_integer_value(json_object_get(e, "current_bytes")) > 0);
		/* Named by the simulator: two ranks of a training script, a server. */
		assert_string_equal(json_string_value(json_object_get(e, "process")),
				    strcmp(key, "1002:0") ? "train.py" : "infer-server");
		for (size_t k = 0; k < ARRAY_SIZE(want); k++)
			if (!strcmp(key, want[k]))
				seen[k] = true;
	}
	for (size_t k = 0; k < ARRAY_SIZE(want); k++)
		assert_true(seen[k]);
	assert_true(json_integer_value(json_object_get(o, "cuda_launches_total")) > 0);
	assert_true(json_real_value(json_object_get(o, "cuda_latency_p50_us")) > 0);
	assert_true(json_real_value(json_object_get(o, "nccl_allreduce_p50_ms")) > 0);
	assert_true(json_real_value(json_object_get(o, "dataloader_wait_p50_ms")) > 0);
	json_decref(o);
	t = expo(m);
	assert_true(sample(t, "sonde_gpu_memory_used_bytes{pid=\"1000\",gpu_id=\"0\"}") > 0);
	assert_true(sample(t, "sonde_gpu_memory_used_bytes{pid=\"1002\",gpu_id=\"0\"}") > 0);
	assert_true(sample(t, "sonde_agent_probes_attached") > 0);
	free(t);
	simulator__free(s);
	gpu_metrics__free(m);
}

static void test_simulator(void **state)
{
	struct gpu_metrics *m = new_metrics(true);
	struct simulator *s = simulator__new(m, 7);
	char *a, *b, *t;
	json_t *o, *e;
	size_t i;

	/* Reproducible from the seed. */
	a = sim_run(7, 5000);
	b = sim_run(7, 5000);
	assert_string_equal(a, b);
	free(a);
	free(b);

	/* Ten minutes in 1 s ticks: the leak restarts rank 1, the hang at
	 * minute 4 shows as a stuck allreduce past 60 s, memory never
	 * exceeds the device. */
	bool saw_stuck = false, saw_restart = false;

	for (uint64_t t0 = 0; t0 <= 320000; t0 += 1000) {
		simulator__tick(s, t0);
		o = snap(m);
		assert_true(json_is_true(json_object_get(o, "simulated")));
		json_array_foreach(json_object_get(o, "stuck"), i, e)
		{
			if (json_real_value(json_object_get(e, "seconds")) > 60)
				saw_stuck = true;
		}
		json_array_foreach(json_object_get(o, "devices"), i, e)
		{
			assert_true(json_real_value(json_object_get(e, "used_ratio")) < 1.0);
		}
		json_array_foreach(json_object_get(o, "gpu_utilization"), i, e)
		{
			if (json_integer_value(json_object_get(e, "pid")) >= 1003)
				saw_restart = true;
		}
		json_decref(o);
	}
	assert_true(saw_stuck);
	assert_true(saw_restart);
	t = expo(m);
	check_format(t);
	assert_true(has_line(t, "sonde_agent_simulated 1"));
	assert_true(sample(t, "sonde_nccl_calls_total{op=\"allreduce\"}") > 1000);
	assert_true(sample(t, "zernel_dataloader_wait_seconds_count{pid=\"1000\"}") > 100);
	free(t);
	simulator__free(s);
	simulator__free(NULL);
	gpu_metrics__free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hist_buckets),
		cmocka_unit_test(test_hist_quantile_error),
		cmocka_unit_test(test_hist_exact_totals),
		cmocka_unit_test(test_hist_fixed_bounds),
		cmocka_unit_test(test_memory_accounting),
		cmocka_unit_test(test_cupti_pool_memory),
		cmocka_unit_test(test_kernel_busy),
		cmocka_unit_test(test_capacity_and_ratio),
		cmocka_unit_test(test_driver_memory),
		cmocka_unit_test(test_driver_memory_visible),
		cmocka_unit_test(test_launches_waits_copies_nccl),
		cmocka_unit_test(test_stuck),
		cmocka_unit_test(test_dataloader_stuck),
		cmocka_unit_test(test_process_cap),
		cmocka_unit_test(test_exposition_format),
		cmocka_unit_test(test_each_matches_exposition),
		cmocka_unit_test(test_process_info),
		cmocka_unit_test(test_snapshot_fields),
		cmocka_unit_test(test_snapshot_process_names),
		cmocka_unit_test(test_simulator_first_snapshot),
		cmocka_unit_test(test_simulator),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
