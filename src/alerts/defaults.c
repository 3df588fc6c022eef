/* defaults.c: the default alert rules -- what `sonde agent` evaluates
 * without --rules, and what `sonde agent --print-rules` prints as a starting
 * point: the seed daemon's GPU OOM warning, a stuck NCCL collective, a CUDA
 * launch latency spike and a stuck DataLoader wait, with thresholds from
 * struct alert_defaults (--memory-ratio, --nccl-stuck, --launch-p99,
 * --dataloader-stuck). They are written as a rule
 * file and loaded like any other, so the defaults and the documented grammar
 * can't drift apart. */
#include "alerts/alerts_internal.h"
#include "common/clock.h"
#include "common/duration.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"

/* A threshold in seconds as a duration: "1m", "2s", "1ms", else "500us". */
static void threshold_text(char *buf, size_t len, double secs)
{
	double ms = secs * MS_PER_SEC;

	if (ms >= 1 && ms == (double)(uint64_t)ms)
		duration_format(buf, len, (uint64_t)ms);
	else
		alert_format_humanize_duration(buf, len, secs);
}

char *alert_defaults__yaml(const struct alert_defaults *d)
{
	double mem = d && d->gpu_memory_ratio > 0 ? d->gpu_memory_ratio : 0.95;
	double stuck = d && d->nccl_stuck_seconds > 0 ? d->nccl_stuck_seconds : 60;
	double p99 = d && d->launch_p99_seconds > 0 ? d->launch_p99_seconds : 0.001;
	double dl = d && d->dataloader_stuck_seconds > 0 ? d->dataloader_stuck_seconds : 60;
	double sy = d && d->sync_stuck_seconds > 0 ? d->sync_stuck_seconds : 60;
	char mem_s[40], mem_pct[40], stuck_s[40], stuck_h[40], p99_s[40], p99_h[40];
	char dl_s[40], dl_h[40], sy_s[40], sy_h[40];
	char *out;

	alert_format_value(mem_s, sizeof(mem_s), mem);
	alert_format_humanize_percentage(mem_pct, sizeof(mem_pct), mem);
	alert_format_value(stuck_s, sizeof(stuck_s), stuck);
	threshold_text(stuck_h, sizeof(stuck_h), stuck);
	alert_format_value(p99_s, sizeof(p99_s), p99);
	threshold_text(p99_h, sizeof(p99_h), p99);
	alert_format_value(dl_s, sizeof(dl_s), dl);
	threshold_text(dl_h, sizeof(dl_h), dl);
	alert_format_value(sy_s, sizeof(sy_s), sy);
	threshold_text(sy_h, sizeof(sy_h), sy);
	if (asprintf(
		    &out,
		    "# Sonde's default alert rules: what `sonde agent` evaluates without --rules.\n"
		    "rules:\n"
		    "  # The seed daemon's \"GPU OOM Warning: triggers when gpu_memory_used_pct > "
		    "95%%\".\n"
		    "  - alert: GpuOOMWarning\n"
		    "    expr: sonde_gpu_memory_used_ratio > %s\n"
		    "    for: 30s\n"
		    "    severity: warning\n"
		    "    summary: \"GPU OOM Warning: pid {{ $labels.pid }} holds {{ $value | "
		    "humanizePercentage }} of the memory of GPU {{ $labels.gpu_id }}\"\n"
		    "    description: \"GPU memory used has stayed above %s of the device for 30s; "
		    "the next allocation may fail with out-of-memory.\"\n"
		    "  - alert: NcclCollectiveStuck\n"
		    "    expr: sonde_nccl_stuck_seconds > %s\n"
		    "    severity: critical\n"
		    "    summary: \"NCCL {{ $labels.op }} stuck for {{ $value | humanizeDuration "
		    "}} "
		    "on rank {{ $labels.rank }} of communicator {{ $labels.comm }} "
		    "(pid {{ $labels.pid }})\"\n"
		    "    description: \"A thread of pid {{ $labels.pid }} has waited more than %s "
		    "for the GPU after ncclX({{ $labels.op }}): a peer rank may have died, hung "
		    "or taken another path.\"\n"
		    "  - alert: CudaLaunchLatencyHigh\n"
		    "    expr: zernel_cuda_launch_latency_seconds{quantile=\"0.99\"} > %s\n"
		    "    for: 1m\n"
		    "    severity: warning\n"
		    "    summary: \"CUDA launch latency p99 of pid {{ $labels.pid }} is {{ $value "
		    "| "
		    "humanizeDuration }} (threshold %s)\"\n"
		    "    description: \"Kernel launches have been slow for a minute: the launching "
		    "thread is starved of CPU or the launch queue is full.\"\n"
		    "  - alert: DataLoaderWaitStuck\n"
		    "    expr: sonde_dataloader_stuck_seconds > %s\n"
		    "    severity: critical\n"
		    "    summary: \"DataLoader wait stuck for {{ $value | humanizeDuration }} at "
		    "{{ $labels.file }}:{{ $labels.line }} in {{ $labels.function }} (pid {{ "
		    "$labels.pid }} {{ $labels.process }})\"\n"
		    "    description: \"Thread {{ $labels.tid }} of pid {{ $labels.pid }} has "
		    "waited more than %s for its next batch from a DataLoader: a worker may have "
		    "died or hung, or the data source stalled.\"\n"
		    "  - alert: CudaSyncStuck\n"
		    "    expr: sonde_cuda_sync_stuck_seconds > %s\n"
		    "    severity: critical\n"
		    "    summary: \"{{ $labels.api }} stuck for {{ $value | humanizeDuration }} at "
		    "{{ $labels.file }}:{{ $labels.line }} in {{ $labels.function }} (pid {{ "
		    "$labels.pid }} {{ $labels.process }})\"\n"
		    "    description: \"Thread {{ $labels.tid }} of pid {{ $labels.pid }} has "
		    "waited more than %s in {{ $labels.api }} for its kernels or copies: a kernel "
		    "may be hung, or the GPU lost.\"\n",
		    mem_s, mem_pct, stuck_s, stuck_h, p99_s, p99_h, dl_s, dl_h, sy_s, sy_h) < 0)
		return NULL;
	return out;
}

struct alert_engine *alert_engine__new_defaults(const struct alert_defaults *d)
{
	char *yaml = alert_defaults__yaml(d);
	char err[512];
	struct alert_engine *e;

	if (!yaml) {
		errno = ENOMEM;
		return NULL;
	}
	e = alert_engine__load_string(yaml, "<default rules>", err, sizeof(err));
	if (!e)
		pr_err("can't load the default alert rules: %s -- a bug, please report it", err);
	free(yaml);
	return e;
}
