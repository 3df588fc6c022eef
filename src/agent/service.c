/* service.c: service names from --service-by rules and what /proc says of
 * each process, cached per pid. See service.h. */
#include "agent/service.h"
#include "common/htable.h"
#include "common/log.h"
#include "common/text.h"
#include "common/utf8.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>
#include <unistd.h>

#define MAX_PIDS 65536	    /* processes whose service is kept */
#define MAX_ENV_NAME 128    /* bytes of an env: rule's variable name */
#define MALFORMED_LOGGED 10 /* malformed files logged, then only counted */

#define MAX_ARGS 256	      /* arguments of a command line looked at */
#define PF_KTHREAD 0x00200000 /* a kernel thread, in /proc/PID/stat's flags */

enum rule_kind { RULE_ENV, RULE_SCRIPT, RULE_UNIT, RULE_CGROUP, RULE_PROCESS };

struct rule {
	enum rule_kind kind;
	char env[MAX_ENV_NAME + 1]; /* RULE_ENV: the variable */
};

/* What /proc said of a process: the rule that yielded its name. */
struct svc_ent {
	UT_hash_handle hh;
	uint32_t pid;
	int rule; /* index into rules; -1: none (process rules are read per call) */
	bool exited;
	bool kernel;			  /* a kernel thread */
	char comm[16];			  /* the process's name when /proc was read */
	char value[SERVICE_NAME_MAX + 1]; /* of an env, script, unit or cgroup rule */
	char full[SERVICE_NAME_MAX + 1];  /* its whole name where comm is cut, or "" */
	char *labels;			  /* its job's labels (service_namer__labels), or NULL */
};

struct service_namer {
	struct rule rules[SERVICE_MAX_RULES];
	int nrules;
	struct svc_ent *ents;
	size_t nents;
	struct svc_ent scratch; /* a process past MAX_PIDS, resolved per call */
	char *env_buf, *cg_buf, *cmd_buf;
	struct service_namer_stats st;
};

/* ---- the rules ---- */

static bool env_name_valid(const char *s, size_t n)
{
	if (!n || n > MAX_ENV_NAME ||
	    !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/* Parses spec into rules (may be NULL: check only). 0 or -EINVAL. */
static int parse_spec(const char *spec, struct rule *rules, int *nrules, char *err, size_t errlen)
{
	const char *p = spec;
	int n = 0;

	if (!spec || !*spec) {
		snprintf(err, errlen,
			 "--service-by is empty: expected a comma list of env:NAME, "
			 "script, unit, cgroup and process");
		return -EINVAL;
	}
	for (;;) {
		size_t len = strcspn(p, ",");
		struct rule r = {0};

		if (!len) {
			snprintf(
				err, errlen,
				"--service-by '%.200s' has an empty rule: expected a comma list of "
				"env:NAME, script, unit, cgroup and process",
				spec);
			return -EINVAL;
		}
		if (n == SERVICE_MAX_RULES) {
			snprintf(err, errlen, "--service-by has more than %d rules",
				 SERVICE_MAX_RULES);
			return -EINVAL;
		}
		if (len >= 4 && !strncmp(p, "env:", 4)) {
			if (!env_name_valid(p + 4, len - 4)) {
				snprintf(err, errlen,
					 "--service-by: '%.*s' is not an environment variable's "
					 "name ([A-Za-z_][A-Za-z0-9_]*, at most %d bytes)",
					 (int)(len - 4 > 200 ? 200 : len - 4), p + 4, MAX_ENV_NAME);
				return -EINVAL;
			}
			r.kind = RULE_ENV;
			memcpy(r.env, p + 4, len - 4);
		} else if (len == 6 && !strncmp(p, "script", 6)) {
			r.kind = RULE_SCRIPT;
		} else if (len == 4 && !strncmp(p, "unit", 4)) {
			r.kind = RULE_UNIT;
		} else if (len == 6 && !strncmp(p, "cgroup", 6)) {
			r.kind = RULE_CGROUP;
		} else if (len == 7 && !strncmp(p, "process", 7)) {
			r.kind = RULE_PROCESS;
		} else {
			snprintf(err, errlen,
				 "--service-by: unknown rule '%.*s': expected env:NAME, script, "
				 "unit, cgroup or process",
				 (int)(len > 200 ? 200 : len), p);
			return -EINVAL;
		}
		if (rules)
			rules[n] = r;
		n++;
		if (!p[len])
			break;
		p += len + 1;
	}
	if (nrules)
		*nrules = n;
	return 0;
}

int service_spec_check(const char *spec, char *err, size_t errlen)
{
	return parse_spec(spec, NULL, NULL, err, errlen);
}

/* ---- the parsers ---- */

/* Whether s[0..n) can be a label's value: UTF-8 without control
 * characters. */
static bool text_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return utf8_valid(s, n);
}

int service_environ_value(const char *buf, size_t len, const char *name, char *out, size_t outlen,
			  char *err, size_t errlen)
{
	size_t nlen = strlen(name), off = 0;

	while (off < len) {
		const char *e = buf + off, *end = memchr(e, '\0', len - off);
		size_t elen, vlen;

		if (!end)
			break; /* cut by the read's bound */
		elen = (size_t)(end - e);
		off += elen + 1;
		if (elen <= nlen || e[nlen] != '=' || memcmp(e, name, nlen))
			continue;
		/* The first one is getenv()'s. */
		vlen = elen - nlen - 1;
		if (!vlen)
			return 0;
		if (vlen >= outlen) {
			snprintf(err, errlen, "%s has a value of %zu bytes: at most %zu", name,
				 vlen, outlen - 1);
			return -EINVAL;
		}
		if (!text_ok(e + nlen + 1, vlen)) {
			snprintf(err, errlen,
				 "%s has a value that is not UTF-8 text (a control character or "
				 "an invalid byte)",
				 name);
			return -EINVAL;
		}
		memcpy(out, e + nlen + 1, vlen);
		out[vlen] = '\0';
		return 1;
	}
	return 0;
}

int service_parse_environ(const char *buf, size_t len, const char *name, char *out, size_t outlen,
			  char *err, size_t errlen)
{
	return service_environ_value(buf, len, name, out,
				     outlen < SERVICE_NAME_MAX + 1 ? outlen : SERVICE_NAME_MAX + 1,
				     err, errlen);
}

int service_parse_cgroup(const char *buf, size_t len, char *out, size_t outlen, char *err,
			 size_t errlen)
{
	static const char deleted[] = " (deleted)";
	size_t off = 0, lineno = 0;
	int found = 0;

	if (memchr(buf, '\0', len)) {
		snprintf(err, errlen, "a NUL byte in the cgroup file");
		return -EINVAL;
	}
	while (off < len) {
		const char *l = buf + off, *nl = memchr(l, '\n', len - off);
		size_t llen = nl ? (size_t)(nl - l) : len - off;
		const char *c1, *c2, *path;
		size_t plen;

		off += llen + 1;
		lineno++;
		if (!llen)
			continue;
		c1 = memchr(l, ':', llen);
		c2 = c1 ? memchr(c1 + 1, ':', llen - (size_t)(c1 + 1 - l)) : NULL;
		if (!c2 || c1 == l) {
			snprintf(err, errlen,
				 "line %zu of the cgroup file is not ID:CONTROLLERS:PATH", lineno);
			return -EINVAL;
		}
		for (const char *d = l; d < c1; d++)
			if (*d < '0' || *d > '9') {
				snprintf(err, errlen,
					 "line %zu of the cgroup file has a hierarchy ID that is "
					 "not a number",
					 lineno);
				return -EINVAL;
			}
		path = c2 + 1;
		plen = llen - (size_t)(path - l);
		if (!plen || *path != '/') {
			snprintf(err, errlen,
				 "line %zu of the cgroup file has a path that does not start "
				 "with '/'",
				 lineno);
			return -EINVAL;
		}
		if (!text_ok(path, plen)) {
			snprintf(err, errlen,
				 "line %zu of the cgroup file has a path that is not UTF-8 text",
				 lineno);
			return -EINVAL;
		}
		/* The v2 hierarchy: ID 0 and no controllers. The lines after it
		 * are checked too: a file with a malformed line is not trusted. */
		if (found || c1 - l != 1 || *l != '0' || c2 != c1 + 1)
			continue;
		if (plen > strlen(deleted) &&
		    !memcmp(path + plen - strlen(deleted), deleted, strlen(deleted)))
			plen -= strlen(deleted);
		if (plen >= outlen) {
			snprintf(err, errlen, "the cgroup path is %zu bytes long: at most %zu",
				 plen, outlen ? outlen - 1 : 0);
			return -EINVAL;
		}
		memcpy(out, path, plen);
		out[plen] = '\0';
		found = 1;
	}
	return found;
}

/* Copies component [s, s + n) into out when it fits a name. */
static int put_name(const char *s, size_t n, char *out, size_t outlen)
{
	if (!n || n > SERVICE_NAME_MAX || n >= outlen)
		return 0;
	memcpy(out, s, n);
	out[n] = '\0';
	return 1;
}

int service_unit_of(const char *path, char *out, size_t outlen)
{
	static const char suffix[] = ".service";
	const size_t slen = sizeof(suffix) - 1;
	const char *p = path, *best = NULL;
	size_t best_len = 0;

	while (*p) {
		size_t n = strcspn(p, "/");

		if (n > slen && !memcmp(p + n - slen, suffix, slen)) {
			best = p;
			best_len = n - slen;
		}
		p += n;
		if (*p)
			p++;
	}
	return best ? put_name(best, best_len, out, outlen) : 0;
}

int service_cgroup_leaf(const char *path, char *out, size_t outlen)
{
	size_t n = strlen(path);
	const char *slash;

	while (n && path[n - 1] == '/')
		n--;
	if (!n)
		return 0;
	slash = memrchr(path, '/', n);
	if (slash)
		return put_name(slash + 1, n - (size_t)(slash + 1 - path), out, outlen);
	return put_name(path, n, out, outlen);
}

/* ---- command lines ---- */

/* Splits cmdline into at most max arguments, pointers into it; a last one
 * without its NUL is left out. The count. */
static size_t split_args(const char *buf, size_t len, const char **argv, size_t max)
{
	size_t n = 0, off = 0;

	while (off < len && n < max) {
		const char *a = buf + off, *end = memchr(a, '\0', len - off);

		if (!end)
			break;
		argv[n++] = a;
		off += (size_t)(end - a) + 1;
	}
	return n;
}

/* Whether name is stem followed by nothing but a version (3, 3.11, 5.36). */
static bool versioned(const char *name, const char *stem)
{
	size_t n = strlen(stem);

	if (strncmp(name, stem, n))
		return false;
	for (name += n; *name; name++)
		if (!((*name >= '0' && *name <= '9') || *name == '.'))
			return false;
	return true;
}

enum interp { INTERP_NONE, INTERP_PYTHON, INTERP_NODE, INTERP_JAVA, INTERP_OTHER };

static enum interp interp_of(const char *argv0)
{
	static const char *const others[] = {"ruby", "perl", "php", "bash", "sh", "dash", "zsh"};
	const char *b = path_base(argv0);

	if (versioned(b, "python") || versioned(b, "pypy"))
		return INTERP_PYTHON;
	if (!strcmp(b, "node") || !strcmp(b, "nodejs"))
		return INTERP_NODE;
	if (!strcmp(b, "java"))
		return INTERP_JAVA;
	for (size_t i = 0; i < sizeof(others) / sizeof(*others); i++)
		if (versioned(b, others[i]))
			return INTERP_OTHER;
	return INTERP_NONE;
}

/* name (what follows its last '/') as the rule's value: 1 if it fits and
 * is text. */
static int put_text(const char *name, char *out, size_t outlen)
{
	size_t n;

	name = path_base(name);
	n = strlen(name);

	if (!n || !text_ok(name, n))
		return 0;
	return put_name(name, n, out, outlen);
}

/* torchrun and torch.distributed's launchers run a training script: the
 * first of their arguments (from i on) that is a .py file. */
static int launched_script(const char **argv, size_t n, size_t i, const char *launcher, char *out,
			   size_t outlen)
{
	for (; i < n; i++) {
		size_t len = strlen(argv[i]);

		if (argv[i][0] != '-' && len > 3 && !strcmp(argv[i] + len - 3, ".py"))
			return put_text(path_base(argv[i]), out, outlen);
	}
	return put_text(launcher, out, outlen);
}

static bool is_launcher_module(const char *m)
{
	return !strcmp(m, "torch.distributed.run") || !strcmp(m, "torch.distributed.launch");
}

static int python_script(const char **argv, size_t n, char *out, size_t outlen)
{
	for (size_t i = 1; i < n; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--") && i + 1 < n)
			a = argv[++i];
		else if (a[0] == '-' && a[1] == '-')
			continue; /* --version, --help: no script either way */
		if (a[0] != '-') {
			if (!strcmp(path_base(a), "torchrun"))
				return launched_script(argv, n, i + 1, "torchrun", out, outlen);
			return put_text(path_base(a), out, outlen);
		}
		if (!a[1])
			return 0; /* "-": the script on stdin */
		/* A cluster of one-letter options; -c, -m, -W and -X take a value. */
		for (const char *c = a + 1; *c; c++) {
			const char *v;

			if (*c == 'c')
				return 0;
			if (*c != 'm' && *c != 'W' && *c != 'X')
				continue;
			v = c[1] ? c + 1 : i + 1 < n ? argv[++i] : NULL;
			if (*c == 'm')
				return !v ? 0
				       : is_launcher_module(v)
					       ? launched_script(argv, n, i + 1, v, out, outlen)
					       : put_text(v, out, outlen);
			break;
		}
	}
	return 0;
}

static int node_script(const char **argv, size_t n, char *out, size_t outlen)
{
	static const char *const with_value[] = {
		"-r",		"--require", "--import", "--loader", "--experimental-loader",
		"--conditions", "-C",	     "--title"};

	for (size_t i = 1; i < n; i++) {
		const char *a = argv[i];

		if (a[0] != '-')
			return put_text(path_base(a), out, outlen);
		if (!strcmp(a, "-e") || !strcmp(a, "--eval") || !strcmp(a, "-p") ||
		    !strcmp(a, "--print") || !strcmp(a, "-"))
			return 0;
		for (size_t k = 0; k < sizeof(with_value) / sizeof(*with_value); k++)
			if (!strcmp(a, with_value[k]))
				i++;
	}
	return 0;
}

static int java_main(const char **argv, size_t n, char *out, size_t outlen)
{
	static const char *const with_value[] = {"-cp", "-classpath",	 "--class-path",
						 "-p",	"--module-path", "--add-modules"};

	for (size_t i = 1; i < n; i++) {
		const char *a = argv[i], *dot;

		if (!strcmp(a, "-jar"))
			return i + 1 < n ? put_text(path_base(argv[i + 1]), out, outlen) : 0;
		if ((!strcmp(a, "-m") || !strcmp(a, "--module")) && i + 1 < n)
			a = argv[++i];
		else if (a[0] == '-') {
			for (size_t k = 0; k < sizeof(with_value) / sizeof(*with_value); k++)
				if (!strcmp(a, with_value[k]))
					i++;
			continue;
		}
		/* A main class (pkg.Main, module/pkg.Main): its simple name. */
		dot = strrchr(path_base(a), '.');
		return put_text(dot ? dot + 1 : path_base(a), out, outlen);
	}
	return 0;
}

static int other_script(const char **argv, size_t n, char *out, size_t outlen)
{
	for (size_t i = 1; i < n; i++) {
		const char *a = argv[i];

		if (a[0] != '-')
			return put_text(path_base(a), out, outlen);
		/* -c (shells), -e (ruby, perl), -r (php): code, not a script. */
		if (!strcmp(a, "-c") || !strcmp(a, "-e") || !strcmp(a, "-E") || !strcmp(a, "-r"))
			return 0;
	}
	return 0;
}

int service_script_of(const char *cmdline, size_t len, char *out, size_t outlen)
{
	const char *argv[MAX_ARGS];
	size_t n = split_args(cmdline, len, argv, MAX_ARGS);

	if (!n)
		return 0;
	switch (interp_of(argv[0])) {
	case INTERP_PYTHON:
		return python_script(argv, n, out, outlen);
	case INTERP_NODE:
		return node_script(argv, n, out, outlen);
	case INTERP_JAVA:
		return java_main(argv, n, out, outlen);
	case INTERP_OTHER:
		return other_script(argv, n, out, outlen);
	case INTERP_NONE:
		break;
	}
	return 0;
}

int service_full_name(const char *cmdline, size_t len, const char *comm, char *out, size_t outlen)
{
	const char *argv[1], *b;

	if (!comm || strlen(comm) < 15 || !split_args(cmdline, len, argv, 1))
		return 0;
	b = path_base(argv[0]);
	if (strncmp(b, comm, strlen(comm)) || !strcmp(b, comm))
		return 0;
	return put_text(b, out, outlen);
}

int service_stat_kthread(const char *buf, size_t len)
{
	const char *p = memrchr(buf, ')', len), *end = buf + len;
	unsigned long long flags;
	char field[32];
	int k = 0;

	if (!p)
		return -EINVAL;
	/* After the name: state, ppid, pgrp, session, tty_nr, tpgid, flags. */
	for (p++; p < end && k < 7; k++) {
		size_t n;

		while (p < end && *p == ' ')
			p++;
		n = 0;
		while (p + n < end && p[n] != ' ' && p[n] != '\n')
			n++;
		if (!n || n >= sizeof(field))
			return -EINVAL;
		memcpy(field, p, n);
		field[n] = '\0';
		p += n;
	}
	if (k < 7)
		return -EINVAL;
	for (const char *c = field; *c; c++)
		if (*c < '0' || *c > '9')
			return -EINVAL;
	flags = strtoull(field, NULL, 10);
	return !!(flags & PF_KTHREAD);
}

/* ---- job labels ---- */

/* Appends "name=value\n" to out (*n bytes used) when value can be a
 * label's; 1 if it did. */
static int add_label(char *out, size_t outlen, size_t *n, const char *name, const char *value)
{
	size_t nl = strlen(name), vl = strlen(value);

	if (!vl || vl > SERVICE_NAME_MAX || !text_ok(value, vl) || *n + nl + vl + 3 > outlen)
		return 0;
	memcpy(out + *n, name, nl);
	out[*n + nl] = '=';
	memcpy(out + *n + nl + 1, value, vl);
	out[*n + nl + 1 + vl] = '\n';
	*n += nl + vl + 2;
	out[*n] = '\0';
	return 1;
}

/* The value of the first of names set in the block, into v: whether one
 * is (a value that is not a label's counts as unset). */
static bool env_first(const char *env, size_t len, const char *const *names, char *v, size_t vlen)
{
	char err[160];

	for (; *names; names++)
		if (service_environ_value(env, len, *names, v, vlen, err, sizeof(err)) == 1)
			return true;
	return false;
}

int service_job_labels(const char *env, size_t len, char *out, size_t outlen)
{
	static const char *const slurm_job[] = {"SLURM_JOB_ID", NULL};
	static const char *const elastic[] = {"TORCHELASTIC_RUN_ID", NULL};
	static const char *const rank[] = {"RANK", "SLURM_PROCID", NULL};
	static const char *const local[] = {"LOCAL_RANK", "SLURM_LOCALID", NULL};
	static const char *const world[] = {"WORLD_SIZE", "SLURM_NTASKS", NULL};
	static const char *const maddr[] = {"MASTER_ADDR", NULL};
	static const char *const mport[] = {"MASTER_PORT", NULL};
	static const char *const k8s[] = {"KUBERNETES_SERVICE_HOST", NULL};
	static const char *const host[] = {"HOSTNAME", NULL};
	static const char *const ns[] = {"POD_NAMESPACE", NULL};
	char v[SERVICE_NAME_MAX + 1], r[SERVICE_NAME_MAX + 1], a[SERVICE_NAME_MAX + 1];
	size_t n = 0;
	int count = 0;
	bool ranked;

	if (!outlen)
		return 0;
	out[0] = '\0';
	ranked = env_first(env, len, rank, r, sizeof(r));
	if (env_first(env, len, slurm_job, v, sizeof(v)) ||
	    (env_first(env, len, elastic, v, sizeof(v)) && strcmp(v, "none")))
		count += add_label(out, outlen, &n, "job", v);
	else if (ranked && env_first(env, len, maddr, a, sizeof(a)) &&
		 env_first(env, len, mport, v, sizeof(v)) && strlen(a) + strlen(v) < sizeof(r)) {
		char job[2 * SERVICE_NAME_MAX + 2];

		snprintf(job, sizeof(job), "%s:%s", a, v);
		count += add_label(out, outlen, &n, "job", job);
	}
	if (ranked)
		count += add_label(out, outlen, &n, "rank", r);
	if (env_first(env, len, local, v, sizeof(v)))
		count += add_label(out, outlen, &n, "local_rank", v);
	if (env_first(env, len, world, v, sizeof(v)))
		count += add_label(out, outlen, &n, "world_size", v);
	if (env_first(env, len, k8s, v, sizeof(v)) && env_first(env, len, host, v, sizeof(v)))
		count += add_label(out, outlen, &n, "pod", v);
	if (env_first(env, len, ns, v, sizeof(v)))
		count += add_label(out, outlen, &n, "namespace", v);
	return count;
}

int service_container_id(const char *path, char *out, size_t outlen)
{
	static const char *const prefixes[] = {"docker-", "cri-containerd-", "crio-", "libpod-",
					       ""};
	const char *p = path;
	int found = 0;

	while (*p) {
		size_t n = strcspn(p, "/");

		for (size_t k = 0; k < sizeof(prefixes) / sizeof(*prefixes); k++) {
			size_t pl = strlen(prefixes[k]), i;
			const char *id = p + pl;

			if (n < pl + 64 || strncmp(p, prefixes[k], pl))
				continue;
			/* The id, then nothing or ".scope". */
			if (n != pl + 64 && (n != pl + 70 || strncmp(id + 64, ".scope", 6)))
				continue;
			for (i = 0; i < 64 && ((id[i] >= '0' && id[i] <= '9') ||
					       (id[i] >= 'a' && id[i] <= 'f'));
			     i++)
				;
			if (i == 64 && outlen > 12) {
				memcpy(out, id, 12);
				out[12] = '\0';
				found = 1;
			}
			break;
		}
		p += n;
		if (*p)
			p++;
	}
	return found;
}

/* ---- the namer ---- */

struct service_namer *service_namer__new(const char *spec, char *err, size_t errlen)
{
	struct service_namer *sn = xcalloc(1, sizeof(*sn));

	if (parse_spec(spec ? spec : SERVICE_BY_DEFAULT, sn->rules, &sn->nrules, err, errlen)) {
		free(sn);
		errno = EINVAL;
		return NULL;
	}
	/* Every process's environment and cgroup are read, for its job's
	 * labels, whatever the rules. */
	sn->env_buf = xmalloc(SERVICE_ENVIRON_MAX);
	sn->cg_buf = xmalloc(SERVICE_CGROUP_MAX);
	sn->cmd_buf = xmalloc(SERVICE_CMDLINE_MAX);
	return sn;
}

static void ent_free(struct svc_ent *e)
{
	free(e->labels);
	free(e);
}

void service_namer__free(struct service_namer *sn)
{
	if (!sn)
		return;
	HTABLE_CLEAR(hh, sn->ents, e, ent_free(e));
	free(sn->scratch.labels);
	free(sn->env_buf);
	free(sn->cg_buf);
	free(sn->cmd_buf);
	free(sn);
}

ssize_t service_read_proc(uint32_t pid, const char *file, char *buf, size_t cap)
{
	char path[64];
	size_t len = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/%s", pid, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (len < cap) {
		ssize_t n = read(fd, buf + len, cap - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;

			close(fd);
			return err;
		}
		if (!n)
			break;
		len += (size_t)n;
	}
	close(fd);
	return (ssize_t)len;
}

static void malformed(struct service_namer *sn, uint32_t pid, const char *file, const char *why)
{
	sn->st.malformed++;
	if (sn->st.malformed <= MALFORMED_LOGGED)
		pr_warn("can't name the service of pid %u from /proc/%u/%s: %s -- the next rule "
			"of --service-by names it%s",
			pid, pid, file, why,
			sn->st.malformed == MALFORMED_LOGGED ? " (further such files are counted, "
							       "not logged)"
							     : "");
}

/* The cgroup v2 path of pid into path; false when there is none. */
static bool cgroup_path(struct service_namer *sn, uint32_t pid, char *path, size_t size)
{
	char why[256];
	ssize_t len = service_read_proc(pid, "cgroup", sn->cg_buf, SERVICE_CGROUP_MAX);
	int rc;

	if (len < 0)
		return false; /* gone, or a kernel without cgroups */
	sn->st.reads++;
	rc = service_parse_cgroup(sn->cg_buf, (size_t)len, path, size, why, sizeof(why));
	if (rc < 0)
		malformed(sn, pid, "cgroup", why);
	return rc > 0;
}

/* /proc/PID/cmdline of e's process in sn->cmd_buf, read once per
 * resolve (*len: its length, or < 0). */
static ssize_t cmdline(struct service_namer *sn, struct svc_ent *e, bool *read, ssize_t *len)
{
	if (!*read) {
		*read = true;
		*len = service_read_proc(e->pid, "cmdline", sn->cmd_buf, SERVICE_CMDLINE_MAX);
		if (*len >= 0)
			sn->st.reads++;
	}
	return *len;
}

/* Whether pid is a kernel thread, from /proc/PID/stat. */
static bool kernel_thread(struct service_namer *sn, uint32_t pid)
{
	char buf[1024];
	ssize_t n = service_read_proc(pid, "stat", buf, sizeof(buf));
	int k;

	if (n <= 0)
		return false;
	sn->st.reads++;
	k = service_stat_kthread(buf, (size_t)n);
	if (k < 0)
		malformed(sn, pid, "stat", "no flags field after the name");
	return k > 0;
}

/* Whether labels (service_job_labels' lines) have one named name. */
static bool has_label(const char *labels, const char *name)
{
	struct label_line ll;

	while (label_line__next(&labels, &ll))
		if (ll.name_len == strlen(name) && !memcmp(ll.name, name, ll.name_len))
			return true;
	return false;
}

/* e's job labels from its environment (env_len bytes in sn->env_buf, or
 * < 0), its cgroup path (NULL: none) and, in a pod that does not say its
 * namespace, its service account's namespace file. */
static void job_labels(struct service_namer *sn, struct svc_ent *e, ssize_t env_len,
		       const char *cgpath)
{
	char out[SERVICE_LABELS_MAX], id[16], ns[256];
	int count = 0;
	size_t n;

	out[0] = '\0';
	if (env_len > 0)
		count = service_job_labels(sn->env_buf, (size_t)env_len, out, sizeof(out));
	n = strlen(out);
	if (cgpath && service_container_id(cgpath, id, sizeof(id)))
		count += add_label(out, sizeof(out), &n, "container_id", id);
	if (has_label(out, "pod") && !has_label(out, "namespace")) {
		ssize_t len = service_read_proc(
			e->pid, "root/var/run/secrets/kubernetes.io/serviceaccount/namespace", ns,
			sizeof(ns) - 1);

		if (len > 0) {
			sn->st.reads++;
			ns[len] = '\0';
			ns[strcspn(ns, "\n")] = '\0';
			count += add_label(out, sizeof(out), &n, "namespace", ns);
		}
	}
	free(e->labels);
	e->labels = count ? xstrdup(out) : NULL;
}

/* Reads what the rules need of pid into e: the first /proc rule that
 * yields, up to the first process rule when comm names the process; and
 * its job's labels. */
static void resolve(struct service_namer *sn, struct svc_ent *e, const char *comm)
{
	char path[4096], why[256];
	bool have_cg, cmd_read = false;
	ssize_t env_len, cmd_len = 0;
	int rc;

	e->rule = -1;
	e->full[0] = '\0';
	free(e->labels);
	e->labels = NULL;
	e->kernel = kernel_thread(sn, e->pid);
	if (e->kernel)
		return;
	env_len = service_read_proc(e->pid, "environ", sn->env_buf, SERVICE_ENVIRON_MAX);
	if (env_len >= 0)
		sn->st.reads++;
	have_cg = cgroup_path(sn, e->pid, path, sizeof(path));
	job_labels(sn, e, env_len, have_cg ? path : NULL);
	for (int i = 0; i < sn->nrules; i++) {
		const struct rule *r = &sn->rules[i];

		rc = 0;
		switch (r->kind) {
		case RULE_PROCESS:
			if (!comm || !*comm)
				continue;
			/* The kernel keeps 15 bytes of a name: the whole one. */
			if (strlen(comm) >= 15 && cmdline(sn, e, &cmd_read, &cmd_len) > 0)
				service_full_name(sn->cmd_buf, (size_t)cmd_len, comm, e->full,
						  sizeof(e->full));
			return;
		case RULE_SCRIPT:
			if (cmdline(sn, e, &cmd_read, &cmd_len) <= 0)
				continue;
			rc = service_script_of(sn->cmd_buf, (size_t)cmd_len, e->value,
					       sizeof(e->value));
			break;
		case RULE_ENV:
			if (env_len <= 0)
				continue;
			rc = service_parse_environ(sn->env_buf, (size_t)env_len, r->env, e->value,
						   sizeof(e->value), why, sizeof(why));
			if (rc < 0)
				malformed(sn, e->pid, "environ", why);
			break;
		case RULE_UNIT:
		case RULE_CGROUP:
			if (!have_cg)
				continue;
			rc = r->kind == RULE_UNIT
				     ? service_unit_of(path, e->value, sizeof(e->value))
				     : service_cgroup_leaf(path, e->value, sizeof(e->value));
			break;
		}
		if (rc > 0) {
			e->rule = i;
			return;
		}
	}
}

const char *service_namer__name(struct service_namer *sn, uint32_t pid, const char *comm)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	/* Another name: the process exec'ed (its record may not have come
	 * yet, or was lost), or renamed itself; read it again. */
	if (e && strncmp(e->comm, comm ? comm : "", sizeof(e->comm) - 1)) {
		service_namer__forget(sn, pid);
		e = NULL;
	}
	if (!e) {
		if (sn->nents < MAX_PIDS) {
			e = xcalloc(1, sizeof(*e));
			e->pid = pid;
			HASH_ADD(hh, sn->ents, pid, sizeof(e->pid), e);
			sn->nents++;
		} else {
			e = &sn->scratch;
			e->pid = pid;
		}
		snprintf(e->comm, sizeof(e->comm), "%s", comm ? comm : "");
		resolve(sn, e, comm);
	}
	if (e->kernel)
		return SERVICE_KERNEL;
	/* The rules in order: those /proc answered are in e, the process
	 * rules answer from comm (whole where /proc had it). */
	for (int i = 0; i < sn->nrules; i++) {
		if (i == e->rule)
			return e->value;
		if (sn->rules[i].kind == RULE_PROCESS && comm && *comm)
			return e->full[0] ? e->full : comm;
	}
	return NULL;
}

const char *service_namer__labels(struct service_namer *sn, uint32_t pid)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	if (!e && sn->scratch.pid == pid)
		e = &sn->scratch;
	return e && e->labels ? e->labels : "";
}

void service_namer__forget(struct service_namer *sn, uint32_t pid)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	if (!e)
		return;
	HASH_DEL(sn->ents, e);
	sn->nents--;
	ent_free(e);
}

void service_namer__exited(struct service_namer *sn, uint32_t pid)
{
	struct svc_ent *e;

	HASH_FIND(hh, sn->ents, &pid, sizeof(pid), e);
	if (e)
		e->exited = true;
}

void service_namer__forget_exited(struct service_namer *sn)
{
	struct svc_ent *e, *tmp;

	HASH_ITER(hh, sn->ents, e, tmp)
	{
		if (!e->exited)
			continue;
		HASH_DEL(sn->ents, e);
		sn->nents--;
		ent_free(e);
	}
}

void service_namer__stats(const struct service_namer *sn, struct service_namer_stats *out)
{
	*out = sn->st;
	out->cached = sn->nents;
}
