// client.mjs SERVER APP SECONDS: an application profiled by Grafana's own
// Pyroscope SDK for Node.js (@pyroscope/nodejs from npm, as its README
// says to use it), pushing to SERVER every second with the tag env=check.
// Two functions burn CPU, hotAlpha three times as long as hotBeta; the
// event loop is let run between bursts, so that the SDK's timers upload as
// in a real service. Prints one JSON line of what the SDK did.
import Pyroscope from '@pyroscope/nodejs';

const [server, app, seconds] = process.argv.slice(2);
let uploads = 0;
let failures = 0;
const origFetch = globalThis.fetch;
// Counts what the SDK sends and what the server answers, nothing more.
globalThis.fetch = async (url, init) => {
  const r = await origFetch(url, init);
  uploads++;
  if (!r.ok) {
    failures++;
    process.stderr.write(`upload ${url}: HTTP ${r.status} ${await r.clone().text()}\n`);
  }
  return r;
};

function hotAlpha(ms) {
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) for (let i = 0; i < 1000; i++) x += Math.sqrt(i);
  return x;
}

function hotBeta(ms) {
  const end = performance.now() + ms;
  let x = 0;
  while (performance.now() < end) for (let i = 0; i < 1000; i++) x += Math.cbrt(i);
  return x;
}

Pyroscope.init({
  serverAddress: server,
  appName: app,
  tags: { env: 'check' },
  flushIntervalMs: 1000,
});
Pyroscope.start();
const end = Date.now() + Number(seconds) * 1000;
while (Date.now() < end) {
  hotAlpha(30);
  hotBeta(10);
  await new Promise((resolve) => setImmediate(resolve));
}
await Pyroscope.stop();
console.log(JSON.stringify({ uploads, failures }));
