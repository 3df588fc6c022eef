/* test_server_pprof.h: builds pprof messages for the server's tests with
 * protobuf-c, with what Sonde's own writer never writes -- any string and
 * numeric labels, any sample types and period -- so that the ingest split
 * can be checked against exact truths. A stack is given root first
 * ("main;run;hot_a"); labels as "comm=x,pid=#42" ('#' marks a number).
 * Included by tests/unit/test_server_*.c. */
#ifndef SONDE_TESTS_SERVER_PPROF_H
#define SONDE_TESTS_SERVER_PPROF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile/profile.pb-c.h"

struct tsample {
	const char *stack;
	int64_t values[4];
	const char *labels;
};

struct tpprof {
	const char *types[4][2]; /* sample types, type/unit */
	int ntypes;
	const char *period_type[2];
	int64_t period, time_ns, duration_ns;
};

struct tstrings {
	char **v;
	size_t n, cap;
};

static int64_t tstr(struct tstrings *t, const char *s)
{
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->v[i], s))
			return (int64_t)i;
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->v = realloc(t->v, t->cap * sizeof(*t->v));
	}
	t->v[t->n] = strdup(s);
	return (int64_t)t->n++;
}

/* A malloc()ed pprof (gzip-compressed when gz) of *len bytes. */
static uint8_t *make_pprof(const struct tpprof *tp, const struct tsample *ts, size_t n, bool gz,
			   size_t *len)
{
	Perftools__Profiles__Profile m = PERFTOOLS__PROFILES__PROFILE__INIT;
	Perftools__Profiles__ValueType vt[5], *vtp[4];
	Perftools__Profiles__Sample **samples = calloc(n + 1, sizeof(*samples));
	Perftools__Profiles__Function **funcs = NULL;
	Perftools__Profiles__Location **locs = NULL;
	size_t nfuncs = 0, i, j;
	struct tstrings t = {0};
	uint8_t *raw, *out;
	size_t rawlen;

	tstr(&t, "");
	for (i = 0; i < (size_t)tp->ntypes; i++) {
		perftools__profiles__value_type__init(&vt[i]);
		vt[i].type = tstr(&t, tp->types[i][0]);
		vt[i].unit = tstr(&t, tp->types[i][1]);
		vtp[i] = &vt[i];
	}
	m.n_sample_type = (size_t)tp->ntypes;
	m.sample_type = vtp;
	if (tp->period_type[0]) {
		perftools__profiles__value_type__init(&vt[4]);
		vt[4].type = tstr(&t, tp->period_type[0]);
		vt[4].unit = tstr(&t, tp->period_type[1]);
		m.period_type = &vt[4];
	}
	m.period = tp->period;
	m.time_nanos = tp->time_ns;
	m.duration_nanos = tp->duration_ns;

	for (i = 0; i < n; i++) {
		Perftools__Profiles__Sample *sm = calloc(1, sizeof(*sm));
		char *stack = strdup(ts[i].stack), *tok, *save = NULL, *names[512];
		size_t nn = 0;

		perftools__profiles__sample__init(sm);
		for (tok = strtok_r(stack, ";", &save); tok; tok = strtok_r(NULL, ";", &save))
			names[nn++] = tok;
		sm->n_location_id = nn;
		sm->location_id = calloc(nn + 1, sizeof(uint64_t));
		for (j = 0; j < nn; j++) {
			const char *name = names[nn - 1 - j]; /* leaf first */
			int64_t si = tstr(&t, name);
			size_t f;

			for (f = 0; f < nfuncs; f++)
				if (funcs[f]->name == si)
					break;
			if (f == nfuncs) {
				Perftools__Profiles__Function *fm = calloc(1, sizeof(*fm));
				Perftools__Profiles__Location *lm = calloc(1, sizeof(*lm));
				Perftools__Profiles__Line *line = calloc(1, sizeof(*line));

				perftools__profiles__function__init(fm);
				perftools__profiles__location__init(lm);
				perftools__profiles__line__init(line);
				fm->id = f + 1;
				fm->name = si;
				fm->filename = tstr(&t, "/usr/bin/app");
				line->function_id = f + 1;
				lm->id = f + 1;
				lm->address = 0x1000 + f;
				lm->n_line = 1;
				lm->line = calloc(1, sizeof(*lm->line));
				lm->line[0] = line;
				funcs = realloc(funcs, (nfuncs + 1) * sizeof(*funcs));
				locs = realloc(locs, (nfuncs + 1) * sizeof(*locs));
				funcs[nfuncs] = fm;
				locs[nfuncs] = lm;
				nfuncs++;
			}
			sm->location_id[j] = f + 1;
		}
		free(stack);
		sm->n_value = (size_t)tp->ntypes;
		sm->value = calloc(4, sizeof(int64_t));
		memcpy(sm->value, ts[i].values, sizeof(int64_t) * (size_t)tp->ntypes);
		if (ts[i].labels && *ts[i].labels) {
			char *ls = strdup(ts[i].labels), *pair, *s2 = NULL;

			for (pair = strtok_r(ls, ",", &s2); pair; pair = strtok_r(NULL, ",", &s2)) {
				Perftools__Profiles__Label *l = calloc(1, sizeof(*l));
				char *eq = strchr(pair, '=');

				perftools__profiles__label__init(l);
				*eq = '\0';
				l->key = tstr(&t, pair);
				if (eq[1] == '#')
					l->num = strtoll(eq + 2, NULL, 10);
				else
					l->str = tstr(&t, eq + 1);
				sm->label =
					realloc(sm->label, (sm->n_label + 1) * sizeof(*sm->label));
				sm->label[sm->n_label++] = l;
			}
			free(ls);
		}
		samples[i] = sm;
	}
	m.n_sample = n;
	m.sample = samples;
	m.n_function = nfuncs;
	m.function = funcs;
	m.n_location = nfuncs;
	m.location = locs;
	m.n_string_table = t.n;
	m.string_table = t.v;

	rawlen = perftools__profiles__profile__get_packed_size(&m);
	raw = malloc(rawlen + 1);
	perftools__profiles__profile__pack(&m, raw);
	if (gz) {
		z_stream zs;
		size_t cap = compressBound(rawlen) + 64;

		memset(&zs, 0, sizeof(zs));
		out = malloc(cap);
		deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
		zs.next_in = raw;
		zs.avail_in = (uInt)rawlen;
		zs.next_out = out;
		zs.avail_out = (uInt)cap;
		deflate(&zs, Z_FINISH);
		*len = cap - zs.avail_out;
		deflateEnd(&zs);
		free(raw);
	} else {
		out = raw;
		*len = rawlen;
	}

	for (i = 0; i < n; i++) {
		for (j = 0; j < samples[i]->n_label; j++)
			free(samples[i]->label[j]);
		free(samples[i]->label);
		free(samples[i]->location_id);
		free(samples[i]->value);
		free(samples[i]);
	}
	free(samples);
	for (i = 0; i < nfuncs; i++) {
		free(locs[i]->line[0]);
		free(locs[i]->line);
		free(locs[i]);
		free(funcs[i]);
	}
	free(funcs);
	free(locs);
	for (i = 0; i < t.n; i++)
		free(t.v[i]);
	free(t.v);
	return out;
}

/* Sonde's CPU profile shape: [samples/count, cpu/nanoseconds], 99 Hz. */
static const struct tpprof tp_cpu = {
	.types = {{"samples", "count"}, {"cpu", "nanoseconds"}},
	.ntypes = 2,
	.period_type = {"cpu", "nanoseconds"},
	.period = 10101010,
	.time_ns = 1795337820000000000LL,
	.duration_ns = 10000000000LL,
};

#endif
