// helpers.js - what the tests share: clients and runners that end with the
// test, and waiting for a condition or a task's end.
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, Runner } from '../lib/index.js';
import { onEnd } from './cleanup.js';

export { onEnd };

/** A client on etcd member m, closed when test t ends. */
export async function connect(t, m, prefix = '/node-test/') {
	const c = await Client.connect({ endpoints: m.endpoint, prefix, dialTimeout: 2 });
	onEnd(t, () => c.close());
	return c;
}

/** Log records of level warn and above go to stderr; others are kept. */
export function quietLog(records = []) {
	return (rec) => {
		records.push(rec);
		if (process.env.TEST_VERBOSE || rec.level === 'error') console.error(JSON.stringify(rec));
	};
}

/** A runner (TTL 2 s, grace 1 s, quiet) with handlers set by setup(runner),
 * running until the test ends. Resolves to {runner, done}. */
export function startRunner(t, client, options, setup) {
	const runner = new Runner(client, {
		ttl: 2,
		grace: 1,
		stopOnSignals: false,
		log: quietLog(),
		...options,
	});
	setup(runner);
	const done = runner.run();
	onEnd(t, async () => {
		runner.stop();
		await done;
	});
	return { runner, done };
}

/** Resolve once fn() is truthy (checked every 10 ms); throw after timeoutMs. */
export async function waitFor(fn, timeoutMs = 10000, what = 'the condition') {
	const deadline = Date.now() + timeoutMs;
	for (;;) {
		const v = await fn();
		if (v) return v;
		if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
		await sleep(10);
	}
}

const FINAL = new Set(['succeeded', 'failed', 'cancelled']);

/** The task's status once it is finished. */
export async function waitDone(client, id, timeoutMs = 15000) {
	let st;
	await waitFor(async () => FINAL.has((st = await client.status(id)).state), timeoutMs, `task ${id} to finish`);
	return st;
}

/** A spec of steps named names (run "-": only in-process handlers). */
export function spec(id, names, extra = {}) {
	return { id, steps: names.map((name) => ({ name, run: '-' })), ...extra };
}
