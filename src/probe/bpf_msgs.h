/* bpf_msgs.h: what Sonde says when BPF or perf refuse it -- libbpf's own
 * messages (the verifier's log among them) in Sonde's log, and a hint for
 * each errno a perf event or a uprobe can't be opened with, as perf's
 * evsel__open_strerror gives. */
#ifndef SONDE_PROBE_BPF_MSGS_H
#define SONDE_PROBE_BPF_MSGS_H

#include <stddef.h>

/* libbpf's messages into Sonde's log, at debug level (SONDE_LOG=debug shows
 * them, the verifier's log of a program that failed to load included); its
 * own debug chatter left out. Once, before anything is loaded. */
void bpf_msgs__init(void);

/* What to do when a sampling perf event at freq Hz can't be opened on a
 * CPU with -err (a negative errno), into buf: "run as root, or ..."; ""
 * when there is nothing to add. Returns buf. */
const char *perf_open_hint(int err, int freq, char *buf, size_t size);

/* The same for a uprobe on a file's function. Static. */
const char *uprobe_hint(int err);

#endif
