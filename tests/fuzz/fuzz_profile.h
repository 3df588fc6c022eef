/* fuzz_profile.h: invariants of a struct profile that the fuzz targets
 * building one (fuzz_pprof.c, fuzz_folded.c, fuzz_cpu_sample.c) assert --
 * every index in range, the total the sum of the counts -- and round trips
 * through the writers and readers: what a writer wrote, the reader must read
 * back with the same total, and speedscope output must be JSON whose weights
 * add up to the total. Static helpers only; include after fuzz_common.h. */
#ifndef SONDE_TESTS_FUZZ_PROFILE_H
#define SONDE_TESTS_FUZZ_PROFILE_H

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>

#include "profile/profile.h"

#include "fuzz_common.h"

/* Decompressed size the fuzz targets let the pprof reader produce. */
#define FUZZ_PPROF_MAX (4u << 20)

static inline void fuzz_check_profile(const struct profile *p)
{
	int64_t sum = 0;
	size_t i, j;

	FUZZ_CHECK(p->nstrings >= 1 && !strcmp(p->strings[0], ""), "string 0 must be \"\"");
	for (i = 0; i < p->nstrings; i++)
		FUZZ_CHECK(p->strings[i], "string %zu is NULL", i);
	for (i = 0; i < p->nmappings; i++) {
		const struct prof_mapping *m = &p->mappings[i];

		FUZZ_CHECK(m->file < p->nstrings && m->build_id < p->nstrings, "mapping %zu", i);
	}
	for (i = 0; i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];

		FUZZ_CHECK(l->func && l->func < p->nstrings && *p->strings[l->func],
			   "location %zu has no name", i);
		FUZZ_CHECK(l->module < p->nstrings, "location %zu: module %u", i, l->module);
		FUZZ_CHECK(l->mapping <= p->nmappings, "location %zu: mapping %u of %zu", i,
			   l->mapping, p->nmappings);
	}
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];

		FUZZ_CHECK(s->comm < p->nstrings, "sample %zu: comm %u", i, s->comm);
		FUZZ_CHECK(s->thread < p->nstrings && s->service < p->nstrings,
			   "sample %zu: thread %u, service %u", i, s->thread, s->service);
		FUZZ_CHECK(s->nlocs <= PROF_MAX_FRAMES, "sample %zu: %u frames", i, s->nlocs);
		FUZZ_CHECK(s->count >= 0, "sample %zu: count %" PRId64, i, s->count);
		for (j = 0; j < s->nlocs; j++)
			FUZZ_CHECK(s->locs[j] < p->nlocs, "sample %zu frame %zu: location %u", i, j,
				   s->locs[j]);
		FUZZ_CHECK(!__builtin_add_overflow(sum, s->count, &sum), "counts overflow");
	}
	FUZZ_CHECK(sum == p->total, "counts add up to %" PRId64 ", total says %" PRId64, sum,
		   p->total);
}

/* Writes p in fmt into a new buffer (free() it) of *len bytes. */
static inline char *fuzz_write_profile(const struct profile *p, enum prof_format fmt, size_t *len)
{
	struct fuzz_mem m;
	int err;

	fuzz_mem_open(&m);
	err = profile__write(p, fmt, m.f);
	FUZZ_CHECK(!err, "writing %s: %s", prof_format_name(fmt), strerror(-err));
	fuzz_mem_close(&m);
	*len = m.len;
	return m.buf;
}

/* p written as pprof and read back; the copy has the same total. Each
 * unnamed frame comes back named ("module+0xOFFSET"), which may merge it
 * with a frame already so named, hence nsamples and nlocs may shrink. */
static inline struct profile *fuzz_pprof_roundtrip(const struct profile *p)
{
	struct profile *q;
	size_t len;
	char *buf = fuzz_write_profile(p, PROF_FMT_PPROF, &len);

	q = profile__read_pprof(buf, len, SIZE_MAX);
	FUZZ_CHECK(q, "can't read back the pprof written (%zu bytes): %s", len, strerror(errno));
	free(buf);
	fuzz_check_profile(q);
	FUZZ_CHECK(q->total == p->total, "pprof round trip: total %" PRId64 " became %" PRId64,
		   p->total, q->total);
	FUZZ_CHECK(q->nsamples <= p->nsamples && q->nlocs <= p->nlocs,
		   "pprof round trip: %zu samples became %zu, %zu locations %zu", p->nsamples,
		   q->nsamples, p->nlocs, q->nlocs);
	FUZZ_CHECK(q->period == p->period && q->time_ns == p->time_ns &&
			   q->duration_ns == p->duration_ns,
		   "pprof round trip: period or times changed");
	FUZZ_CHECK(!strcmp(q->type, p->type) && !strcmp(q->unit, p->unit),
		   "pprof round trip: \"%s/%s\" became \"%s/%s\"", p->type, p->unit, q->type,
		   q->unit);
	return q;
}

/* p written as folded text and read back; the copy has the same total.
 * *text (free() it) is the text written. */
static inline struct profile *fuzz_folded_roundtrip(const struct profile *p, char **text,
						    size_t *len)
{
	struct profile *q = profile__new("cpu", "nanoseconds", 1);
	size_t line = 0;
	FILE *f;
	int err;

	*text = fuzz_write_profile(p, PROF_FMT_FOLDED, len);
	f = fuzz_fopen((const uint8_t *)*text, *len);
	err = profile__read_folded(q, f, &line);
	fclose(f);
	FUZZ_CHECK(!err, "can't read back line %zu of the folded text written: %s", line,
		   strerror(-err));
	fuzz_check_profile(q);
	FUZZ_CHECK(q->total == p->total, "folded round trip: total %" PRId64 " became %" PRId64,
		   p->total, q->total);
	return q;
}

/* p written as speedscope JSON must parse, with one profile per pid whose
 * weights add up to the total. */
static inline void fuzz_check_speedscope(const struct profile *p)
{
	json_t *root, *profiles, *prof, *w;
	json_error_t jerr;
	int64_t sum = 0;
	size_t len, i, j;
	char *buf = fuzz_write_profile(p, PROF_FMT_SPEEDSCOPE, &len);

	root = json_loadb(buf, len, 0, &jerr);
	FUZZ_CHECK(root, "speedscope output is not JSON: %s at %d:%d", jerr.text, jerr.line,
		   jerr.column);
	profiles = json_object_get(root, "profiles");
	FUZZ_CHECK(json_is_array(profiles), "speedscope: no profiles array");
	json_array_foreach(profiles, i, prof)
	{
		json_t *weights = json_object_get(prof, "weights");
		json_t *samples = json_object_get(prof, "samples");

		FUZZ_CHECK(json_is_array(weights) && json_is_array(samples) &&
				   json_array_size(weights) == json_array_size(samples),
			   "speedscope: profile %zu has no matching samples and weights", i);
		json_array_foreach(weights, j, w)
		{
			FUZZ_CHECK(json_is_integer(w), "speedscope: weight not an integer");
			FUZZ_CHECK(!__builtin_add_overflow(sum, json_integer_value(w), &sum),
				   "speedscope: weights overflow");
		}
	}
	FUZZ_CHECK(sum == p->total, "speedscope weights add up to %" PRId64 ", total %" PRId64, sum,
		   p->total);
	json_decref(root);
	free(buf);
}

#endif
