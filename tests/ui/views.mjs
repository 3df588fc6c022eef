// views.mjs: the browser tests of the profile and diff views' controls --
// the top table's columns at common screen widths, the diff's defaults,
// the whole view in the URL, the pickers and label filters, the offcpu
// type, time ranges, auto-refresh, the theme, the Alerts page. Registered with harness.mjs's
// runner; imported by run.mjs.

import assert from 'node:assert/strict';
import { TRUTH, RANGE, test, page, frames, near, idle, go, shot, flame, one, pixel, pct, Q }
	from './harness.mjs';

const WIDTHS = [1280, 1440, 1920];

test('the top table shows every column whole at 1280, 1440 and 1920 px', async () => {
	try {
		for (const width of WIDTHS) {
			await page.setViewportSize({ width, height: 900 });
			await go({ query: Q(TRUTH.service), ...RANGE });
			const r = await page.evaluate(() => {
				const box = document.querySelector('.table-scroll').getBoundingClientRect();
				const cells = [...document.querySelectorAll('#top-table th, #top-table tbody ' +
					'tr:nth-child(-n+10) td')];
				const out = [];
				for (const c of cells) {
					const b = c.getBoundingClientRect();
					const text = c.innerText.trim();
					if (b.right > box.right + 1 || b.left < box.left - 1 || b.width < 4)
						out.push(`${text || c.className} at ${b.left}..${b.right} outside ` +
							 `${box.left}..${box.right}`);
					// Numbers are never cut: their cell holds all of them.
					if (c.classList.contains('num') && c.scrollWidth > c.clientWidth + 1)
						out.push(`${text} cut: ${c.scrollWidth} > ${c.clientWidth}`);
				}
				const s = document.querySelector('.table-scroll');
				return { out, scroll: s.scrollWidth - s.clientWidth,
					 heads: [...document.querySelectorAll('#top-table th')].map((t) => t.innerText) };
			});
			assert.deepEqual(r.out, [], `at ${width} px`);
			assert.ok(r.scroll <= 1, `no horizontal scrolling at ${width} px (${r.scroll} px)`);
			for (const h of ['Self', 'Self %', 'Total', 'Total %'])
				assert.ok(r.heads.includes(h), `${h} heads a column at ${width} px: ${r.heads}`);
			await shot(`20-table-${width}`);
		}
	} finally {
		await page.setViewportSize({ width: 1400, height: 900 });
	}
});

test('a capped top table says it is capped', async () => {
	await go({ query: Q(TRUTH.wide_service), ...RANGE, view: 'table' });
	const text = await page.$eval('#table-count', (e) => e.innerText);
	assert.match(text, /top 1,?000 functions \(more are not listed\)/, text);
	assert.equal(await page.$$eval('#top-table tbody tr', (r) => r.length), 1000);
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'table' });
	assert.match(await page.$eval('#table-count', (e) => e.innerText), /^\d+ of \d+ functions$/);
});

test('the diff defaults to two adjacent windows holding data, on a clamped scale, with a table', async () => {
	// A range with an empty half hour before the data: the windows split
	// the data, not the range.
	await go({ query: Q(TRUTH.service), view: 'diff', from: String(TRUTH.start_ms - 1800e3),
		   until: String(TRUTH.end_ms + 5000) });
	const sel = await page.evaluate(() => ['left', 'right'].map((k) => {
		const s = window.__sonde.charts[k].selections[0];
		return [s.from, s.until];
	}));
	near(sel[0][0], TRUTH.start_ms, 1, 'the baseline starts with the data');
	near(sel[0][1], TRUTH.half_ms, 1, 'the baseline ends half way through the data');
	near(sel[1][0], TRUTH.half_ms, 1, 'the comparison starts where the baseline ends');
	near(sel[1][1], TRUTH.end_ms, 1, 'the comparison ends with the data');
	assert.equal(await page.$$eval('#diff-warning', (e) => e.length), 0, 'both sides hold data');
	// The scale: ±10 pp by default, the 20 pp changes drawn at its end.
	assert.equal(await page.$eval('#diff-scale', (e) => e.value), '10');
	assert.match(await page.$eval('#diff-max', (e) => e.innerText), /largest change 20\.0 pp \(beyond/);
	let f = await flame();
	const red10 = await pixel(one(f, 'hot_b'));
	await page.fill('#diff-scale', '50');
	await page.dispatchEvent('#diff-scale', 'change');
	await frames(page, 3);
	f = await flame();
	const red50 = await pixel(one(f, 'hot_b'));
	assert.ok(red10[0] - red10[1] > red50[0] - red50[1] + 30,
		  `20 pp is redder on a 10 pp scale than on 50: ${red10} vs ${red50}`);
	assert.match(page.url(), /scale=50/);
	// The table: each function's share on each side and the change.
	const rows = await page.$$eval('#diff-table tbody tr', (trs) => trs.map((tr) =>
		[...tr.querySelectorAll('td')].map((td) => td.innerText)));
	const byName = Object.fromEntries(rows.map((r) => [r[0], r.slice(1)]));
	for (const n of Object.keys(TRUTH.old)) {
		const d = TRUTH.new[n] - TRUTH.old[n];
		assert.deepEqual(byName[n], [pct(TRUTH.old[n], 100), pct(TRUTH.new[n], 100),
			`${d > 0 ? '+' : d < 0 ? '−' : ''}${Math.abs(d).toFixed(2)} pp`], n);
	}
	await shot('21-diff-defaults');
	// An empty side is said, not drawn as a sea of red.
	await go({ query: Q(TRUTH.service), view: 'diff', ...RANGE,
		   left_from: String(TRUTH.start_ms - 1800e3), left_until: String(TRUTH.start_ms - 900e3) });
	assert.match(await page.$eval('#diff-warning', (e) => e.innerText), /baseline has no samples/);
	await shot('22-diff-empty-side');
});

test('the whole view is in the URL and survives a reload', async () => {
	const state = { query: Q(TRUTH.service), from: String(TRUTH.start_ms), until: String(TRUTH.end_ms),
			view: 'both', search: 'hot_b', orient: 'flame', split: '60', refresh: '5m' };
	await go(state);
	const seen = await page.evaluate(() => ({
		type: document.querySelector('#pick-type').value,
		service: document.querySelector('#pick-service').value,
		search: document.querySelector('#search').value,
		orient: window.__sonde.flame.orientation,
		split: document.querySelector('.profile-body').style.getPropertyValue('--split'),
		refresh: document.querySelector('#auto-refresh').value,
		range: document.querySelector('#range-label').innerText,
	}));
	assert.deepEqual({ ...seen, range: undefined }, { type: 'cpu', service: TRUTH.service,
		search: 'hot_b', orient: 'flame', split: '60%', refresh: '5m', range: undefined });
	const u = new URL(page.url());
	for (const [k, v] of Object.entries(state))
		if (k !== 'view')
			assert.equal(u.searchParams.get(k), v, `${k} kept in the URL`);
	// Changed through the UI, then reloaded.
	await page.focus('.splitter');
	await page.keyboard.press('ArrowLeft');
	assert.equal(new URL(page.url()).searchParams.get('split'), '55');
	await page.selectOption('#auto-refresh', '');
	await page.reload();
	await idle();
	assert.equal(await page.$eval('.profile-body', (e) => e.style.getPropertyValue('--split')), '55%');
	assert.equal(new URL(page.url()).searchParams.get('refresh'), null);
});

test('a new profile type keeps the service; label filters complete names and values', async () => {
	await go({ query: Q(TRUTH.other_service), ...RANGE });
	await page.selectOption('#pick-type', 'gpu_launch');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('query'),
		     `{service_name="${TRUTH.other_service}", type="gpu_launch"}`);
	assert.equal(await page.$eval('#pick-service', (e) => e.value), TRUTH.other_service);

	await go({ query: Q(TRUTH.service), ...RANGE });
	await page.click('#add-filter');
	await page.waitForFunction(() => document.querySelectorAll('#dl-names option').length > 0);
	const names = await page.$$eval('#dl-names option', (o) => o.map((x) => x.value));
	for (const n of ['comm', 'pid', 'service_name', 'type'])
		assert.ok(names.includes(n), `label names offered: ${names}`);
	await page.fill('#filter-name', 'pid');
	await page.dispatchEvent('#filter-name', 'change');
	await page.waitForFunction(() => document.querySelectorAll('#dl-values option').length > 0);
	assert.deepEqual(await page.$$eval('#dl-values option', (o) => o.map((x) => x.value)), ['4242']);
	await page.selectOption('#filter-op', '!=');
	await page.fill('#filter-value', '4242');
	await page.click('#filter-add');
	await idle();
	assert.match(new URL(page.url()).searchParams.get('query'), /pid!="4242"/);
	assert.match(await page.$eval('#filters', (e) => e.innerText), /pid!="4242"/);
	assert.match(await page.$eval('.empty', (e) => e.innerText), /No samples for this selection/);
	await shot('23-filter');
	await page.click('#filters .chip button');
	await idle();
	assert.doesNotMatch(new URL(page.url()).searchParams.get('query'), /pid!=/);
	assert.ok(await page.$('#top-table'), 'the filter removed, the profile is back');
});

test('the offcpu type is offered like any type, its values in time', async () => {
	await go({ query: Q(TRUTH.other_service), ...RANGE });
	const types = await page.$$eval('#pick-type option', (o) => o.map((x) => x.value));
	assert.ok(types.includes('offcpu'), `types offered: ${types}`);
	await page.selectOption('#pick-type', 'offcpu');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('query'),
		     `{service_name="${TRUTH.other_service}", type="offcpu"}`);
	// 60 windows of 4 s blocked.
	assert.match(await page.$eval('#total-info', (e) => e.innerText), /^4\.0 min in range/);
	const rows = await page.$$eval('#top-table tbody tr', (trs) => trs.map((tr) =>
		[...tr.querySelectorAll('td')].map((td) => td.innerText.trim())));
	const row = (name) => rows.find((r) => r[0] === name) || [];
	assert.equal(row('next_batch')[5], '75.00%', `next_batch's total share: ${row('next_batch')}`);
	assert.equal(row('cudaDeviceSynchronize')[5], '25.00%');
	await shot('24-offcpu');
});

test('an absolute time range, and the Alerts page without one', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE });
	await page.click('#range-abs');
	// As the input writes it: Chromium drops ":00" seconds, and fill()
	// checks the value it reads back.
	const local = (ms) => new Date(ms - new Date(ms).getTimezoneOffset() * 60e3).toISOString()
		.slice(0, 19).replace(/:00$/, '');
	const a = TRUTH.half_ms, b = TRUTH.end_ms;
	await page.fill('#abs-from', local(a));
	await page.fill('#abs-until', local(b));
	await page.click('#abs-form button[type="submit"]');
	await idle();
	const u = new URL(page.url());
	assert.equal(+u.searchParams.get('from'), a);
	assert.equal(+u.searchParams.get('until'), b);
	const f = await flame();
	assert.equal(f.numTicks, TRUTH.total / 2, 'the newer half of the data');
	await page.click('#nav a[data-view="alerts"]');
	await idle();
	assert.equal(await page.isVisible('#range-preset'), false, 'no time range on the Alerts page');
	assert.equal(await page.isVisible('#theme'), true);
});

test('auto-refresh loads the view again', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE });
	const before = await page.evaluate(() => window.__sonde.renders);
	await page.selectOption('#auto-refresh', '10s');
	await page.waitForFunction((n) => window.__sonde.renders > n + 1, before, { timeout: 30000 });
	assert.match(page.url(), /refresh=10s/);
	await page.selectOption('#auto-refresh', '');
});

test('dark mode follows the system and the toggle', async () => {
	const bg = () => page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
	const lum = (c) => {
		const [r, g, b] = c.match(/\d+/g).map(Number);
		return 0.2126 * r + 0.7152 * g + 0.0722 * b;
	};
	try {
		await page.evaluate(() => localStorage.removeItem('sonde-theme'));
		await page.emulateMedia({ colorScheme: 'dark' });
		await go({ query: Q(TRUTH.service), ...RANGE });
		assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
		assert.ok(lum(await bg()) < 60, `a dark background: ${await bg()}`);
		await shot('24-dark');
		await page.click('#theme');
		assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
		assert.ok(lum(await bg()) > 200, `a light background: ${await bg()}`);
		await page.reload();
		await idle();
		assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light',
			     'the choice outlives a reload');
		await page.evaluate(() => localStorage.removeItem('sonde-theme'));
		await page.emulateMedia({ colorScheme: 'light' });
		await page.reload();
		await idle();
		assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
	} finally {
		await page.evaluate(() => localStorage.removeItem('sonde-theme'));
		await page.emulateMedia({ colorScheme: 'light' });
	}
});

test('a search result does not move the toolbar; the speedscope view names the service', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const h0 = await page.$eval('.toolbar', (e) => e.getBoundingClientRect().height);
	await page.fill('#search', '/hot_(a|b|c)/');
	await page.waitForFunction(() => document.querySelector('#search-pct')?.innerText === '100.00%');
	const h1 = await page.$eval('.toolbar', (e) => e.getBoundingClientRect().height);
	assert.equal(h1, h0, 'the toolbar keeps its height');
	const name = await page.evaluate(async (q) => {
		const r = await fetch(`api/v1/speedscope?${new URLSearchParams(q)}`);
		return (await r.json()).profiles.map((p) => p.name);
	}, { query: Q(TRUTH.service), ...RANGE });
	assert.deepEqual(name, [TRUTH.service]);
});

test('the flame graph\'s focus, hidden and collapsed functions, zoom, colours and grouping are in the URL', async () => {
	const q = new URLSearchParams({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const param = (k) => new URL(page.url()).searchParams.get(k);
	const menu = async (name, action) => {
		const f = await flame();
		const r = one(f, name);
		await page.mouse.click(f.box.x + r.x + 4, f.box.y + r.y + 8, { button: 'right' });
		await page.click(`.flame-menu:not([hidden]) [data-action="${action}"]`);
		await idle();
	};
	await go(Object.fromEntries(q));
	await menu(TRUTH.hottest, 'focus');
	assert.equal(param('focus'), TRUTH.hottest);
	assert.equal((await flame()).numTicks, TRUTH.functions[TRUTH.hottest]);
	await page.reload();
	await idle();
	assert.equal((await flame()).numTicks, TRUTH.functions[TRUTH.hottest], 'focus survives a reload');
	await page.click('.chip.undo[data-kind="focus"] button');
	await idle();
	assert.equal(param('focus'), null);
	assert.equal((await flame()).numTicks, TRUTH.total);

	await menu('run', 'hide');
	assert.equal(param('hide'), 'run');
	let f = await flame();
	assert.equal(f.rects.filter((r) => r.name === 'run').length, 0, 'run is hidden');
	near(one(f, TRUTH.hottest).w, TRUTH.functions[TRUTH.hottest] / TRUTH.total * f.width, 0.6,
	     'its callees keep their share');
	await page.click('.chip.undo[data-kind="hide"] button');
	await idle();

	await menu('run', 'collapse');
	assert.equal(param('collapse'), 'run');
	f = await flame();
	assert.equal(f.rects.filter((r) => r.name === TRUTH.hottest).length, 0, 'run\'s callees collapsed');
	await page.click('.chip.undo[data-kind="collapse"] button');
	await idle();

	f = await flame();
	const main = one(f, 'main');
	await page.mouse.click(f.box.x + main.x + 4, f.box.y + main.y + 8);
	await frames(page, 2);
	assert.equal(param('zoom'), '__libc_start_call_main;main');
	await page.reload();
	await idle();
	assert.deepEqual(await page.evaluate(() => window.__sonde.flame.zoomPath()),
			 ['__libc_start_call_main', 'main'], 'the zoomed frame survives a reload');

	await page.click('#color-by');
	assert.equal(param('color'), 'module');
	await page.reload();
	await idle();
	assert.equal(await page.evaluate(() => window.__sonde.flame.colorBy), 'module');
	assert.equal(await page.$eval('#color-by', (b) => b.getAttribute('aria-pressed')), 'true');

	await page.selectOption('#group-by', 'pid');
	await idle();
	assert.equal(param('group'), 'pid');
	f = await flame();
	assert.equal(one(f, 'pid=4242').total, TRUTH.total, 'the stacks grouped under their pid');
	await shot('25-flame-state');
});
