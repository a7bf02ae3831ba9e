// graph_runs.test.js - the policy for runs of one thread: one at a time,
// a second one rejected (ThreadBusyError), consecutive run ids, racing
// submitters getting exactly one run, and a failed run freeing the thread.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Annotation, END, START, StateGraph } from '@langchain/langgraph';

import { LeaseRunSaver, ThreadBusyError, currentRun, runId, serveGraph, submitRun, threadKey, waitRun } from '../lib/langgraph.js';
import { startEtcd } from './etcd.js';
import { connect, startRunner } from './helpers.js';

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
