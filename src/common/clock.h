/* clock.h: the one clock of every Sonde module. Monotonic time measures
 * intervals and deadlines (CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns(),
 * so BPF timestamps compare with it); wall time stamps what leaves the
 * process (profile windows, alerts, metric points). */
#ifndef SONDE_COMMON_CLOCK_H
#define SONDE_COMMON_CLOCK_H

#include <stdint.h>

/* The time units, for every conversion between them. Plain int constants:
 * the other operand sets the arithmetic's type, so widen it first where the
 * product can pass 2^31 ((uint64_t)s * NS_PER_SEC), and divide a double by
 * them for a fraction ((double)ns / NS_PER_SEC). */
#define NS_PER_US 1000
#define NS_PER_MS 1000000
#define NS_PER_SEC 1000000000
#define US_PER_MS 1000
#define US_PER_SEC 1000000
#define MS_PER_SEC 1000

/* CLOCK_MONOTONIC in nanoseconds and milliseconds. */
uint64_t mono_ns(void);
uint64_t mono_ms(void);
/* CLOCK_REALTIME since the Unix epoch, in nanoseconds and milliseconds. */
uint64_t wall_ns(void);
uint64_t wall_ms(void);

#endif
