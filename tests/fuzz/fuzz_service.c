/* fuzz_service.c: libFuzzer target for the parsers of src/agent/service.c,
 * the agent's readers of /proc/PID/environ, /proc/PID/cgroup,
 * /proc/PID/cmdline and /proc/PID/stat and of --service-by. The input's
 * first byte modulo 5 picks the parser ('s': the rule list; 'e': environ;
 * 'k': a command line, its script and whole name; 'S': stat; 'c': cgroup),
 * the rest is its input. Each accepts or refuses with -EINVAL and a message
 * and reads nothing past the input (ASan); what it accepts is a name a
 * label can carry: at most SERVICE_NAME_MAX bytes (the cgroup path: the
 * caller's buffer), UTF-8, no control character; a script's and a whole
 * name have no '/'. A cgroup path starts with '/', and the unit and
 * cgroup names made of it are non-empty, '/'-free names; an environ value
 * read as CUDA_VISIBLE_DEVICES names each device once. Seeds in
 * tests/fuzz/seeds/service/ and, for environ (NUL bytes), from gen_seeds.c. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cuda_visible.h"
#include "agent/service.h"
#include "common/utf8.h"
#include "fuzz_common.h"

/* In the order that makes 's', 'e', 'k', 'S' and 'c' (mod 5) pick them. */
enum { PICK_SPEC, PICK_ENVIRON, PICK_CMDLINE, PICK_STAT, PICK_CGROUP, PICK_MAX };

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static void check_text(const char *s, size_t max, const char *what)
{
	size_t n = strnlen(s, max + 1);

	FUZZ_CHECK(n <= max, "%s of %zu bytes, at most %zu", what, n, max);
	FUZZ_CHECK(utf8_valid(s, n), "%s '%.40s' is not UTF-8", what, s);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK((unsigned char)s[i] >= 0x20 && s[i] != 0x7f,
			   "%s '%.40s' holds a control character", what, s);
}

static void check_name(int rc, const char *name, const char *what)
{
	FUZZ_CHECK(rc == 0 || rc == 1, "%s: %d", what, rc);
	if (!rc)
		return;
	FUZZ_CHECK(*name && !strchr(name, '/'), "%s '%.40s'", what, name);
	check_text(name, SERVICE_NAME_MAX, what);
}

/* A value read as CUDA_VISIBLE_DEVICES and as NVIDIA_VISIBLE_DEVICES
 * (agent/cuda_visible.c): each device listed once, each one of the 8. */
static void check_visible(const char *v)
{
	static const char *const uuids[] = {
		"GPU-0", "GPU-1", "GPU-12", "GPU-123", "", "GPU-5d0e", "GPU-5d0f", "GPU-a",
	};
	int of[CUDA_VISIBLE_MAX], n;

	for (int pass = 0; pass < 3; pass++) {
		n = cuda_visible__map(pass != 1 ? v : NULL, pass ? v : NULL, uuids, 8, of,
				      CUDA_VISIBLE_MAX);
		FUZZ_CHECK(n >= 0 && n <= 8, "visible devices: %d", n);
		for (int i = 0; i < n; i++) {
			FUZZ_CHECK(of[i] >= 0 && of[i] < 8, "visible device %d", of[i]);
			for (int j = 0; j < i; j++)
				FUZZ_CHECK(of[i] != of[j], "device %d listed twice", of[i]);
		}
	}
}

/* The job labels of an environment block: NAME=VALUE lines of text, as
 * many as it says. */
static void check_labels(const char *env, size_t len)
{
	char out[SERVICE_LABELS_MAX];
	int n = service_job_labels(env, len, out, sizeof(out)), lines = 0;

	FUZZ_CHECK(n >= 0 && n <= 6, "job labels: %d", n);
	for (const char *l = out; *l; l = strchr(l, '\n') + 1) {
		char line[SERVICE_LABELS_MAX];
		const char *nl = strchr(l, '\n');

		FUZZ_CHECK(nl && strchr(l, '=') && strchr(l, '=') < nl, "job label line '%.40s'",
			   l);
		memcpy(line, l, (size_t)(nl - l));
		line[nl - l] = '\0';
		check_text(line, sizeof(line) - 1, "job label");
		lines++;
	}
	FUZZ_CHECK(lines == n, "%d job labels, %d lines", n, lines);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[SERVICE_NAME_MAX + 1], path[1024], name[SERVICE_NAME_MAX + 1], err[512] = "";
	const char *in = (const char *)data + 1;
	size_t len = size ? size - 1 : 0;
	char *copy, *spec;
	int rc;

	if (!size)
		return 0;
	/* An exact-size copy: ASan catches a read past the input. */
	copy = malloc(len ? len : 1);
	memcpy(copy, in, len);
	switch (data[0] % PICK_MAX) {
	case PICK_ENVIRON:
		rc = service_parse_environ(copy, len, "SONDE_SERVICE", out, sizeof(out), err,
					   sizeof(err));
		FUZZ_CHECK(rc == 1 || rc == 0 || rc == -EINVAL, "environ: %d", rc);
		if (rc < 0)
			FUZZ_CHECK(err[0], "environ refused without a message");
		if (rc == 1) {
			FUZZ_CHECK(out[0], "an empty value taken");
			check_text(out, SERVICE_NAME_MAX, "environ value");
			check_visible(out);
		}
		check_labels(copy, len);
		break;
	case PICK_CGROUP:
		rc = service_parse_cgroup(copy, len, path, sizeof(path), err, sizeof(err));
		FUZZ_CHECK(rc == 1 || rc == 0 || rc == -EINVAL, "cgroup: %d", rc);
		if (rc < 0)
			FUZZ_CHECK(err[0], "cgroup refused without a message");
		if (rc != 1)
			break;
		FUZZ_CHECK(path[0] == '/', "cgroup path '%.40s'", path);
		check_text(path, sizeof(path) - 1, "cgroup path");
		check_name(service_unit_of(path, name, sizeof(name)), name, "unit");
		check_name(service_cgroup_leaf(path, name, sizeof(name)), name, "cgroup leaf");
		rc = service_container_id(path, name, sizeof(name));
		FUZZ_CHECK(rc == 0 || (rc == 1 && strlen(name) == 12), "container id: %d", rc);
		break;
	case PICK_CMDLINE:
		check_name(service_script_of(copy, len, name, sizeof(name)), name, "script");
		check_name(service_full_name(copy, len, "abcdefghijklmno", name, sizeof(name)),
			   name, "whole name");
		break;
	case PICK_STAT:
		rc = service_stat_kthread(copy, len);
		FUZZ_CHECK(rc == 0 || rc == 1 || rc == -EINVAL, "stat: %d", rc);
		break;
	case PICK_SPEC:
		spec = fuzz_strdup((const uint8_t *)in, len);
		rc = service_spec_check(spec, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || rc == -EINVAL, "spec: %d", rc);
		if (rc < 0)
			FUZZ_CHECK(err[0], "spec refused without a message");
		free(spec);
		break;
	}
	free(copy);
	return 0;
}
