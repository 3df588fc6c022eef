// tsp.mjs: the Trace Server Protocol of a running `sonde server`, through
// the real npm client (tsp-typescript-client 0.9.0), checked against the
// server's own query API and the truth of what was ingested.
//
//   node tests/tsp/tsp.mjs http://127.0.0.1:PORT TRUTH.json
//
// TRUTH.json (written by tests/integration/test_tsp.py, which ingests the
// data): the services, the range of the data, the functions of the
// trainer's cpu profiles, and the GPU memory points and process states it
// sent for one process. Exits 0 when every check passes, 1 at the first
// that fails (saying what it saw).
import fs from 'node:fs';
import tsp from 'tsp-typescript-client';

const { HttpTspClient, QueryHelper, Query } = tsp;
const [base, truthFile] = process.argv.slice(2);
const truth = JSON.parse(fs.readFileSync(truthFile, 'utf8'));
const client = new HttpTspClient(base + '/tsp/api');
let checks = 0;

function fail(msg) {
	console.error('FAIL ' + msg);
	process.exit(1);
}

function check(cond, msg) {
	checks++;
	if (!cond) fail(msg);
}

const show = (v) => JSON.stringify(v, (k, x) => (typeof x === 'bigint' ? x.toString() + 'n' : x));

// The model of a response that must be 200, or a failure naming the call.
function ok(resp, what) {
	if (!resp.isOk() || resp.getModel() === undefined)
		fail(`${what}: HTTP ${resp.getStatusCode()} ${resp.getText().slice(0, 400)}`);
	return resp.getModel();
}

async function api(path, params) {
	const url = base + path + '?' + new URLSearchParams(params).toString();
	const r = await fetch(url);
	if (r.status !== 200) fail(`GET ${url}: HTTP ${r.status} ${await r.text()}`);
	return r.json();
}

function close(a, b) {
	return Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b));
}

// Health.
const health = ok(await client.checkHealth(), 'health');
check(health.status === 'UP', 'health: ' + show(health));

// Every service is a trace.
const services = (await api('/api/v1/label/values', { name: 'service_name', from: '0' })).values;
const traces = ok(await client.fetchTraces(), 'traces');
const names = traces.map((t) => t.name).sort();
check(show(names) === show([...services].sort()), `traces ${show(names)} are not the services ${show(services)}`);
check(show(names) === show([...truth.services].sort()), `traces ${show(names)}, ingested ${show(truth.services)}`);
for (const t of traces) {
	check(typeof t.start === 'bigint' && typeof t.end === 'bigint', 'times are BigInt: ' + show(t));
	check(t.start >= BigInt(truth.from_ms) * 1000000n && t.end <= BigInt(truth.until_ms) * 1000000n && t.start < t.end,
		`trace ${t.name} spans ${t.start}..${t.end}, the data ${truth.from_ms}..${truth.until_ms} ms`);
	check(t.path === `sonde:{service_name="${t.name}"}`, 'trace path: ' + t.path);
}
const trainerListed = traces.find((t) => t.name === 'trainer');
check(trainerListed.nbEvents === truth.trainer_cpu_total, `trainer nbEvents ${trainerListed.nbEvents}, ingested ${truth.trainer_cpu_total}`);

// A trace opened by its URI is the service's (the same UUID); another
// selector is a trace of its own.
const opened = ok(await client.openTrace(new Query({ uri: 'sonde:{service_name="trainer"}', name: 'trainer' })), 'open trace');
check(opened.UUID === trainerListed.UUID, `opened ${opened.UUID}, listed ${trainerListed.UUID}`);
const py = ok(await client.openTrace(new Query({ uri: 'sonde:{comm="python3"}', name: 'python procs' })), 'open by comm');
check(py.name === 'python procs' && py.nbEvents === truth.trainer_cpu_total, 'opened by comm: ' + show(py));
check(ok(await client.fetchTrace(py.UUID), 'fetch trace').UUID === py.UUID, 'fetch trace');
const bad = await client.openTrace(new Query({ uri: 'sonde:{service_name=', name: 'x' }));
check(bad.getStatusCode() === 400, 'a bad selector is a 400: ' + bad.getStatusCode());
check((await client.openTrace(new Query({ uri: 'file:///tmp/x' }))).getStatusCode() === 400, 'a file URI is a 400');

// An experiment of two traces.
const web = traces.find((t) => t.name === 'web');
const exp = ok(await client.createExperiment(new Query({ name: 'tsp-test', traces: [opened.UUID, web.UUID] })), 'create experiment');
check(exp.traces.length === 2 && exp.start <= trainerListed.start && exp.end >= web.end, 'experiment: ' + show(exp));
check(exp.nbEvents === trainerListed.nbEvents + web.nbEvents, 'experiment events ' + exp.nbEvents);
check(ok(await client.fetchExperiments(), 'experiments').some((e) => e.UUID === exp.UUID), 'experiment listed');
check(ok(await client.fetchExperiment(exp.UUID), 'fetch experiment').name === 'tsp-test', 'fetch experiment');
const again = await client.createExperiment(new Query({ name: 'tsp-test', traces: [web.UUID] }));
check(again.getStatusCode() === 409, 'same name, other traces: 409, got ' + again.getStatusCode());

// Its outputs.
const outputs = ok(await client.experimentOutputs(exp.UUID), 'outputs');
const ids = outputs.map((o) => o.id);
for (const [id, type] of [['sonde.top.cpu', 'DATA_TREE'], ['sonde.rate.cpu', 'TREE_TIME_XY'],
	['sonde.gpu_memory', 'TREE_TIME_XY'], ['sonde.states', 'TIME_GRAPH']])
	check(outputs.some((o) => o.id === id && o.type === type), `output ${id} (${type}) in ${show(ids)}`);

const start = BigInt(truth.from_ms) * 1000000n, end = BigInt(truth.until_ms) * 1000000n;

// The data tree: the trainer's top functions, exactly /api/v1/top's.
const tree = ok(await client.fetchDataTree(exp.UUID, 'sonde.top.cpu', QueryHelper.timeRangeQuery(start, end)), 'data tree').model;
check(tree.headers.map((h) => h.name).join() === 'Function,Self,Total,Module,Source', 'headers ' + show(tree.headers));
const root = tree.entries.find((e) => e.parentId === -1 && e.labels[0] === 'trainer');
check(root, 'the trainer is a root of the data tree');
const fns = tree.entries.filter((e) => e.parentId === root.id);
const top = await api('/api/v1/top', { query: '{service_name="trainer"}', type: 'cpu', from: truth.from_ms, until: truth.until_ms, limit: 200 });
check(root.labels[2] === String(top.total), `tree total ${root.labels[2]}, top ${top.total}`);
check(fns.length === top.functions.length, `tree has ${fns.length} functions, top ${top.functions.length}`);
for (const f of top.functions) {
	const e = fns.find((x) => x.labels[0] === f.name);
	check(e && e.labels[1] === String(f.self) && e.labels[2] === String(f.total),
		`${f.name}: top self ${f.self} total ${f.total}, tree ${e && show(e.labels)}`);
}
for (const [name, [self, total]] of Object.entries(truth.trainer_functions)) {
	const e = fns.find((x) => x.labels[0] === name);
	check(e && e.labels[1] === String(self) && e.labels[2] === String(total),
		`${name}: ingested self ${self} total ${total}, tree ${e && show(e.labels)}`);
}
check(new Set(tree.entries.map((e) => e.id)).size === tree.entries.length, 'entry ids are unique');

// XY: cpu samples per second of the trainer and of each process, as
// /api/v1/timeseries has them.
const xyTree = ok(await client.fetchXYTree(exp.UUID, 'sonde.rate.cpu', QueryHelper.timeRangeQuery(start, end)), 'xy tree').model;
const xyRoot = xyTree.entries.find((e) => e.parentId === -1 && e.labels[0] === 'trainer');
const xyProc = xyTree.entries.find((e) => e.parentId === xyRoot.id && e.labels[0] === `python3 (pid ${truth.pid})`);
check(xyRoot && xyProc, 'xy tree: ' + show(xyTree.entries));
const nb = truth.nb_times;
const xy = ok(await client.fetchXY(exp.UUID, 'sonde.rate.cpu', QueryHelper.selectionTimeRangeQuery(start, end, nb, [xyRoot.id, xyProc.id])), 'xy').model;
check(xy.series.length === 2, 'two series: ' + xy.series.map((s) => s.seriesName));
const stepMs = Math.ceil((truth.until_ms - truth.from_ms) / nb);
for (const [s, query, want] of [[xy.series.find((x) => x.seriesId === xyRoot.id), '{service_name="trainer"}', truth.trainer_cpu_total],
	[xy.series.find((x) => x.seriesId === xyProc.id), `{service_name="trainer",node="n1",pid="${truth.pid}"}`, truth.pid_cpu_total]]) {
	const ts = await api('/api/v1/timeseries', { query, type: 'cpu', from: truth.from_ms, until: truth.until_ms, step: stepMs });
	check(s.xValues.length === ts.values.length && s.yValues.length === ts.values.length,
		`${s.seriesName}: ${s.xValues.length} x, ${ts.values.length} steps`);
	s.xValues.forEach((x, i) => check(x === BigInt(truth.from_ms + i * stepMs) * 1000000n, `x[${i}] ${x}`));
	ts.values.forEach((v, i) => check(close(s.yValues[i], (v * 1000) / stepMs),
		`${s.seriesName} y[${i}] ${s.yValues[i]}, timeseries ${v} per ${stepMs} ms`));
	const sum = s.yValues.reduce((a, y) => a + (y * stepMs) / 1000, 0);
	check(close(sum, want), `${s.seriesName}: ${sum} samples, ingested ${want}`);
}

// XY: GPU memory of the process, per second, as sent.
const gStart = BigInt(truth.gpu_from_ms) * 1000000n, gEnd = gStart + BigInt(truth.gpu_memory.length) * 1000000000n;
const gTree = ok(await client.fetchXYTree(exp.UUID, 'sonde.gpu_memory', QueryHelper.timeRangeQuery(gStart, gEnd)), 'gpu tree').model;
const gEntry = gTree.entries.find((e) => e.labels[0] === `python3 (pid ${truth.pid}) GPU 0`);
check(gEntry && gEntry.labels[1] === String(Math.max(...truth.gpu_memory)), 'gpu tree: ' + show(gTree.entries));
const gxy = ok(await client.fetchXY(exp.UUID, 'sonde.gpu_memory', QueryHelper.selectionTimeRangeQuery(gStart, gEnd, truth.gpu_memory.length, [gEntry.id])), 'gpu xy').model;
check(gxy.series.length === 1 && show(gxy.series[0].yValues) === show(truth.gpu_memory),
	`gpu memory ${show(gxy.series[0] && gxy.series[0].yValues)}, sent ${show(truth.gpu_memory)}`);

// The time graph: the process's states as its process_time_share points
// say, a state per run of seconds.
const tg = ok(await client.fetchTimeGraphTree(exp.UUID, 'sonde.states', QueryHelper.timeRangeQuery(start, end)), 'timegraph tree').model;
const tgProc = tg.entries.find((e) => e.labels[0] === `python3 (pid ${truth.pid})`);
check(tgProc && typeof tgProc.start === 'bigint' && tgProc.start < tgProc.end, 'timegraph entry: ' + show(tg.entries));
const sStart = BigInt(truth.states_from_ms) * 1000000n;
const sEnd = sStart + BigInt(truth.states_seconds) * 1000000000n;
const rows = ok(await client.fetchTimeGraphStates(exp.UUID, 'sonde.states',
	QueryHelper.selectionTimeRangeQuery(sStart, sEnd, truth.states_seconds, [tgProc.id])), 'states').model.rows;
check(rows.length === 1 && rows[0].entryId === tgProc.id, 'one row: ' + show(rows));
const got = rows[0].states.map((s) => [String(s.start), String(s.end), s.label]);
check(show(got) === show(truth.states), `states ${show(got)}, sent ${show(truth.states)}`);

// Deleting: the experiment, then the trace it held.
check((await client.deleteTrace(opened.UUID)).getStatusCode() === 409, 'a trace in an experiment is not deleted');
ok(await client.deleteExperiment(exp.UUID), 'delete experiment');
check((await client.fetchExperiment(exp.UUID)).getStatusCode() === 404, 'deleted experiment is gone');
ok(await client.deleteTrace(py.UUID), 'delete trace');
check((await client.fetchTrace(py.UUID)).getStatusCode() === 404, 'deleted trace is gone');
ok(await client.deleteTrace(web.UUID), 'delete a service trace');
check(!ok(await client.fetchTraces(), 'traces').some((t) => t.UUID === web.UUID), 'a deleted service is not listed');
check(ok(await client.openTrace(new Query({ uri: 'sonde:{service_name="web"}' })), 'reopen').UUID === web.UUID, 'reopened');

console.log(`tsp.mjs: ${checks} checks passed`);
