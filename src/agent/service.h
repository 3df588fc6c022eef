/* service.h: which service a process belongs to, for the agent's profiles
 * (the service_name label of their samples). A service is a process, named
 * by the first of an ordered list of rules (`--service-by`) that yields a
 * value:
 *
 *   env:NAME  the process's environment variable NAME (/proc/PID/environ,
 *             the environment it was started with)
 *   script    for an interpreter (python, node, java, ruby, perl, php, a
 *             shell), the script, module or jar it runs, from
 *             /proc/PID/cmdline: `python3 -u train.py` is train.py, `python
 *             -m pkg.mod` pkg.mod, torchrun (or -m torch.distributed.run)
 *             the training script it starts; nothing for `-c` or a REPL
 *   unit      its systemd unit: the last component of its cgroup v2 path
 *             (/proc/PID/cgroup) that ends in ".service", without the suffix
 *   cgroup    the last component of its cgroup v2 path
 *   process   the process's name: its thread-group leader's comm, whole
 *             where the kernel cut it at 15 bytes (the basename of its
 *             first argument when that begins with the comm)
 *
 * A kernel thread is the service "kernel", whatever the rules: the
 * machine's many kworkers are one entry, not dozens. The default is
 * "env:SONDE_SERVICE,script,process". What /proc says is read once
 * per process and kept until it execs or its pid is a new process's
 * (service_namer__forget, from the sideband's records; a process whose name
 * changed is read again too, should its exec's record come late or be
 * lost), or until the window after its exit (service_namer__exited, then
 * service_namer__forget_exited), so the samples drained after its exit are
 * still named. The parsers of /proc's files are exposed for the unit tests:
 * they take any bytes and reject what is malformed with a message. Not
 * thread-safe: the agent's probing thread owns it. */
#ifndef SONDE_AGENT_SERVICE_H
#define SONDE_AGENT_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#define SERVICE_BY_DEFAULT "env:SONDE_SERVICE,script,process"
#define SERVICE_KERNEL "kernel"	       /* every kernel thread's service */
#define SERVICE_CMDLINE_MAX (64 << 10) /* bytes of /proc/PID/cmdline read, at most */
#define SERVICE_MAX_RULES 8
#define SERVICE_NAME_MAX 128		/* bytes of a service's name, at most */
#define SERVICE_ENVIRON_MAX (256 << 10) /* bytes of /proc/PID/environ read, at most */
#define SERVICE_CGROUP_MAX (64 << 10)	/* bytes of /proc/PID/cgroup read, at most */

struct service_namer;

/* A namer for spec ("env:NAME,unit,cgroup,process"; NULL: the default).
 * NULL with errno EINVAL and the reason in err for a bad spec. */
struct service_namer *service_namer__new(const char *spec, char *err, size_t errlen);
void service_namer__free(struct service_namer *sn);

/* The service of process pid, whose name (comm) is the one given: the
 * value of the first rule that yields one, or NULL when none does. The
 * string is the namer's, valid until the next call. */
const char *service_namer__name(struct service_namer *sn, uint32_t pid, const char *comm);
/* The job the process belongs to, as labels "NAME=VALUE" one per line, ""
 * when none: read with its service (call service_namer__name first), from
 * its environment (service_job_labels) and, in a Kubernetes pod, its
 * service account's namespace file and its cgroup (service_container_id).
 * Valid until the next call. */
const char *service_namer__labels(struct service_namer *sn, uint32_t pid);
/* pid exec'ed, or is a new process: what was read of it is stale. */
void service_namer__forget(struct service_namer *sn, uint32_t pid);
/* pid exited: kept for the samples still to come, until the next
 * service_namer__forget_exited (at the end of a window). */
void service_namer__exited(struct service_namer *sn, uint32_t pid);
void service_namer__forget_exited(struct service_namer *sn);

struct service_namer_stats {
	uint64_t reads;	    /* /proc files read */
	uint64_t malformed; /* of them, rejected as malformed */
	uint64_t cached;    /* processes held */
};
void service_namer__stats(const struct service_namer *sn, struct service_namer_stats *out);

/* Reads /proc/PID/FILE, at most cap bytes. The length, or -errno. */
ssize_t service_read_proc(uint32_t pid, const char *file, char *buf, size_t cap);

/* ---- the parsers, for the unit tests and the fuzzer ---- */

/* Checks a rule list as --service-by takes it. 0, or -EINVAL with why in
 * err. */
int service_spec_check(const char *spec, char *err, size_t errlen);

/* The value of the variable name in an environment block (/proc/PID/environ:
 * NUL-terminated NAME=VALUE entries; a last entry without its NUL is one
 * the read's bound cut, and is not looked at). 1 with the value in out
 * (size outlen), 0 when the variable is not set or empty, -EINVAL with why
 * in err when its value is not a name (over SERVICE_NAME_MAX bytes, not
 * UTF-8, or holding a control character). */
int service_parse_environ(const char *buf, size_t len, const char *name, char *out, size_t outlen,
			  char *err, size_t errlen);
/* The same for any text value that fits in out (outlen - 1 bytes). */
int service_environ_value(const char *buf, size_t len, const char *name, char *out, size_t outlen,
			  char *err, size_t errlen);

/* The cgroup v2 path in the text of /proc/PID/cgroup (lines
 * "ID:CONTROLLERS:PATH", the v2 one "0::/PATH"): 1 with the path in out, 0
 * when there is no v2 line (a cgroup v1 only system), -EINVAL with why in
 * err when a line is malformed (no two colons, a non-numeric ID, a path
 * not starting with '/', a NUL byte, not UTF-8, a control character) or
 * the path is longer than outlen - 1. A " (deleted)" suffix is dropped. */
int service_parse_cgroup(const char *buf, size_t len, char *out, size_t outlen, char *err,
			 size_t errlen);

/* From a cgroup v2 path: the systemd unit (the last component ending in
 * ".service", without it), or the last component. 1 with the name in out,
 * 0 when there is none ("/", no .service component, a name longer than
 * SERVICE_NAME_MAX or outlen - 1). */
int service_unit_of(const char *path, char *out, size_t outlen);
int service_cgroup_leaf(const char *path, char *out, size_t outlen);

/* From /proc/PID/cmdline (NUL-terminated arguments; a last one without its
 * NUL is one the read's bound cut, and is not looked at): the script rule's
 * name (see above). 1 with the name in out, 0 when the command is not an
 * interpreter's or names no script, or the name is longer than
 * SERVICE_NAME_MAX or outlen - 1 or is not UTF-8 text. */
int service_script_of(const char *cmdline, size_t len, char *out, size_t outlen);
/* From /proc/PID/cmdline: the basename of its first argument when it
 * begins with comm, a name the kernel cut at 15 bytes; 1 with it in out,
 * else 0. */
int service_full_name(const char *cmdline, size_t len, const char *comm, char *out, size_t outlen);
/* Whether the text of /proc/PID/stat is a kernel thread's (PF_KTHREAD in
 * its flags): 1 yes, 0 no, -EINVAL when it is malformed. */
int service_stat_kthread(const char *buf, size_t len);

/* The job labels an environment block (as service_environ_value reads it)
 * gives, "NAME=VALUE" one per line into out (outlen bytes at least
 * SERVICE_LABELS_MAX): the count. Set by torchrun/torch.distributed and
 * Slurm, the first that is set of each --
 *   job         SLURM_JOB_ID; TORCHELASTIC_RUN_ID (but "none"); else, for a
 *               process with a RANK, MASTER_ADDR:MASTER_PORT (what every
 *               rank of one job shares, on every node)
 *   rank        RANK, SLURM_PROCID
 *   local_rank  LOCAL_RANK, SLURM_LOCALID
 *   world_size  WORLD_SIZE, SLURM_NTASKS
 *   pod         HOSTNAME in a Kubernetes container (KUBERNETES_SERVICE_HOST
 *               set): the pod's name
 *   namespace   POD_NAMESPACE (the downward API's usual name)
 * A value that is not a label's (over SERVICE_NAME_MAX bytes, not UTF-8
 * text) is left out. */
#define SERVICE_LABELS_MAX 1024
int service_job_labels(const char *environ, size_t len, char *out, size_t outlen);
/* A container's id from a cgroup v2 path (Docker's, containerd's, CRI-O's
 * and Podman's scopes, or the cgroupfs driver's bare 64-hex directory):
 * its first 12 hex digits, as `docker ps` shows them. 1 with it in out
 * (13 bytes at least), else 0. */
int service_container_id(const char *path, char *out, size_t outlen);

#endif
