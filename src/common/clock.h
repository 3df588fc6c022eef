/* clock.h: the one clock of every Sonde module. Monotonic time measures
 * intervals and deadlines (CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns(),
 * so BPF timestamps compare with it); wall time stamps what leaves the
 * process (profile windows, alerts, metric points). */
#ifndef SONDE_COMMON_CLOCK_H
#define SONDE_COMMON_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds and milliseconds. */
uint64_t mono_ns(void);
uint64_t mono_ms(void);
/* CLOCK_REALTIME since the Unix epoch, in nanoseconds and milliseconds. */
uint64_t wall_ns(void);
uint64_t wall_ms(void);

#endif
