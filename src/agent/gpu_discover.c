/* gpu_discover.c: attaches the GPU probes to the CUDA and NCCL libraries
 * where the dynamic loader would find them -- the directories of
 * /etc/ld.so.conf, the default ones, the CUDA toolkit's, LD_LIBRARY_PATH --
 * before any process maps them. A uprobe belongs to the file, so a program
 * started later is traced from its very first call. Libraries elsewhere
 * (a Python wheel's, a container's) are found when a process maps them (see
 * gpu_probes.h). Used by the agent and `sonde record --gpu`. */
#include "agent/gpu_probes.h"
#include "agent/libscan.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIRS 256
#define MAX_CONF_LINES 4096
#define MAX_CONF_DEPTH 4

struct dirs {
	char *v[MAX_DIRS];
	int n;
};

static void add_dir(struct dirs *d, const char *dir)
{
	char real[PATH_MAX];

	if (!dir || !*dir || d->n == MAX_DIRS || !realpath(dir, real))
		return;
	for (int i = 0; i < d->n; i++)
		if (!strcmp(d->v[i], real))
			return;
	d->v[d->n] = strdup(real);
	if (d->v[d->n])
		d->n++;
}

static void add_path_list(struct dirs *d, const char *list)
{
	char *copy, *tok, *save = NULL;

	if (!list)
		return;
	copy = strdup(list);
	if (!copy)
		return;
	for (tok = strtok_r(copy, ":;", &save); tok; tok = strtok_r(NULL, ":;", &save))
		add_dir(d, tok);
	free(copy);
}

/* ld.so.conf: one directory per line, `include GLOB` lines, # comments. */
static void read_ld_conf(struct dirs *d, const char *path, int depth)
{
	char line[PATH_MAX + 16];
	int lines = 0;
	FILE *f;

	if (depth > MAX_CONF_DEPTH)
		return;
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && lines++ < MAX_CONF_LINES) {
		char *s = line, *e;

		s[strcspn(s, "#\n")] = 0;
		while (*s == ' ' || *s == '\t')
			s++;
		for (e = s + strlen(s); e > s && (e[-1] == ' ' || e[-1] == '\t'); e--)
			;
		*e = 0;
		if (!*s)
			continue;
		if (!strncmp(s, "include", 7) && (s[7] == ' ' || s[7] == '\t')) {
			glob_t g;

			s += 8;
			while (*s == ' ' || *s == '\t')
				s++;
			if (!glob(s, GLOB_NOSORT, NULL, &g)) {
				for (size_t i = 0; i < g.gl_pathc; i++)
					read_ld_conf(d, g.gl_pathv[i], depth + 1);
				globfree(&g);
			}
			continue;
		}
		add_dir(d, s);
	}
	fclose(f);
}

static void add_glob(struct dirs *d, const char *pattern)
{
	glob_t g;

	if (glob(pattern, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g))
		return;
	for (size_t i = 0; i < g.gl_pathc; i++)
		add_dir(d, g.gl_pathv[i]);
	globfree(&g);
}

int gpu_probes__attach_known(struct gpu_probes *gp)
{
	static const char *const defaults[] = {
		"/lib",
		"/usr/lib",
		"/lib64",
		"/usr/lib64",
		"/usr/local/lib",
		"/lib/x86_64-linux-gnu",
		"/usr/lib/x86_64-linux-gnu",
	};
	struct dirs d = {0};
	int attached = 0;

	add_path_list(&d, getenv("LD_LIBRARY_PATH"));
	read_ld_conf(&d, "/etc/ld.so.conf", 0);
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
		add_dir(&d, defaults[i]);
	add_dir(&d, getenv("CUDA_HOME"));
	add_glob(&d, "/usr/local/cuda/lib64");
	add_glob(&d, "/usr/local/cuda-*/lib64");
	add_glob(&d, "/usr/local/cuda/targets/*/lib");
	for (int i = 0; i < d.n; i++) {
		DIR *dir = opendir(d.v[i]);
		struct dirent *de;

		if (!dir)
			continue;
		while ((de = readdir(dir))) {
			char path[PATH_MAX];
			int err;

			if (!libscan_classify(de->d_name))
				continue;
			if (snprintf(path, sizeof(path), "%s/%s", d.v[i], de->d_name) >=
			    (int)sizeof(path))
				continue;
			err = gpu_probes__attach_path(gp, path);
			if (err > 0)
				attached++;
			else if (err < 0 && err != -ENODATA)
				pr_debug("can't attach to %s: %s", path, strerror(-err));
		}
		closedir(dir);
	}
	for (int i = 0; i < d.n; i++)
		free(d.v[i]);
	return attached;
}
