/* simulate.c: the synthetic training job of simulate.h. Time advances in
 * whole training steps; each step of each rank emits the events the CUDA and
 * NCCL probes would for it, drawn from a seeded generator (splitmix64,
 * Box-Muller normals) so that a run can be reproduced. */
#include "metrics/simulate.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

#define SIM_STEP_MS 250
#define SIM_CAPACITY (80 * GIB)
#define SIM_LAUNCHES_PER_STEP 400
#define SIM_BASE_BYTES (36 * GIB) /* weights, gradients, optimizer state */
#define SIM_ACT_CHUNKS 8	  /* activations: up to 8 x 3 GiB per step */
#define SIM_ACT_CHUNK (3 * GIB)
#define SIM_LEAK_BYTES (32 * MIB) /* rank 1, per step */
#define SIM_RESTART_RATIO 0.97
#define SIM_HANG_PERIOD_MS 600000 /* a hang episode every 10 min */
#define SIM_HANG_START_MS 240000  /* ... from minute 4 */
#define SIM_HANG_LEN_MS 75000	  /* ... for 75 s */
#define SIM_MAX_GAP_MS 10000
#define SIM_COMM 0x7f3a2c000000ull

struct sim_rank {
	uint32_t pid;
	int device, rank;
	uint64_t act, leaked; /* activations held from the last step; leak */
	bool stuck;
};

struct simulator {
	struct gpu_metrics *m;
	uint64_t rng;
	bool started;
	uint64_t start_ms, done_ms; /* simulated time consumed, in steps */
	struct sim_rank ranks[2];
	uint32_t inference_pid, next_pid;
	uint64_t inference_bytes;
	struct agent_health health;
};

static uint64_t next_u64(struct simulator *s)
{
	uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1). */
static double uniform(struct simulator *s)
{
	return ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(struct simulator *s)
{
	return sqrt(-2 * log(uniform(s))) * cos(2 * M_PI * uniform(s));
}

/* Lognormal with the given median and shape, in the unit of median. */
static uint64_t lognormal(struct simulator *s, double median, double sigma)
{
	return (uint64_t)(median * exp(sigma * normal(s)));
}

static void rank_start(struct simulator *s, struct sim_rank *r)
{
	gpu_metrics__set_name(s->m, r->pid, "train.py");
	gpu_metrics__alloc(s->m, r->pid, r->device, SIM_BASE_BYTES);
	r->act = r->leaked = 0;
	s->health.gpu_events++;
}

/* One training step of rank r. */
static void rank_step(struct simulator *s, struct sim_rank *r)
{
	struct gpu_metrics *m = s->m;
	uint64_t events = 0;
	int chunks = SIM_ACT_CHUNKS / 2 + (int)(next_u64(s) % (SIM_ACT_CHUNKS / 2 + 1));

	gpu_metrics__dataloader_wait(m, r->pid, lognormal(s, 8e6, 0.5));
	gpu_metrics__copy(m, r->pid, GPU_COPY_H2D, 64 * MIB);
	events += 2;
	/* The last step's activations go, this step's (a varying batch
	 * shape) pile up and stay until the next step. */
	for (; r->act; r->act -= SIM_ACT_CHUNK) {
		gpu_metrics__release(m, r->pid, r->device, SIM_ACT_CHUNK);
		events++;
	}
	for (int i = 0; i < chunks; i++) {
		gpu_metrics__alloc(m, r->pid, r->device, SIM_ACT_CHUNK);
		r->act += SIM_ACT_CHUNK;
		events++;
	}
	for (int i = 0; i < SIM_LAUNCHES_PER_STEP; i++) {
		uint64_t ns =
			uniform(s) < 0.005 ? lognormal(s, 200e3, 0.8) : lognormal(s, 6e3, 0.45);

		gpu_metrics__launch(m, r->pid, ns);
		events++;
	}
	if (r->rank == 1) {
		gpu_metrics__alloc(m, r->pid, r->device, SIM_LEAK_BYTES);
		r->leaked += SIM_LEAK_BYTES;
		events++;
	}
	gpu_metrics__wait(m, r->pid, "cudaStreamSynchronize", lognormal(s, 40e6, 0.3));
	gpu_metrics__nccl(m, r->pid, NCCL_OP_ALLREDUCE, 256 * MIB, lognormal(s, 30e6, 0.35));
	gpu_metrics__copy(m, r->pid, GPU_COPY_D2H, 4096);
	events += 3;
	if (r->rank == 0 && uniform(s) < 0.05) {
		gpu_metrics__nccl(m, r->pid, NCCL_OP_BROADCAST, 4 * MIB, lognormal(s, 2e6, 0.4));
		events++;
	}
	s->health.gpu_events += events;
}

/* Rank 1's leak has filled its GPU: it dies and the job restarts it. */
static void maybe_restart(struct simulator *s, struct sim_rank *r)
{
	uint64_t used = SIM_BASE_BYTES + r->act + r->leaked;

	if ((double)used / (double)SIM_CAPACITY < SIM_RESTART_RATIO)
		return;
	gpu_metrics__process_exit(s->m, r->pid);
	r->pid = s->next_pid++;
	rank_start(s, r);
}

static void inference_step(struct simulator *s, uint64_t t_ms)
{
	/* A KV cache that breathes between 6 and 10 GiB over a minute. */
	double phase = sin(2 * M_PI * (double)(t_ms % 60000) / 60000.0);
	uint64_t want = (uint64_t)((8.0 + 2.0 * phase) * (double)GIB) & ~(MIB - 1);

	if (want > s->inference_bytes)
		gpu_metrics__alloc(s->m, s->inference_pid, 0, want - s->inference_bytes);
	else if (want < s->inference_bytes)
		gpu_metrics__release(s->m, s->inference_pid, 0, s->inference_bytes - want);
	s->inference_bytes = want;
	for (int i = 0; i < 60; i++)
		gpu_metrics__launch(s->m, s->inference_pid, lognormal(s, 4e3, 0.3));
	gpu_metrics__wait(s->m, s->inference_pid, "cudaDeviceSynchronize", lognormal(s, 3e6, 0.4));
	gpu_metrics__copy(s->m, s->inference_pid, GPU_COPY_D2H, 256 * 1024);
	s->health.gpu_events += 63;
}

/* The job's step at simulated time done_ms, which it advances. */
static void job_step(struct simulator *s)
{
	struct sim_rank *r1 = &s->ranks[1];
	uint64_t t = s->done_ms, in_period = t % SIM_HANG_PERIOD_MS;
	bool hang =
		in_period >= SIM_HANG_START_MS && in_period < SIM_HANG_START_MS + SIM_HANG_LEN_MS;

	s->done_ms += SIM_STEP_MS;
	if (hang) {
		/* Both ranks wait in the collective; the stuck detector
		 * reports the rank blocked in the synchronize after it. */
		r1->stuck = true;
		gpu_metrics__set_stuck(s->m, r1->pid, NCCL_OP_ALLREDUCE, r1->rank, 2, SIM_COMM,
				       (double)(in_period - SIM_HANG_START_MS) / MS_PER_SEC);
	} else {
		if (r1->stuck) {
			gpu_metrics__set_stuck(s->m, r1->pid, NCCL_OP_ALLREDUCE, r1->rank, 2,
					       SIM_COMM, 0);
			r1->stuck = false;
		}
		for (int i = 0; i < 2; i++)
			rank_step(s, &s->ranks[i]);
		maybe_restart(s, r1);
	}
	inference_step(s, t);
	s->health.cpu_samples += 99 * 4 * SIM_STEP_MS / MS_PER_SEC;
}

static void publish_health(struct simulator *s)
{
	s->health.map_fill_ratio = 0.02 + 0.01 * (double)(s->health.gpu_events % 7);
	gpu_metrics__set_health(s->m, &s->health);
}

struct simulator *simulator__new(struct gpu_metrics *m, uint64_t seed)
{
	struct simulator *s = xcalloc(1, sizeof(*s));

	s->m = m;
	s->rng = seed;
	s->ranks[0] = (struct sim_rank){.pid = 1000, .device = 0, .rank = 0};
	s->ranks[1] = (struct sim_rank){.pid = 1001, .device = 1, .rank = 1};
	s->inference_pid = 1002;
	s->next_pid = 1003;
	gpu_metrics__set_name(m, s->inference_pid, "infer-server");
	gpu_metrics__device_capacity(m, 0, SIM_CAPACITY, "simulated");
	gpu_metrics__device_capacity(m, 1, SIM_CAPACITY, "simulated");
	s->health.probe_attached = 24;
	/* The job is up, its first step done, before the first tick: whoever
	 * reads m first (the first /json, a WebSocket client's first frame)
	 * sees the processes with their memory, launches, waits and
	 * collectives, not an empty machine. */
	rank_start(s, &s->ranks[0]);
	rank_start(s, &s->ranks[1]);
	job_step(s);
	publish_health(s);
	return s;
}

void simulator__free(struct simulator *s)
{
	free(s);
}

void simulator__tick(struct simulator *s, uint64_t now_ms)
{
	if (!s->started) {
		/* The first tick comes right after the step simulator__new ran. */
		s->started = true;
		s->start_ms = now_ms >= s->done_ms ? now_ms - s->done_ms : 0;
	}
	if (now_ms < s->start_ms + s->done_ms)
		return;
	if (now_ms - (s->start_ms + s->done_ms) > SIM_MAX_GAP_MS)
		s->done_ms = now_ms - s->start_ms - SIM_STEP_MS;
	while (s->start_ms + s->done_ms + SIM_STEP_MS <= now_ms)
		job_step(s);
	publish_health(s);
}
