// verdict.js: what bounded a process over a time range, from the agent's
// process_time_share points (docs/api.md): the mean share of the wall time
// its leading thread spent in each state over the seconds it had points,
// and the verdict the agent's own rule gives those means
// (src/metrics/verdict.h). Pure functions, used by gpu.js's "What bounds
// each process" and tests/ui/verdict.test.mjs.

// The states, in the order that breaks ties (enum proc_state), what each
// means, and the verdict it gives when it bounds the process.
export const STATES = ['gpu_wait', 'collective', 'dataloader_wait', 'on_cpu', 'lock', 'io', 'sleep'];
export const STATE_INFO = {
	gpu_wait: { verdict: 'gpu', what: 'in a CUDA synchronisation, waiting for the GPU' },
	collective: { verdict: 'communication', what: 'in a collective (NCCL)' },
	dataloader_wait: { verdict: 'input', what: "waiting for a DataLoader's next batch" },
	on_cpu: { verdict: 'cpu', what: 'on a CPU' },
	lock: { verdict: 'lock', what: 'blocked in a lock (futex)' },
	io: { verdict: 'io', what: 'blocked in reads, writes, polls or page faults' },
	sleep: { verdict: 'idle', what: 'asleep by choice (sleeps, waits for a child)' },
};
// The least mean share that makes a state the bound (VERDICT_MIN_SHARE).
export const MIN_SHARE = 0.2;
// The least mean share shown, in the bar and in words (what the agent sends).
export const SHOWN_SHARE = 0.005;
// Means are sums of floats divided: one within this of MIN_SHARE is at it.
const EPS = 1e-9;

// Each state's mean share over the samples of series (the points of
// process_time_share: {labels: {node, pid, state}, points: [[t, v]]}, v
// null where there is none). A sample is one process (node and pid) at one
// time; a state it has no point for counts 0 there. Returns {samples, means}.
export function meanShares(series) {
	const samples = new Set();
	const sum = Object.fromEntries(STATES.map((s) => [s, 0]));
	for (const s of series) {
		const l = s.labels || {}, known = l.state in sum;
		for (const [t, v] of s.points) {
			if (v === null || !Number.isFinite(v))
				continue;
			samples.add(`${l.node || ''}\u0000${l.pid || ''}\u0000${t}`);
			if (known)
				sum[l.state] += v;
		}
	}
	const n = samples.size;
	return { samples: n, means: Object.fromEntries(STATES.map((s) => [s, n ? sum[s] / n : 0])) };
}

// The verdict of mean shares: the state with the largest (the first in
// STATES on a tie) when it is at least MIN_SHARE, else idle. Returns
// {verdict: 'gpu' ... 'idle', state: the bounding state or null}.
export function judge(means) {
	let best = null;
	for (const s of STATES)
		if ((means[s] || 0) > (best ? means[best] : 0))
			best = s;
	if (!best || means[best] < MIN_SHARE - EPS)
		return { verdict: 'idle', state: null };
	return { verdict: STATE_INFO[best].verdict, state: best };
}

// "gpu-bound", ..., "idle" (as sonde watch and record print them).
export const verdictText = (v) => (v === 'idle' ? 'idle' : v + '-bound');

// A share as the UI prints it: "61 %".
export const fmtShare = (v) => Math.round(v * 100) + ' %';

// The states shown (mean at least SHOWN_SHARE), largest first (ties in
// STATES order): [[state, mean]].
export function shown(means) {
	return STATES.filter((s) => means[s] >= SHOWN_SHARE)
		.sort((a, b) => means[b] - means[a] || STATES.indexOf(a) - STATES.indexOf(b))
		.map((s) => [s, means[s]]);
}
