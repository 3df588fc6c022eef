/* speedscope.c: writes a profile as speedscope JSON
 * (https://www.speedscope.app/file-format-schema.json) for
 * `sonde record -o x.speedscope.json`: one shared frame table and one
 * "sampled" profile per process, so speedscope's profile picker lists the
 * processes by "comm (pid)". */
#include "profile/profile.h"
#include "profile/profile_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sat.h"

#define SPEEDSCOPE_SCHEMA "https://www.speedscope.app/file-format-schema.json"

/* A JSON string for s; jansson wants UTF-8, and a symbol or comm that isn't
 * gets its non-ASCII bytes replaced by '?' rather than failing the write. */
static json_t *json_str(const char *s)
{
	json_t *j = json_string(s);
	char *copy;
	size_t i;

	if (j)
		return j;
	copy = strdup(s);
	if (!copy)
		return NULL;
	for (i = 0; copy[i]; i++)
		if ((unsigned char)copy[i] >= 0x80)
			copy[i] = '?';
	j = json_string(copy);
	free(copy);
	return j;
}

/* Fills loc_frame[] with each location's frame index and returns the
 * "shared" object in *out: one frame per function and line of the
 * profile, speedscope's frames having a line each. */
static int build_frames(const struct profile *p, uint32_t *loc_frame, json_t **out)
{
	struct prof_func *funcs = NULL;
	json_t *shared = NULL, *frames;
	ssize_t nframes = 0, i;
	int err = 0;

	funcs = calloc(p->nlocs ? p->nlocs : 1, sizeof(*funcs));
	shared = json_object();
	frames = json_array();
	if (!funcs || !shared || json_object_set_new(shared, "frames", frames)) {
		err = -ENOMEM;
		goto cleanup;
	}
	nframes = profile__functions(p, funcs, loc_frame, true);
	if (nframes < 0) {
		err = (int)nframes;
		goto cleanup;
	}
	for (i = 0; i < nframes; i++) {
		json_t *frame = json_object();
		/* The source file and the frame's line (else its function's
		 * first) where known, else the module. */
		uint32_t file = funcs[i].file ? funcs[i].file : funcs[i].module;
		uint32_t line = funcs[i].line ? funcs[i].line : funcs[i].start_line;

		if (json_array_append_new(frames, frame) ||
		    json_object_set_new(frame, "name", json_str(profile__str(p, funcs[i].name))) ||
		    (file && json_object_set_new(frame, "file", json_str(profile__str(p, file)))) ||
		    (line && json_object_set_new(frame, "line", json_integer(line)))) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	*out = shared;
	shared = NULL;

cleanup:
	json_decref(shared);
	free(funcs);
	return err;
}

struct pid_sample {
	uint32_t pid, idx;
};

static int pid_sample__cmp(const void *a, const void *b)
{
	const struct pid_sample *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The "sampled" profile of one process: samples ps[0..n), all of one pid. */
static int build_process(const struct profile *p, const struct pid_sample *ps, size_t n,
			 const uint32_t *loc_frame, json_t **out)
{
	const char *comm = profile__str(p, p->samples[ps[0].idx].comm);
	json_t *prof = json_object(), *samples = json_array(), *weights = json_array();
	json_int_t total = 0;
	char name[256];
	size_t i, j;
	int err = 0, bad = 0;

	/* The process is named after its main thread when that was sampled. */
	for (i = 0; i < n; i++) {
		const struct prof_sample *s = &p->samples[ps[i].idx];

		if (s->tid == s->pid) {
			comm = profile__str(p, s->comm);
			break;
		}
	}
	/* Samples merged from many processes (a server's selection) have no
	 * pid: the name alone, or the profile's type. */
	if (ps[0].pid)
		snprintf(name, sizeof(name), "%s (%u)", *comm ? comm : "[unknown]", ps[0].pid);
	else
		snprintf(name, sizeof(name), "%s",
			 *comm		       ? comm
			 : p->type && *p->type ? p->type
					       : "profile");

	for (i = 0; i < n; i++)
		total = sat_add_i64(total, p->samples[ps[i].idx].count);
	if (!prof) {
		json_decref(samples);
		json_decref(weights);
		err = -ENOMEM;
		goto cleanup;
	}
	/* json_object_set_new() takes the value even when it fails, so every
	 * call runs and prof owns samples and weights from here on. */
	bad |= json_object_set_new(prof, "type", json_string("sampled"));
	bad |= json_object_set_new(prof, "name", json_str(name));
	bad |= json_object_set_new(prof, "unit", json_string("none"));
	bad |= json_object_set_new(prof, "startValue", json_integer(0));
	bad |= json_object_set_new(prof, "endValue", json_integer(total));
	bad |= json_object_set_new(prof, "samples", samples);
	bad |= json_object_set_new(prof, "weights", weights);
	if (bad) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++) {
		const struct prof_sample *s = &p->samples[ps[i].idx];
		json_t *stack = json_array();

		if (json_array_append_new(samples, stack) ||
		    json_array_append_new(weights, json_integer(s->count))) {
			err = -ENOMEM;
			goto cleanup;
		}
		/* speedscope wants the root first; ours are leaf first. */
		for (j = s->nlocs; j-- > 0;) {
			if (json_array_append_new(stack, json_integer(loc_frame[s->locs[j]]))) {
				err = -ENOMEM;
				goto cleanup;
			}
		}
	}
	*out = prof;
	prof = NULL;

cleanup:
	json_decref(prof);
	return err;
}

static int dump(json_t *j, FILE *f)
{
	return json_dumpf(j, f, JSON_COMPACT | JSON_ENCODE_ANY) ? -EIO : 0;
}

/* The envelope is written by hand and each part (the shared frames, then one
 * process at a time) is built with jansson and dumped on its own, so memory
 * holds one process's samples as JSON at a time, not the whole profile. */
int profile__write_speedscope(const struct profile *p, FILE *f)
{
	struct pid_sample *order = NULL;
	uint32_t *loc_frame = NULL;
	json_t *shared = NULL, *name = NULL, *prof = NULL;
	size_t i, start;
	int err = 0;

	loc_frame = calloc(p->nlocs ? p->nlocs : 1, sizeof(*loc_frame));
	order = calloc(p->nsamples ? p->nsamples : 1, sizeof(*order));
	name = json_str(p->type && *p->type ? p->type : "sonde");
	if (!loc_frame || !order || !name) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = build_frames(p, loc_frame, &shared);
	if (err)
		goto cleanup;

	fputs("{\"$schema\":\"" SPEEDSCOPE_SCHEMA "\",\"exporter\":\"sonde\",\"name\":", f);
	err = dump(name, f);
	if (err)
		goto cleanup;
	fputs(",\"activeProfileIndex\":0,\"shared\":", f);
	err = dump(shared, f);
	if (err)
		goto cleanup;
	fputs(",\"profiles\":[", f);

	for (i = 0; i < p->nsamples; i++)
		order[i] = (struct pid_sample){p->samples[i].pid, i};
	if (p->nsamples)
		qsort(order, p->nsamples, sizeof(*order), pid_sample__cmp);
	for (start = 0; start < p->nsamples; start = i) {
		for (i = start; i < p->nsamples && order[i].pid == order[start].pid; i++)
			;
		err = build_process(p, &order[start], i - start, loc_frame, &prof);
		if (err)
			goto cleanup;
		if (start)
			fputc(',', f);
		err = dump(prof, f);
		json_decref(prof);
		prof = NULL;
		if (err)
			goto cleanup;
	}
	fputs("]}\n", f);
	if (fflush(f) || ferror(f))
		err = -EIO;

cleanup:
	json_decref(prof);
	json_decref(shared);
	json_decref(name);
	free(order);
	free(loc_frame);
	return err;
}
