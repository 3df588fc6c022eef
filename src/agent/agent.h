/* agent.h: the node daemon (src/agent/agent.c) as `sonde agent` and
 * `sonde run` start it: CPU sampling, the CUDA and NCCL probes, metrics on
 * HTTP, the WebSocket stream, alerts, and profile windows. */
#ifndef SONDE_AGENT_AGENT_H
#define SONDE_AGENT_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#define AGENT_MAX_PIDS 1024
#define AGENT_MAX_SINKS 8
#define AGENT_MAX_CONFIG_DEVICES 64

struct tls_client_opts;

struct agent_opts {
	bool simulate; /* synthetic GPU telemetry, no BPF */
	int freq;      /* CPU samples per second per CPU */
	const char *metrics_addr, *ws_addr;
	unsigned interval_ms;				 /* WebSocket push interval */
	unsigned window_ms;				 /* profile window */
	uint64_t duration_ms;				 /* stop after; 0: until a signal */
	const char *rules;				 /* rule file; NULL: the default rules */
	double memory_ratio, nccl_stuck_s, launch_p99_s; /* default rules' thresholds; 0: default */
	double dataloader_stuck_s;			 /* DataLoaderWaitStuck's; 0: default */
	double sync_stuck_s;				 /* CudaSyncStuck's; 0: default */
	const char *webhooks[AGENT_MAX_SINKS];
	int nwebhooks;
	const char *alertmanagers[AGENT_MAX_SINKS];
	int nalertmanagers;
	int gpu_mem_dev[AGENT_MAX_CONFIG_DEVICES]; /* --gpu-memory: device (-1: all) */
	uint64_t gpu_mem[AGENT_MAX_CONFIG_DEVICES];
	int ngpu_mem;
	int pids[AGENT_MAX_PIDS];
	int npids; /* 0: every process */
	bool cpu, gpu, gpu_stacks;
	bool offcpu;		/* the offcpu profile (needs cpu) */
	uint64_t offcpu_min_ns; /* its shortest block; 0: OFFCPU_MIN_NS_DEFAULT */
	uint32_t offcpu_rate;	/* its waits a second at most; 0: OFFCPU_RATE_DEFAULT */
	bool no_library_search; /* don't walk the filesystems for CUDA/NCCL libraries */
	const char *node;	/* node name; default the host name */
	const char *server;	/* ship windows to this server (http://HOST:PORT); NULL: don't */
	uint64_t unwind_memory; /* bytes of unwind tables; 0: the default */
	uint64_t buffer_bytes, buffer_age_ms; /* the queue for the server; 0: defaults */
	/* https:// servers: the CA, client certificate and key (net/tls.h),
	 * checked beforehand; borrowed; NULL: the system's CAs. */
	const struct tls_client_opts *tls;
	/* The token a server run with --auth asks for (--token, SONDE_TOKEN);
	 * NULL: none. */
	const char *token;
	/* --state: the shipper's state file (shipper.h); NULL: none. */
	const char *state_path;
	unsigned alert_resend_ms; /* firing alerts again to Alertmanager and the server; 0: 30 s */
	/* How long an exited process's series stay (--exited-grace); 0: 2 min. */
	uint64_t exited_grace_ms;
	const char *ui_url; /* printed on start-up (sonde run); NULL: none */
	/* The rules naming a process's service (agent/service.h); NULL:
	 * SERVICE_BY_DEFAULT. */
	const char *service_by;
};

/* Defaults: 49 Hz, 127.0.0.1:9091 and :9092, 1 s, 10 s windows, CPU and GPU
 * with stacks, node = hostname. */
void agent_opts__init(struct agent_opts *o);

/* Runs the daemon until SIGINT/SIGTERM or the duration, then writes the
 * last partial window. Returns the exit code: 0, or 1 after printing why it
 * could not start (not root, no BTF, address in use, a bad rule file...). */
int agent_run(const struct agent_opts *o);

#endif
