// graph_runs.test.js - the policy for runs of one thread: one at a time,
// a second one rejected (ThreadBusyError), consecutive run ids, racing
// submitters getting exactly one run, a failed run freeing the thread, and
// a run after a purge taking its own input, never an old run's place.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { Annotation, END, START, StateGraph } from '@langchain/langgraph';

import { LeaseRunSaver, ThreadBusyError, currentRun, runId, serveGraph, submitRun, threadKey, threadLock, waitRun } from '../lib/langgraph.js';
import { startEtcd } from './etcd.js';
import { runHintName } from '../lib/langgraph/names.js';
import { connect, startRunner, waitFor } from './helpers.js';

const State = Annotation.Root({ n: Annotation() });

function counter(saver, fail = () => false) {
	return new StateGraph(State)
		.addNode('inc', async (s) => {
			if (fail(s)) throw new Error(`no ${s.n}`);
			return { n: (s.n ?? 0) + 1 };
		})
		.addEdge(START, 'inc')
		.addEdge('inc', END)
		.compile({ checkpointer: saver });
}

test('a second run on a busy thread is rejected; submitting the same run again is not', async (t) => {
	const c = await connect(t, await startEtcd(t), '/busy/');
	const first = await submitRun(c, 'counter', 't1', { input: { n: 1 } }); // no runner yet: pending
	assert.deepEqual(first, { id: 'lg.t1.1', seq: 1, created: true });
	await assert.rejects(submitRun(c, 'counter', 't1', { input: { n: 2 } }), (err) => {
		assert.ok(err instanceof ThreadBusyError);
		assert.equal(err.runId, 'lg.t1.1');
		assert.match(err.message, /thread t1 is busy: run lg.t1.1 is pending/);
		return true;
	});
	assert.deepEqual(await submitRun(c, 'counter', 't1', { input: { n: 1 } }), { ...first, created: false });
	// Other threads are free.
	assert.equal((await submitRun(c, 'counter', 't2', { input: { n: 7 } })).id, 'lg.t2.1');

	const graph = counter(new LeaseRunSaver(c));
	startRunner(t, c, { name: 'busy' }, (r) => serveGraph(r, 'counter', graph));
	await waitRun(c, first.id, { timeoutMs: 20000 });
	const second = await submitRun(c, 'counter', 't1', { input: { n: 10 } });
	assert.equal(second.id, 'lg.t1.2');
	await waitRun(c, second.id, { timeoutMs: 20000 });
	assert.equal((await graph.getState({ configurable: { thread_id: 't1' } })).values.n, 11);
	const cur = await currentRun(c, 't1');
	assert.equal(cur.id, 'lg.t1.2');
	assert.equal(cur.status.state, 'succeeded');
});

test('a graph name is a plain name: nothing of it reaches a shell', async (t) => {
	const c = await connect(t, await startEtcd(t), '/gname/');
	for (const bad of ['x$(touch /tmp/leaserun-pwned)', 'a b', 'a/b', '', 'x'.repeat(65), 5]) {
		await assert.rejects(submitRun(c, bad, 't1', { input: {} }),
			{ name: 'TypeError', message: /graph name must be 1 to 64/ });
		assert.throws(() => serveGraph({ handle() {} }, bad, counter(new LeaseRunSaver(c))),
			{ name: 'TypeError', message: /graph name/ });
	}
	assert.deepEqual(await c.list(), []); // nothing stored
});

test('submitters racing for a free thread get exactly one run', async (t) => {
	const c = await connect(t, await startEtcd(t), '/race/');
	const tries = await Promise.allSettled(
		Array.from({ length: 6 }, (_, i) => submitRun(c, 'counter', 'contended', { input: { n: i } })),
	);
	const won = tries.filter((r) => r.status === 'fulfilled');
	const lost = tries.filter((r) => r.status === 'rejected');
	assert.equal(won.length, 1, JSON.stringify(tries));
	assert.equal(won[0].value.id, 'lg.contended.1');
	assert.ok(lost.every((r) => r.reason instanceof ThreadBusyError), lost.map((r) => r.reason.message).join('; '));
	assert.equal((await c.list()).length, 1);
});

test('a failed run frees the thread for the next one', async (t) => {
	const c = await connect(t, await startEtcd(t), '/failed/');
	const graph = counter(new LeaseRunSaver(c), (s) => s.n === 13);
	startRunner(t, c, { name: 'unlucky' }, (r) => serveGraph(r, 'counter', graph));
	const bad = await submitRun(c, 'counter', 'th', { input: { n: 13 }, maxAttempts: 2, retryBackoffMs: 10 });
	const st = await waitRun(c, bad.id, { timeoutMs: 20000 });
	assert.equal(st.state, 'failed');
	assert.match(st.error, /no 13/);
	const good = await submitRun(c, 'counter', 'th', { input: { n: 1 } });
	assert.equal(good.seq, 2);
	assert.equal((await waitRun(c, good.id, { timeoutMs: 20000 })).state, 'succeeded');
});

test('thread ids of any text map to valid run ids and names', async (t) => {
	const c = await connect(t, await startEtcd(t), '/names/');
	const graph = counter(new LeaseRunSaver(c));
	startRunner(t, c, { name: 'namer' }, (r) => serveGraph(r, 'counter', graph));
	const threads = ['plain-id_1', 'with space/and.dot', 'ünïcödé ✓', 'x'.repeat(300)];
	const keys = threads.map(threadKey);
	assert.equal(new Set(keys).size, threads.length);
	assert.equal(keys[0], 'plain-id_1');
	for (const thread of threads) {
		const run = await submitRun(c, 'counter', thread, { input: { n: 1 } });
		assert.equal(run.id, runId(thread, 1));
		assert.match(run.id, /^[A-Za-z0-9._:-]{1,200}$/);
		assert.equal((await waitRun(c, run.id, { timeoutMs: 20000 })).state, 'succeeded');
		const snap = await graph.getState({ configurable: { thread_id: thread } });
		assert.equal(snap.values.n, 2);
		assert.equal(snap.config.configurable.thread_id, thread);
	}
	assert.throws(() => threadKey(''), TypeError);
});

// The command, as meson builds it (LEASERUN_CLI), else in build/.
const CLI = process.env.LEASERUN_CLI ??
	join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'build', 'runner', 'leaserun');

test('an older run retried by hand waits for the newer run of its thread', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/retry/');
	let failFirst = true;
	const inside = new Set();
	const overlaps = [];
	let release;
	const gate = new Promise((resolve) => (release = resolve));
	const graph = new StateGraph(State)
		.addNode('work', async (s) => {
			if (s.n === 1 && failFirst) throw new Error('the first run fails');
			inside.add(s.n);
			if (inside.size > 1) overlaps.push([...inside]);
			await gate;
			inside.delete(s.n);
			return { n: s.n };
		})
		.addEdge(START, 'work')
		.addEdge('work', END)
		.compile({ checkpointer: new LeaseRunSaver(c) });
	startRunner(t, c, { name: 'retrier', concurrency: 2 }, (r) => serveGraph(r, 'g', graph));
	const older = await submitRun(c, 'g', 'T', { input: { n: 1 }, maxAttempts: 1 });
	assert.equal((await waitRun(c, older.id, { timeoutMs: 20000 })).state, 'failed');
	const newer = await submitRun(c, 'g', 'T', { input: { n: 2 } });
	await waitFor(() => inside.has(2), 10000, 'the newer run to start');
	failFirst = false;
	await promisify(execFile)(CLI, ['--endpoints', m.endpoint, '--prefix', '/retry/', 'retry', older.id]);
	await sleep(1500); // a free runner slot: the retried run would start at once
	const whileNewer = (await c.status(older.id)).state;
	release();
	assert.equal((await waitRun(c, newer.id, { timeoutMs: 20000 })).state, 'succeeded');
	assert.equal((await waitRun(c, older.id, { timeoutMs: 20000 })).state, 'succeeded');
	assert.deepEqual(overlaps, []);
	assert.equal(whileNewer, 'pending');
	assert.equal(threadLock('T'), 'lg/T');
});

test('a run after its thread\'s runs were purged takes its own input and a fresh id', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/purged/');
	const graph = counter(new LeaseRunSaver(c));
	startRunner(t, c, { name: 'after-purge' }, (r) => serveGraph(r, 'counter', graph));
	const n = async () => (await graph.getState({ configurable: { thread_id: 'P' } })).values.n;
	const purge = async () => {
		await promisify(execFile)(CLI, ['--endpoints', m.endpoint, '--prefix', '/purged/', 'purge', '--older-than', '0s']);
		assert.deepEqual(await c.list(), []);
	};
	const run = async (input) => {
		const r = await submitRun(c, 'counter', 'P', { input });
		assert.equal((await waitRun(c, r.id, { timeoutMs: 20000 })).state, 'succeeded');
		return r;
	};
	assert.equal((await run({ n: 1 })).id, 'lg.P.1');
	assert.equal(await n(), 2);
	await purge();
	// Nothing names the purged run any more (its hint is gone too): its id
	// is taken again, and the new task is not mistaken for the old one,
	// whose checkpoints are still the thread's latest.
	await c.shared.delete(runHintName('P'));
	assert.deepEqual(await run({ n: 100 }), { id: 'lg.P.1', seq: 1, created: true });
	assert.equal(await n(), 101);
	// The hint names lg.P.1, purged: the next run is lg.P.2.
	await purge();
	assert.deepEqual(await run({ n: 1000 }), { id: 'lg.P.2', seq: 2, created: true });
	assert.equal(await n(), 1001);
});

test('waitRun refuses an interval or a timeout that would poll without pause or never time out', async (t) => {
	const c = await connect(t, await startEtcd(t), '/wait-opts/');
	const run = await submitRun(c, 'nobody', 'w1', { input: {} }); // no runner: stays pending
	let calls = 0;
	const counted = Object.create(c, { status: { value: (id) => ((calls += 1), c.status(id)) } });
	for (const intervalMs of [0, -1, NaN])
		await assert.rejects(waitRun(counted, run.id, { timeoutMs: 200, intervalMs }), {
			name: 'RangeError',
			message: /^waitRun: intervalMs: /,
		});
	await assert.rejects(waitRun(counted, run.id, { timeoutMs: NaN }), { name: 'RangeError', message: /timeoutMs/ });
	await assert.rejects(waitRun(counted, run.id, { intervalMs: '5' }), { name: 'TypeError', message: /intervalMs/ });
	assert.equal(calls, 0);
	await assert.rejects(waitRun(counted, run.id, { timeoutMs: 250, intervalMs: 50 }), { code: 'LR_ETIMEDOUT' });
	assert.ok(calls >= 1 && calls <= 6, `${calls} status calls in 250 ms: it polls without pause`);
});
