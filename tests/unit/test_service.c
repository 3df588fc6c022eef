/* test_service.c: unit tests of src/agent/service.c -- the --service-by
 * rules, the parsers of /proc/PID/environ and /proc/PID/cgroup on good and
 * malformed input (each malformed one rejected with a message, none read
 * past its length), the unit and cgroup names of a path, the utf8_clean of
 * the names the kernel cuts, and a namer over a real child process started
 * with an environment of its own: its service from the variable, from its
 * name without it, kept after its exit until the window ends, read again
 * once it is forgotten or renamed. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/service.h"
#include "common/utf8.h"

#define ENV(lit) lit, sizeof(lit) - 1 /* a block with its NULs, not the literal's own */

static char out[4096], err[512];

static int environ_of(const char *buf, size_t len, const char *name)
{
	memset(out, 'X', sizeof(out));
	err[0] = '\0';
	return service_parse_environ(buf, len, name, out, sizeof(out), err, sizeof(err));
}

static int cgroup_of(const char *buf, size_t len, size_t outlen)
{
	err[0] = '\0';
	return service_parse_cgroup(buf, len, out, outlen, err, sizeof(err));
}

static void test_spec(void **state)
{
	static const char *const good[] = {
		"env:SONDE_SERVICE,process",	     "process",		 "unit", "cgroup,process",
		"env:A,env:_b9,unit,cgroup,process", SERVICE_BY_DEFAULT,
	};
	static const struct {
		const char *spec, *why;
	} bad[] = {
		{"", "empty"},
		{",", "empty rule"},
		{"process,", "empty rule"},
		{",process", "empty rule"},
		{"env:", "not an environment variable"},
		{"env:1X", "not an environment variable"},
		{"env:A-B", "not an environment variable"},
		{"env:A B", "not an environment variable"},
		{"container", "unknown rule 'container'"},
		{"Process", "unknown rule"},
		{"process ", "unknown rule"},
		{"unit,cgroup,process,unit,cgroup,process,unit,cgroup,process", "more than 8"},
	};
	char longname[300];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(service_spec_check(good[i], err, sizeof(err)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(service_spec_check(bad[i].spec, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].why))
			fail_msg("'%s': '%s' does not say '%s'", bad[i].spec, err, bad[i].why);
	}
	assert_int_equal(service_spec_check(NULL, err, sizeof(err)), -EINVAL);
	/* A variable's name past 128 bytes, and the message stays bounded. */
	memcpy(longname, "env:", 4);
	memset(longname + 4, 'A', sizeof(longname) - 5);
	longname[sizeof(longname) - 1] = '\0';
	assert_int_equal(service_spec_check(longname, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "at most 128"));
	assert_null(service_namer__new("bogus", err, sizeof(err)));
	assert_int_equal(errno, EINVAL);
}

static void test_environ(void **state)
{
	char big[SERVICE_NAME_MAX + 32];
	size_t n;

	assert_int_equal(
		environ_of(ENV("HOME=/root\0SONDE_SERVICE=trainer\0PATH=/bin\0"), "SONDE_SERVICE"),
		1);
	assert_string_equal(out, "trainer");
	/* The first of two, as getenv() has it. */
	assert_int_equal(environ_of(ENV("S=one\0S=two\0"), "S"), 1);
	assert_string_equal(out, "one");
	/* Not set: none of the names, a longer or shorter name, no '='. */
	assert_int_equal(environ_of(ENV("SONDE_SERVICEX=a\0SONDE_SERVIC=b\0SONDE_SERVICE\0"),
				    "SONDE_SERVICE"),
			 0);
	/* Set but empty: no value. */
	assert_int_equal(environ_of(ENV("S=\0"), "S"), 0);
	/* Empty blocks, and NULs only. */
	assert_int_equal(environ_of("", 0, "S"), 0);
	assert_int_equal(environ_of(ENV("\0\0\0\0"), "S"), 0);
	/* A last entry without its NUL was cut by the read: not taken. */
	assert_int_equal(environ_of("A=1\0S=trainer", 13, "S"), 0);
	assert_int_equal(environ_of("S=train", 7, "S"), 0);
	/* The value of an entry at the end with its NUL is. */
	assert_int_equal(environ_of("S=x\0", 4, "S"), 1);
	assert_string_equal(out, "x");
	/* A '=' inside the value is the value's. */
	assert_int_equal(environ_of(ENV("S=a=b\0"), "S"), 1);
	assert_string_equal(out, "a=b");
	/* UTF-8 is fine. */
	assert_int_equal(environ_of(ENV("S=s\xc3\xa9rvice\0"), "S"), 1);
	assert_string_equal(out, "s\xc3\xa9rvice");

	/* Malformed values: rejected, saying why. */
	assert_int_equal(environ_of(ENV("S=a\xff\0"), "S"), -EINVAL);
	assert_non_null(strstr(err, "not UTF-8"));
	assert_int_equal(environ_of(ENV("S=\xc3\0"), "S"), -EINVAL); /* a cut sequence */
	assert_int_equal(environ_of(ENV("S=a\nb\0"), "S"), -EINVAL);
	assert_non_null(strstr(err, "control character"));
	assert_int_equal(environ_of(ENV("S=a\tb\0"), "S"), -EINVAL);
	assert_int_equal(environ_of(ENV("S=\x7f\0"), "S"), -EINVAL);
	n = (size_t)snprintf(big, sizeof(big), "S=");
	memset(big + n, 'v', SERVICE_NAME_MAX + 1);
	big[n + SERVICE_NAME_MAX + 1] = '\0';
	assert_int_equal(environ_of(big, n + SERVICE_NAME_MAX + 2, "S"), -EINVAL);
	assert_non_null(strstr(err, "at most 128"));
	/* At the bound exactly: taken. */
	big[n + SERVICE_NAME_MAX] = '\0';
	assert_int_equal(environ_of(big, n + SERVICE_NAME_MAX + 1, "S"), 1);
	assert_int_equal(strlen(out), SERVICE_NAME_MAX);
	/* A small output buffer is a bound too. */
	assert_int_equal(service_parse_environ(ENV("S=abcdef\0"), "S", out, 4, err, sizeof(err)),
			 -EINVAL);
}

static void test_cgroup(void **state)
{
	static const char hybrid[] = "12:pids:/user.slice\n"
				     "4:memory:/process_api/25bb\n"
				     "1:name=systemd:/system.slice/nginx.service\n"
				     "0::/system.slice/nginx.service\n";
	char longpath[256];

	assert_int_equal(cgroup_of(ENV("0::/system.slice/nginx.service\n"), sizeof(out)), 1);
	assert_string_equal(out, "/system.slice/nginx.service");
	assert_int_equal(cgroup_of(ENV(hybrid), sizeof(out)), 1);
	assert_string_equal(out, "/system.slice/nginx.service");
	assert_int_equal(cgroup_of(ENV("0::/\n"), sizeof(out)), 1);
	assert_string_equal(out, "/");
	/* Without its newline; with blank lines; a removed group. */
	assert_int_equal(cgroup_of(ENV("0::/a/b"), sizeof(out)), 1);
	assert_string_equal(out, "/a/b");
	assert_int_equal(cgroup_of(ENV("\n\n0::/a\n\n"), sizeof(out)), 1);
	assert_string_equal(out, "/a");
	assert_int_equal(cgroup_of(ENV("0::/a/b.scope (deleted)\n"), sizeof(out)), 1);
	assert_string_equal(out, "/a/b.scope");
	/* Colons inside the path are the path's. */
	assert_int_equal(cgroup_of(ENV("0::/a:b/c\n"), sizeof(out)), 1);
	assert_string_equal(out, "/a:b/c");
	/* cgroup v1 only, or nothing: no path. */
	assert_int_equal(cgroup_of(ENV("3:cpu,cpuacct:/x\n1:name=systemd:/y\n"), sizeof(out)), 0);
	assert_int_equal(cgroup_of("", 0, sizeof(out)), 0);
	/* ID 0 with controllers is a v1 line (a named hierarchy can't be 0,
	 * but the parser must not take it for v2). */
	assert_int_equal(cgroup_of(ENV("0:cpu:/x\n"), sizeof(out)), 0);

	/* Malformed: each rejected with a message. */
	assert_int_equal(cgroup_of(ENV("garbage\n"), sizeof(out)), -EINVAL);
	assert_non_null(strstr(err, "line 1"));
	assert_int_equal(cgroup_of(ENV("0:/x\n"), sizeof(out)), -EINVAL);
	assert_int_equal(cgroup_of(ENV("::/x\n"), sizeof(out)), -EINVAL);
	assert_int_equal(cgroup_of(ENV("0::/x\nx::/y\n"), sizeof(out)), -EINVAL);
	assert_non_null(strstr(err, "line 2"));
	assert_non_null(strstr(err, "not a number"));
	assert_int_equal(cgroup_of(ENV("0::relative\n"), sizeof(out)), -EINVAL);
	assert_non_null(strstr(err, "start with '/'"));
	assert_int_equal(cgroup_of(ENV("0::\n"), sizeof(out)), -EINVAL);
	assert_int_equal(cgroup_of(ENV("0::/a\0b\n"), sizeof(out)), -EINVAL);
	assert_non_null(strstr(err, "NUL"));
	assert_int_equal(cgroup_of(ENV("0::/a\xff\n"), sizeof(out)), -EINVAL);
	assert_non_null(strstr(err, "UTF-8"));
	assert_int_equal(cgroup_of(ENV("0::/a\tb\n"), sizeof(out)), -EINVAL);
	/* A path longer than the caller's buffer. */
	longpath[0] = '0', longpath[1] = ':', longpath[2] = ':', longpath[3] = '/';
	memset(longpath + 4, 'p', sizeof(longpath) - 4);
	assert_int_equal(cgroup_of(longpath, sizeof(longpath), 64), -EINVAL);
	assert_non_null(strstr(err, "at most 63"));
	assert_int_equal(cgroup_of(longpath, sizeof(longpath), sizeof(out)), 1);
	assert_int_equal(strlen(out), sizeof(longpath) - 3);
}

static void test_names(void **state)
{
	char name[SERVICE_NAME_MAX + 1], path[400];

	assert_int_equal(service_unit_of("/system.slice/nginx.service", name, sizeof(name)), 1);
	assert_string_equal(name, "nginx");
	assert_int_equal(
		service_unit_of("/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope",
				name, sizeof(name)),
		1);
	assert_string_equal(name, "user@1000");
	assert_int_equal(service_unit_of("/a.service/b.service/", name, sizeof(name)), 1);
	assert_string_equal(name, "b");
	assert_int_equal(service_unit_of("/system.slice/getty@tty1.service", name, sizeof(name)),
			 1);
	assert_string_equal(name, "getty@tty1");
	assert_int_equal(service_unit_of("/", name, sizeof(name)), 0);
	assert_int_equal(service_unit_of("", name, sizeof(name)), 0);
	assert_int_equal(service_unit_of("/.service", name, sizeof(name)), 0);
	assert_int_equal(service_unit_of("/user.slice/session-2.scope", name, sizeof(name)), 0);
	assert_int_equal(service_unit_of("/a.servicex", name, sizeof(name)), 0);

	assert_int_equal(service_cgroup_leaf("/system.slice/docker-ab12.scope", name, sizeof(name)),
			 1);
	assert_string_equal(name, "docker-ab12.scope");
	assert_int_equal(service_cgroup_leaf("/a/b/", name, sizeof(name)), 1);
	assert_string_equal(name, "b");
	assert_int_equal(service_cgroup_leaf("leaf", name, sizeof(name)), 1);
	assert_string_equal(name, "leaf");
	assert_int_equal(service_cgroup_leaf("/", name, sizeof(name)), 0);
	assert_int_equal(service_cgroup_leaf("//", name, sizeof(name)), 0);
	assert_int_equal(service_cgroup_leaf("", name, sizeof(name)), 0);
	/* Past SERVICE_NAME_MAX, or the caller's buffer: none. */
	path[0] = '/';
	memset(path + 1, 'c', SERVICE_NAME_MAX + 1);
	path[SERVICE_NAME_MAX + 2] = '\0';
	assert_int_equal(service_cgroup_leaf(path, name, sizeof(name)), 0);
	snprintf(path + 1, sizeof(path) - 1, "%s", "xy.service");
	assert_int_equal(service_unit_of(path, name, 2), 0);
	assert_int_equal(service_unit_of(path, name, 3), 1);
	assert_string_equal(name, "xy");
}

#define CMD(lit) lit, sizeof(lit) - 1

/* The script rule: what an interpreter runs, as a user names the job. */
static void test_scripts(void **state)
{
	static const struct {
		const char *cmd;
		size_t len;
		const char *want; /* NULL: none */
	} cases[] = {
		{CMD("/usr/bin/python3\0train.py\0--lr\0"
		     "0.1\0"),
		 "train.py"},
		{CMD("python3.11\0-u\0-X\0dev\0-W\0ignore\0/srv/job/train.py\0"), "train.py"},
		{CMD("python\0-uB\0-Wignore\0run.py\0"), "run.py"},
		{CMD("python3\0-m\0http.server\0"
		     "8000\0"),
		 "http.server"},
		{CMD("python3\0-mpkg.mod\0"), "pkg.mod"},
		{CMD("python3\0-c\0import x\0"), NULL},
		{CMD("python3\0"), NULL},
		{CMD("python3\0-\0"), NULL},
		{CMD("python3\0--\0x.py\0"), "x.py"},
		/* torchrun and its module start the training script. */
		{CMD("/usr/bin/python3\0/usr/local/bin/torchrun\0--nproc-per-node\0"
		     "2\0"
		     "--rdzv-endpoint=h:1\0train.py\0--epochs\0"
		     "3\0"),
		 "train.py"},
		{CMD("python3\0-m\0torch.distributed.run\0--nnodes=1\0/a/ft.py\0"), "ft.py"},
		{CMD("python3\0-m\0torch.distributed.launch\0"), "torch.distributed.launch"},
		{CMD("python3\0/usr/bin/torchrun\0--help\0"), "torchrun"},
		{CMD("node\0--require\0dotenv/config\0server.js\0"), "server.js"},
		{CMD("/usr/bin/nodejs\0-e\0code\0"), NULL},
		{CMD("java\0-Xmx1g\0-jar\0/opt/app/svc.jar\0"), "svc.jar"},
		{CMD("java\0-cp\0a.jar:b.jar\0org.example.Main\0"), "Main"},
		{CMD("ruby3.1\0app.rb\0"), "app.rb"},
		{CMD("/bin/bash\0-x\0deploy.sh\0"), "deploy.sh"},
		{CMD("sh\0-c\0echo hi\0"), NULL},
		/* Not an interpreter: the process rule names it. */
		{CMD("/usr/bin/cat\0file.py\0"), NULL},
		{CMD("python3x\0a.py\0"), NULL},
		/* The last argument cut by the read's bound: not looked at. */
		{CMD("python3\0trai"), NULL},
		{CMD(""), NULL},
	};
	char name[SERVICE_NAME_MAX + 1];

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		int rc = service_script_of(cases[i].cmd, cases[i].len, name, sizeof(name));

		if (!cases[i].want) {
			if (rc)
				fail_msg("case %zu: expected none, got %s", i, name);
			continue;
		}
		if (rc != 1 || strcmp(name, cases[i].want))
			fail_msg("case %zu: expected %s, got %d %s", i, cases[i].want, rc,
				 rc ? name : "");
	}
	/* Whole names where the kernel cut one at 15 bytes. */
	assert_int_equal(service_full_name(CMD("/opt/bin/inference-server-v2\0--port\0"),
					   "inference-serve", name, sizeof(name)),
			 1);
	assert_string_equal(name, "inference-server-v2");
	assert_int_equal(
		service_full_name(CMD("/bin/other\0"), "inference-serve", name, sizeof(name)), 0);
	assert_int_equal(service_full_name(CMD("/bin/short\0"), "short", name, sizeof(name)), 0);
	/* Kernel threads, by their flags. */
	assert_int_equal(service_stat_kthread(CMD("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0\n")), 1);
	assert_int_equal(service_stat_kthread(CMD("42 (a) (b)) S 1 42 42 34816 42 4194560 9\n")),
			 0);
	assert_int_equal(service_stat_kthread(CMD("42 (a) S 1 42\n")), -EINVAL);
	assert_int_equal(service_stat_kthread(CMD("42 (a) S 1 42 42 0 -1 x1 0\n")), -EINVAL);
	assert_int_equal(service_stat_kthread(CMD("no parenthesis")), -EINVAL);
}

/* A job's identity from what torchrun, Slurm and Kubernetes put in its
 * processes' environment, and a container's id from its cgroup. */
static void test_job_labels(void **state)
{
	char out[SERVICE_LABELS_MAX], id[16];

	assert_int_equal(service_job_labels(CMD("RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0"
						"MASTER_ADDR=node-0\0MASTER_PORT=29500\0"
						"TORCHELASTIC_RUN_ID=none\0"),
					    out, sizeof(out)),
			 4);
	assert_string_equal(out, "job=node-0:29500\nrank=3\nlocal_rank=1\nworld_size=8\n");
	/* Slurm's job id first; its task ids where torch's are not set. */
	assert_int_equal(service_job_labels(CMD("SLURM_JOB_ID=4821\0SLURM_PROCID=5\0"
						"SLURM_LOCALID=1\0SLURM_NTASKS=16\0"
						"TORCHELASTIC_RUN_ID=abc\0"),
					    out, sizeof(out)),
			 4);
	assert_string_equal(out, "job=4821\nrank=5\nlocal_rank=1\nworld_size=16\n");
	assert_int_equal(
		service_job_labels(CMD("TORCHELASTIC_RUN_ID=ft-7\0RANK=0\0"), out, sizeof(out)), 2);
	assert_string_equal(out, "job=ft-7\nrank=0\n");
	/* A pod: its name is its host name, where Kubernetes set its variables. */
	assert_int_equal(service_job_labels(CMD("HOSTNAME=trainer-7f9c\0"
						"KUBERNETES_SERVICE_HOST=10.96.0.1\0"
						"POD_NAMESPACE=ml\0"),
					    out, sizeof(out)),
			 2);
	assert_string_equal(out, "pod=trainer-7f9c\nnamespace=ml\n");
	assert_int_equal(service_job_labels(CMD("HOSTNAME=laptop\0PATH=/bin\0"), out, sizeof(out)),
			 0);
	assert_string_equal(out, "");
	/* No rank: MASTER_ADDR alone is no job; a value that is no label's. */
	assert_int_equal(service_job_labels(CMD("MASTER_ADDR=a\0MASTER_PORT=1\0RANK=\x01\0"), out,
					    sizeof(out)),
			 0);

	assert_int_equal(service_container_id(
				 "/kubepods.slice/kubepods-burstable.slice/"
				 "kubepods-burstable-pod1a2b.slice/cri-containerd-"
				 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
				 ".scope",
				 id, sizeof(id)),
			 1);
	assert_string_equal(id, "0123456789ab");
	assert_int_equal(service_container_id(
				 "/system.slice/docker-"
				 "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
				 ".scope",
				 id, sizeof(id)),
			 1);
	assert_string_equal(id, "fedcba987654");
	assert_int_equal(service_container_id("/kubepods/burstable/pod1/"
					      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
					      "aaaaaaaaaaaaa",
					      id, sizeof(id)),
			 1);
	assert_int_equal(service_container_id("/system.slice/nginx.service", id, sizeof(id)), 0);
	assert_int_equal(service_container_id("/docker-0123.scope", id, sizeof(id)), 0);
	assert_int_equal(service_container_id("/docker-"
					      "0123456789ABCDEF0123456789abcdef0123456789abcdef0123"
					      "456789abcdef.scope",
					      id, sizeof(id)),
			 0);
}

/* utf8_clean: a name the kernel cut inside a character loses the rest of
 * it; other bad bytes become '?'. */
static void test_utf8_clean(void **state)
{
	char s[32];

	snprintf(s, sizeof(s), "worker-a");
	assert_int_equal(utf8_clean(s, 15), 8);
	assert_string_equal(s, "worker-a");
	/* 15 bytes: "abcdefghijklm" then the first byte of a 3-byte one... */
	snprintf(s, sizeof(s), "abcdefghijkl\xe6\x97");
	assert_int_equal(utf8_clean(s, 15), 12);
	assert_string_equal(s, "abcdefghijkl");
	snprintf(s, sizeof(s), "\xe6\x97\xa5\xe6");
	assert_int_equal(utf8_clean(s, 15), 3);
	assert_string_equal(s, "\xe6\x97\xa5");
	/* ... bad bytes inside become '?'. */
	snprintf(s, sizeof(s),
		 "a\xff"
		 "b\xc3(c");
	assert_int_equal(utf8_clean(s, 15), 6);
	assert_string_equal(s, "a?b?(c");
	/* n bounds the string even without a NUL within it. */
	memset(s, 'z', sizeof(s));
	assert_int_equal(utf8_clean(s, 15), 15);
	assert_int_equal(s[15], '\0');
}

/* A child that waits on a pipe, started with env. */
static pid_t start_child(char *const env[], int *wfd)
{
	int fds[2];
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		char *const argv[] = {"cat", NULL};

		dup2(fds[0], 0);
		close(fds[1]);
		execve("/bin/cat", argv, env);
		_exit(127);
	}
	close(fds[0]);
	*wfd = fds[1];
	return pid;
}

/* Waits for the child's exec: its comm is cat. */
static void wait_exec(pid_t pid)
{
	char path[64], comm[32] = "";

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "r");

		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = '\0';
			fclose(f);
		}
		if (!strcmp(comm, "cat\n"))
			return;
		usleep(1000);
	}
	fail_msg("the child never became cat");
}

static void stop_child(pid_t pid, int wfd)
{
	int st;

	close(wfd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

static void test_namer(void **state)
{
	char *const env[] = {
		"PATH=/bin",	"SONDE_TEST_SVC=trainer", "BAD_SVC=a\x01z",    "RANK=1",
		"WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1",	  "MASTER_PORT=29500", NULL};
	struct service_namer *sn, *sn2;
	struct service_namer_stats st;
	int wfd;
	pid_t pid = start_child(env, &wfd);

	wait_exec(pid);
	sn = service_namer__new("env:NOT_THERE,env:SONDE_TEST_SVC,process", err, sizeof(err));
	assert_non_null(sn);
	assert_string_equal(service_namer__name(sn, pid, "cat"), "trainer");
	service_namer__stats(sn, &st);
	/* Its stat, its environment (once for both rules and its job's
	 * labels) and its cgroup. */
	assert_int_equal(st.reads, 3);
	assert_string_equal(service_namer__labels(sn, pid),
			    "job=10.0.0.1:29500\nrank=1\nworld_size=2\n");
	assert_int_equal(st.cached, 1);
	assert_string_equal(service_namer__name(sn, pid, "cat"), "trainer");
	service_namer__stats(sn, &st);
	assert_int_equal(st.reads, 3); /* kept */

	/* The default: no SONDE_SERVICE, the process's name. */
	sn2 = service_namer__new(NULL, err, sizeof(err));
	assert_non_null(sn2);
	assert_string_equal(service_namer__name(sn2, pid, "cat"), "cat");
	/* A malformed value is skipped for the next rule, and counted. */
	service_namer__free(sn2);
	sn2 = service_namer__new("env:BAD_SVC,process", err, sizeof(err));
	assert_non_null(sn2);
	assert_string_equal(service_namer__name(sn2, pid, "cat"), "cat");
	service_namer__stats(sn2, &st);
	assert_int_equal(st.malformed, 1);
	/* No rule that yields: none. */
	service_namer__free(sn2);
	sn2 = service_namer__new("env:NOT_THERE", err, sizeof(err));
	assert_non_null(sn2);
	assert_null(service_namer__name(sn2, pid, "cat"));
	service_namer__free(sn2);

	/* Renamed (or exec'ed without its record yet): read again. */
	assert_string_equal(service_namer__name(sn, pid, "other"), "trainer");
	service_namer__stats(sn, &st);
	assert_int_equal(st.reads, 6);

	/* Exited: still named until the window's end, though /proc is gone. */
	stop_child(pid, wfd);
	service_namer__exited(sn, pid);
	assert_string_equal(service_namer__name(sn, pid, "other"), "trainer");
	service_namer__forget_exited(sn);
	service_namer__stats(sn, &st);
	assert_int_equal(st.cached, 0);
	/* Now gone from /proc too: the process's name. */
	assert_string_equal(service_namer__name(sn, pid, "other"), "other");
	service_namer__forget(sn, pid);
	service_namer__stats(sn, &st);
	assert_int_equal(st.cached, 0);
	service_namer__forget(sn, 12345678); /* unknown: a no-op */
	/* A kernel thread is the service "kernel"; a pid that can't exist. */
	assert_string_equal(service_namer__name(sn, 2, "kthreadd"), SERVICE_KERNEL);
	assert_null(service_namer__name(sn, 4194305, ""));
	service_namer__free(sn);
	service_namer__free(NULL);
}

/* The unit and cgroup rules over this process's own /proc/self/cgroup,
 * whatever it holds: the namer agrees with the parsers. */
static void test_namer_cgroup(void **state)
{
	char buf[SERVICE_CGROUP_MAX], path[4096], want[SERVICE_NAME_MAX + 1];
	struct service_namer *sn = service_namer__new("cgroup,process", err, sizeof(err));
	FILE *f = fopen("/proc/self/cgroup", "r");
	const char *got;
	size_t len;
	int rc;

	assert_non_null(sn);
	if (!f) {
		service_namer__free(sn);
		skip();
	}
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	rc = service_parse_cgroup(buf, len, path, sizeof(path), err, sizeof(err));
	assert_true(rc >= 0);
	got = service_namer__name(sn, (uint32_t)getpid(), "me");
	if (rc == 1 && service_cgroup_leaf(path, want, sizeof(want)))
		assert_string_equal(got, want);
	else
		assert_string_equal(got, "me");
	service_namer__free(sn);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec),	     cmocka_unit_test(test_environ),
		cmocka_unit_test(test_cgroup),	     cmocka_unit_test(test_names),
		cmocka_unit_test(test_scripts),	     cmocka_unit_test(test_job_labels),
		cmocka_unit_test(test_utf8_clean),   cmocka_unit_test(test_namer),
		cmocka_unit_test(test_namer_cgroup),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
