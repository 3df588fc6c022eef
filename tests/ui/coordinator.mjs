// coordinator.mjs: the web UI served by `sonde coordinator` with one of its
// two servers down: the views draw the live server's data and a banner
// (role status) names the missing server and why; once that server is up
// again (this test starts it, on the port it was given) the next answers
// are whole and the banner goes. Run by
// tests/integration/test_coordinator_ui.py, which starts the live server,
// loads it and starts the coordinator. Environment beyond harness.mjs's:
// SONDE_BIN, SONDE_DEAD_PORT, SONDE_DEAD_DATA.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { TRUTH, RANGE, Q, test, page, go, flame, one, shot, runAll } from './harness.mjs';

const dead = `http://127.0.0.1:${process.env.SONDE_DEAD_PORT}`;
const banner = () => page.evaluate(() => {
	const el = document.getElementById('partial-banner');
	return el && !el.hidden ? { text: el.textContent, role: el.getAttribute('role'),
				    height: el.getBoundingClientRect().height } : null;
});

test('a partial view shows a banner naming the server that did not answer', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const f = await flame();
	assert.equal(f.numTicks, TRUTH.total, 'the live server\'s samples are drawn');
	one(f, 'hot_a');
	const b = await banner();
	assert.ok(b, 'the banner is shown');
	assert.equal(b.role, 'status');
	assert.ok(b.height > 10, `the banner is visible (${b.height} px high)`);
	assert.match(b.text, /^Partial view: 1 server did not answer/);
	assert.ok(b.text.includes(dead), `it names ${dead}: ${b.text}`);
	await shot('coordinator-partial');
});

test('the banner goes once every server answers again', async () => {
	const srv = spawn(process.env.SONDE_BIN, ['server', '--listen', `127.0.0.1:${process.env.SONDE_DEAD_PORT}`,
						  '--data', process.env.SONDE_DEAD_DATA], { stdio: 'ignore' });
	try {
		const deadline = Date.now() + 20000;
		for (;;) {
			try {
				if ((await fetch(dead + '/healthz')).ok)
					break;
			} catch (e) {
				// not up yet
			}
			assert.ok(Date.now() < deadline, 'the second server came up within 20 s');
			await new Promise((r) => setTimeout(r, 100));
		}
		await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
		assert.equal(await banner(), null, 'no banner when every server answered');
		assert.equal((await flame()).numTicks, TRUTH.total);
	} finally {
		srv.kill('SIGKILL');
	}
});

await runAll();
