/* gpu_discover.c: attaches the GPU probes to CUDA and NCCL libraries before
 * any process maps them -- where the dynamic loader would find them (the
 * directories of /etc/ld.so.conf, the default ones, the CUDA toolkit's,
 * LD_LIBRARY_PATH), and those a given program links, as its own loader
 * resolves them. A uprobe belongs to the file, so a program started later
 * is traced from its very first call. Libraries elsewhere (a Python
 * wheel's, a container's) are attached when a process maps them (see
 * gpu_probes.h). Used by the agent and `sonde record --gpu`. */
#include "symbolize/elf.h"
#include "probe/gpu_probes.h"
#include "probe/libscan.h"
#include "common/clock.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_DIRS 256
#define MAX_CONF_LINES 4096
#define MAX_CONF_DEPTH 4
#define LIST_MAX_BYTES (1u << 20) /* of the loader's list of libraries */
#define LIST_TIMEOUT_MS 10000	  /* for the loader to list them */

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

			if (libscan_classify(de->d_name) &&
			    snprintf(path, sizeof(path), "%s/%s", d.v[i], de->d_name) <
				    (int)sizeof(path))
				attached += gpu_probes__attach_path(gp, path) > 0;
		}
		closedir(dir);
	}
	for (int i = 0; i < d.n; i++)
		free(d.v[i]);
	return attached;
}

/* The program the kernel runs for exe: exe itself, or the interpreter of a
 * "#!" script ("#!/usr/bin/env NAME" resolved on PATH). Into out. */
static int script_interpreter(const char *exe, char *out, size_t size)
{
	char line[PATH_MAX + 8], *p, *arg;
	FILE *f = fopen(exe, "re");

	if (!f)
		return -errno;
	p = fgets(line, sizeof(line), f);
	fclose(f);
	if (!p || strncmp(line, "#!", 2))
		return snprintf(out, size, "%s", exe) < (int)size ? 0 : -ENAMETOOLONG;
	p = line + 2 + strspn(line + 2, " \t");
	p[strcspn(p, " \t\n")] = 0;
	arg = p + strlen(p) + 1;
	if (strcmp(p, "/usr/bin/env") && strcmp(p, "/bin/env"))
		return snprintf(out, size, "%s", p) < (int)size ? 0 : -ENAMETOOLONG;
	/* env's first argument that is not an option. */
	arg += strspn(arg, " \t");
	while (*arg == '-')
		arg += strcspn(arg, " \t\n"), arg += strspn(arg, " \t");
	arg[strcspn(arg, " \t\n")] = 0;
	if (!*arg)
		return -ENOEXEC;
	for (const char *dir = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin"; *dir;) {
		size_t n = strcspn(dir, ":");

		if (snprintf(out, size, "%.*s/%s", (int)n, dir, arg) < (int)size &&
		    !access(out, X_OK))
			return 0;
		dir += n + (dir[n] == ':');
	}
	return -ENOENT;
}

/* Runs "LOADER --list EXE" (glibc's ldd) and reads what it prints, at most
 * LIST_MAX_BYTES within LIST_TIMEOUT_MS. The loader maps the libraries the
 * way it will when the program runs, and runs none of their code. A
 * malloc()ed NUL-terminated text, or NULL. */
static char *loader_list(const char *loader, const char *exe)
{
	char *buf = NULL;
	size_t len = 0;
	uint64_t deadline = mono_ms() + LIST_TIMEOUT_MS;
	int pipefd[2], status;
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC))
		return NULL;
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		return NULL;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

		dup2(pipefd[1], STDOUT_FILENO);
		if (devnull >= 0) {
			dup2(devnull, STDIN_FILENO);
			dup2(devnull, STDERR_FILENO);
		}
		execl(loader, loader, "--list", exe, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	buf = malloc(LIST_MAX_BYTES + 1);
	while (buf && len < LIST_MAX_BYTES) {
		struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
		uint64_t now = mono_ms();
		ssize_t n;

		if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
			break;
		n = read(pipefd[0], buf + len, LIST_MAX_BYTES - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(pipefd[0]);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if (buf)
		buf[len] = 0;
	return buf;
}

int libscan_needed(const char *exe, libscan_path_fn fn, void *ctx)
{
	char prog[PATH_MAX], loader[PATH_MAX];
	char *list, *line, *save = NULL;
	int err, n = 0;

	err = script_interpreter(exe, prog, sizeof(prog));
	if (err)
		return err == -ENOENT ? 0 : err;
	fn(ctx, prog);
	n = 1;
	err = elf_read_interp(prog, loader, sizeof(loader));
	if (err) {
		/* A static program has no libraries to find. */
		if (err != -ENOENT)
			pr_debug("can't find the loader of %s: %s", exe, strerror(-err));
		return err == -ENOENT ? n : err;
	}
	fn(ctx, loader);
	n++;
	list = loader_list(loader, prog);
	if (!list)
		return -EIO;
	/* "\tlibcudart.so.13 => /path/libcudart.so.13 (0x...)" */
	for (line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *path = strstr(line, "=> "), *end;

		if (!path)
			continue;
		path += 3;
		end = strstr(path, " (");
		if (end)
			*end = 0;
		if (path[0] == '/') {
			fn(ctx, path);
			n++;
		}
	}
	free(list);
	return n;
}

struct attach_needed {
	struct gpu_probes *gp;
	int attached;
};

static void attach_needed_lib(void *ctx, const char *path)
{
	struct attach_needed *an = ctx;

	if (libscan_classify(path))
		an->attached += gpu_probes__attach_path(an->gp, path) > 0;
}

int gpu_probes__attach_needed(struct gpu_probes *gp, const char *exe)
{
	struct attach_needed an = {gp, 0};
	int err = libscan_needed(exe, attach_needed_lib, &an);

	if (err < 0)
		return err;
	if (an.attached)
		pr_debug("GPU probes: attached to %d libraries %s links", an.attached, exe);
	return an.attached;
}
