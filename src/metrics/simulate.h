/* simulate.h: synthetic GPU telemetry for `sonde agent --simulate` (no BPF,
 * no root, no GPU): a two-rank data-parallel training job and an inference
 * server on two fake 80 GiB GPUs, fed into a gpu_metrics as the probes would.
 *
 * Each training rank runs 250 ms steps: about 400 kernel launches with
 * lognormal call latencies (median ~6 us, a rare tail to ~1 ms), a dataloader
 * wait (median ~8 ms), the last step's activations freed and 12-24 GiB of new
 * ones allocated (memory rises and falls), host-to-device copies, a stream
 * synchronize and an allreduce (median ~30 ms). Rank 1 leaks a little every step until its GPU
 * passes 97 %, then "restarts" as a new pid -- so the memory alert fires and
 * resolves. Every 10 minutes, from minute 4 for 75 s, rank 1 hangs in an
 * allreduce (sonde_nccl_stuck_seconds grows past the default 60 s alert).
 *
 * The gpu_metrics must be created with opts.simulated = true: that is what
 * marks every output (sonde_agent_simulated 1, "simulated": true). The
 * sequence is a function of the seed and the tick times only. */
#ifndef SONDE_METRICS_SIMULATE_H
#define SONDE_METRICS_SIMULATE_H

#include <stdint.h>

struct gpu_metrics;
struct simulator;

/* m must outlive the simulator. Sets the fake devices' capacities and starts
 * the job with its first step: when it returns, m already holds the two
 * ranks (pids 1000, 1001) and the inference server (pid 1002) with their
 * memory, launches, waits and collectives, so the first snapshot taken,
 * before any tick, shows them. Never NULL (aborts on OOM). */
struct simulator *simulator__new(struct gpu_metrics *m, uint64_t seed);
/* Advances the simulated job to now_ms (any monotonic clock in ms; the first
 * call sets the clock: the step simulator__new ran is the one just before
 * now_ms). Call every tick, e.g. every 100 ms to 1 s; a gap longer than 10 s
 * is skipped rather than replayed. */
void simulator__tick(struct simulator *s, uint64_t now_ms);
void simulator__free(struct simulator *s);

#endif
