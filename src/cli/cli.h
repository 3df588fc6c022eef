/* cli.h: the subcommands of the `sonde` binary, one file each, dispatched
 * from the table in main.c. Each takes argc/argv starting at its own name
 * and returns the process exit code. */
#ifndef SONDE_CLI_CLI_H
#define SONDE_CLI_CLI_H

#include <getopt.h>
#include <stdint.h>

struct agent_opts;

int cmd_record(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_agent(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_server(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_coordinator(int argc, char **argv);
int cmd_token(int argc, char **argv);

/* Parses "N" within [min, max] into *out; prints an error naming opt and
 * returns -1 when it is not. */
int parse_int_opt(const char *opt, const char *arg, long min, long max, long *out);
/* Parses a duration (common/duration.h: "10" is seconds, "250ms", "1h30m")
 * within [min_ms, max_ms] into *out_ms; prints an error naming opt and the
 * bounds and returns -1 when it is not one. */
int parse_duration_opt(const char *opt, const char *arg, uint64_t min_ms, uint64_t max_ms,
		       uint64_t *out_ms);
/* The same to the nanosecond, with us and ns besides (duration_parse_ns):
 * for --offcpu-min. */
int parse_duration_ns_opt(const char *opt, const char *arg, uint64_t min_ns, uint64_t max_ns,
			  uint64_t *out_ns);
/* Parses a size (common/bytes.h: "64M", "1G") of at least min bytes into
 * *out; prints an error naming opt and returns -1 when it is not one. */
int parse_bytes_opt(const char *opt, const char *arg, uint64_t min, uint64_t *out);
/* Parses "PID[,PID...]" into pids (at most max); prints an error and returns
 * -1 on a malformed list or a pid that does not exist. */
int parse_pid_list(const char *arg, int *pids, int max);

/* `sonde agent`'s options (src/cli/agent.c), shared with `sonde run`:
 * agent_parse_opt() applies one getopt result; -1 after printing why. */
extern const struct option agent_longopts[];
int agent_parse_opt(struct agent_opts *o, int opt, const char *arg);
/* The options that only make sense together, once all are parsed; -1 after
 * printing why. */
int agent_check_opts(const struct agent_opts *o);
/* getopt values of the agent's long-only options. */
#define AGENT_OPT_OFFCPU 0x1001
#define AGENT_OPT_OFFCPU_MIN 0x1002
#define AGENT_OPT_OFFCPU_RATE 0x1003
#define AGENT_OPT_SYNC_STUCK 0x1004
#define AGENT_OPT_EXITED_GRACE 0x1005

#define SONDE_VERSION "0.1.0"

#endif
