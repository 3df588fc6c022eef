// a11y.mjs: an accessibility pass over every page of the UI with axe-core
// (from npm, run in the page), in the light and the dark theme: no serious
// or critical violation. Registered with harness.mjs's runner; imported by
// run.mjs.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { TRUTH, RANGE, test, page, go, Q } from './harness.mjs';

const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

async function audit(what) {
	if (!(await page.evaluate(() => typeof window.axe === 'object')))
		await page.addScriptTag({ path: AXE });
	const r = await page.evaluate(async () => {
		const res = await window.axe.run(document, { resultTypes: ['violations'] });
		return res.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }));
	});
	const bad = r.filter((v) => v.impact === 'serious' || v.impact === 'critical');
	assert.deepEqual(bad, [], `${what}: serious or critical accessibility violations`);
	return r.length;
}

test('accessibility: no serious or critical axe-core violation on any page, light or dark', async () => {
	const pages = [
		['profile', { query: Q(TRUTH.service), ...RANGE }],
		['sandwich', { query: Q(TRUTH.service), ...RANGE, view: 'sandwich', fn: TRUTH.hottest }],
		['diff', { query: Q(TRUTH.service), ...RANGE, view: 'diff' }],
		['gpu', { view: 'gpu', ...RANGE }],
		['alerts', { view: 'alerts' }],
		['empty', { from: String(TRUTH.start_ms - 7200e3), until: String(TRUTH.start_ms - 3600e3) }],
	];
	const minor = {};
	try {
		for (const scheme of ['light', 'dark']) {
			await page.emulateMedia({ colorScheme: scheme });
			for (const [name, params] of pages) {
				await go(params);
				minor[`${name}/${scheme}`] = await audit(`${name} (${scheme})`);
			}
		}
	} finally {
		await page.emulateMedia({ colorScheme: 'light' });
	}
	console.log('  a11y: moderate or minor violations per page: ' + JSON.stringify(minor));
});
