// verdict.test.mjs: unit tests of ui/js/verdict.js, run with `node --test`
// by tests/integration/test_ui.py before the browser tests: each state's
// mean share over a process's seconds (missing states 0, several pids
// and nodes as separate samples), and the verdict of the means (the
// largest at 0.2 or more, ties to the earlier state, else idle).

import test from 'node:test';
import assert from 'node:assert/strict';
import { STATES, meanShares, judge, verdictText, fmtShare, shown } from '../../ui/js/verdict.js';

const ser = (pid, state, points, node = 'n') => ({ labels: { node, pid, state }, points });
const close = (a, b) => assert.ok(Math.abs(a - b) < 1e-12, `${a} != ${b}`);

test('means: over the seconds a process has points, missing states 0', () => {
	const { samples, means } = meanShares([
		ser('1', 'gpu_wait', [[1000, 0.8], [2000, 0.8]]),
		ser('1', 'on_cpu', [[1000, 0.1], [2000, 0.1], [3000, 0.5]]),
	]);
	assert.equal(samples, 3);
	close(means.gpu_wait, 1.6 / 3);
	close(means.on_cpu, 0.7 / 3);
	assert.deepEqual(Object.keys(means), STATES);
	assert.equal(means.sleep, 0);
});

test('means: each pid (and node) at each time is a sample; no value is no sample', () => {
	const { samples, means } = meanShares([
		ser('1', 'gpu_wait', [[1000, 0.8], [2000, null]]),
		ser('2', 'dataloader_wait', [[1000, 0.6]]),
		ser('1', 'io', [[1000, 0.2]], 'other-node'),
		ser('3', 'no_such_state', [[1000, 0.9]]),
	]);
	assert.equal(samples, 4);
	close(means.gpu_wait, 0.2);
	close(means.dataloader_wait, 0.15);
	close(means.io, 0.05);
	assert.deepEqual(meanShares([]), { samples: 0, means: Object.fromEntries(STATES.map((s) => [s, 0])) });
});

test('judge: the largest mean share at 0.2 or more, ties to the earlier state, else idle', () => {
	const m = (o) => Object.fromEntries(STATES.map((s) => [s, o[s] || 0]));
	assert.deepEqual(judge(m({ gpu_wait: 0.4, dataloader_wait: 0.3 })), { verdict: 'gpu', state: 'gpu_wait' });
	assert.deepEqual(judge(m({ dataloader_wait: 0.6, on_cpu: 0.2 })), { verdict: 'input', state: 'dataloader_wait' });
	assert.deepEqual(judge(m({ collective: 0.3, lock: 0.3 })), { verdict: 'communication', state: 'collective' });
	assert.deepEqual(judge(m({ lock: 0.3, collective: 0.3 - 1e-6 })), { verdict: 'lock', state: 'lock' });
	assert.deepEqual(judge(m({ io: 0.5 })), { verdict: 'io', state: 'io' });
	assert.deepEqual(judge(m({ on_cpu: 0.2 })), { verdict: 'cpu', state: 'on_cpu' });
	// Six seconds of 0.2 sum to a little less than 1.2: still 0.2.
	const six = meanShares([ser('1', 'on_cpu', [1, 2, 3, 4, 5, 6].map((t) => [t * 1000, 0.2]))]);
	assert.ok(six.means.on_cpu < 0.2, 'the mean falls under 0.2 in floats');
	assert.deepEqual(judge(six.means), { verdict: 'cpu', state: 'on_cpu' });
	assert.deepEqual(judge(m({ on_cpu: 0.19, io: 0.15 })), { verdict: 'idle', state: null });
	assert.deepEqual(judge(m({ sleep: 0.9 })), { verdict: 'idle', state: 'sleep' });
	assert.deepEqual(judge(m({})), { verdict: 'idle', state: null });
});

test('words: verdicts as watch prints them, shares rounded, largest first', () => {
	assert.equal(verdictText('gpu'), 'gpu-bound');
	assert.equal(verdictText('communication'), 'communication-bound');
	assert.equal(verdictText('idle'), 'idle');
	assert.equal(fmtShare(0.614), '61 %');
	assert.deepEqual(shown({ gpu_wait: 0.1, collective: 0, dataloader_wait: 0.61, on_cpu: 0.1,
				 lock: 0.004, io: 0.005, sleep: 0 }),
			 [['dataloader_wait', 0.61], ['gpu_wait', 0.1], ['on_cpu', 0.1], ['io', 0.005]]);
});
