// saver.test.js - LeaseRunSaver through LangGraph's own graph API: graphs
// run by a leaserun runner keep their checkpoints in etcd; getState,
// getStateHistory, interrupts and subgraphs read them back; writes outside
// the run that holds the thread are refused; deleteThread, refused while a
// run of the thread is pending or running.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Annotation, END, START, StateGraph, interrupt } from '@langchain/langgraph';
import { ERROR, MemorySaver, emptyCheckpoint, uuid6 } from '@langchain/langgraph-checkpoint';

import { LeaseRunSaver, ThreadBusyError, serveGraph, submitRun, waitRun, withThread } from '../lib/langgraph.js';
import { startEtcd } from './etcd.js';
import { connect, spec, startRunner, waitDone } from './helpers.js';

const State = Annotation.Root({
	topic: Annotation(),
	log: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

// plan -> (left, right) -> join: two super-steps of one node, one of two.
function diamond(saver) {
	const step = (name) => async (s) => ({ log: [`${name}:${s.topic}`] });
	return new StateGraph(State)
		.addNode('plan', step('plan'))
		.addNode('left', step('left'))
		.addNode('right', step('right'))
		.addNode('join', step('join'))
		.addEdge(START, 'plan')
		.addEdge('plan', 'left')
		.addEdge('plan', 'right')
		.addEdge(['left', 'right'], 'join')
		.addEdge('join', END)
		.compile({ checkpointer: saver });
}

async function serve(t, c, name, graph, opts = {}) {
	return startRunner(t, c, { name: `runner-${name}`, concurrency: 2, ...opts }, (r) => serveGraph(r, name, graph));
}

async function history(graph, threadId) {
	const out = [];
	for await (const snap of graph.getStateHistory({ configurable: { thread_id: threadId } })) out.push(snap);
	return out;
}

test('a graph run by a runner keeps every super-step in etcd, and getState reads it back', async (t) => {
	const c = await connect(t, await startEtcd(t), '/saver/');
	const graph = diamond(new LeaseRunSaver(c));
	serve(t, c, 'diamond', graph);
	const run = await submitRun(c, 'diamond', 'thread-a', { input: { topic: 'x' } });
	assert.equal((await waitRun(c, run.id, { timeoutMs: 20000 })).state, 'succeeded');

	const snap = await graph.getState({ configurable: { thread_id: 'thread-a' } });
	assert.deepEqual(snap.values.log.slice().sort(), ['join:x', 'left:x', 'plan:x', 'right:x']);
	assert.deepEqual(snap.next, []);
	assert.equal(snap.metadata.leaserun_run, run.id); // written by that run
	assert.equal(snap.metadata.source, 'loop');

	// The chain: input, then one checkpoint per super-step, newest first,
	// each pointing at the one before.
	const h = await history(graph, 'thread-a');
	assert.deepEqual(h.map((s) => s.metadata.step), [3, 2, 1, 0, -1]);
	for (let i = 0; i + 1 < h.length; i++)
		assert.equal(h[i].parentConfig.configurable.checkpoint_id, h[i + 1].config.configurable.checkpoint_id);
	assert.equal(h[h.length - 1].parentConfig, undefined);

	// list() options, as MemorySaver honours them.
	const saver = graph.checkpointer;
	const cfg = { configurable: { thread_id: 'thread-a' } };
	const two = [];
	for await (const tup of saver.list(cfg, { limit: 2 })) two.push(tup);
	assert.deepEqual(two.map((x) => x.metadata.step), [3, 2]);
	const older = [];
	for await (const tup of saver.list(cfg, { before: two[1].config })) older.push(tup);
	assert.deepEqual(older.map((x) => x.metadata.step), [1, 0, -1]);
	const inputs = [];
	for await (const tup of saver.list(cfg, { filter: { source: 'input' } })) inputs.push(tup);
	assert.equal(inputs.length, 1);
	const everyThread = [];
	for await (const tup of saver.list({})) everyThread.push(tup);
	assert.equal(everyThread.length, h.length);

	// An older checkpoint by id, with the writes saved against it.
	const mid = await saver.getTuple(h[2].config); // step 1: left and right ran
	assert.equal(mid.metadata.step, 1);
	assert.equal(mid.checkpoint.id, h[2].config.configurable.checkpoint_id);
	assert.equal(await saver.getTuple({ configurable: { thread_id: 'no-such-thread' } }), undefined);

	// A second run goes on from the first run's state.
	const again = await submitRun(c, 'diamond', 'thread-a', { input: { topic: 'y' } });
	assert.equal(again.seq, 2);
	assert.equal((await waitRun(c, again.id, { timeoutMs: 20000 })).state, 'succeeded');
	const after = await graph.getState({ configurable: { thread_id: 'thread-a' } });
	assert.equal(after.values.log.length, 8);
	assert.equal(after.values.topic, 'y');
});

test('writes outside the run that holds the thread are refused and store nothing', async (t) => {
	const c = await connect(t, await startEtcd(t), '/outside/');
	const graph = diamond(new LeaseRunSaver(c));
	await assert.rejects(graph.invoke({ topic: 'x' }, { configurable: { thread_id: 'free' } }), (err) => {
		assert.equal(err.code, 'LR_EINVAL');
		assert.match(err.message, /leaserun run that holds the thread/);
		return true;
	});
	assert.deepEqual(await c.shared.list('', { keysOnly: true }), []);

	// A task that is not a run of the thread cannot take it either.
	let refused = null;
	startRunner(t, c, { name: 'impostor' }, (r) =>
		r.handle('grab', async (step) => {
			try {
				withThread(step, 'free', () => {});
			} catch (err) {
				refused = err;
			}
		}),
	);
	await c.submit(spec('not-a-run', ['grab']));
	await waitDone(c, 'not-a-run');
	assert.match(refused.message, /not a run of thread free/);
});

test('an interrupted run ends; the next run resumes it with a command', async (t) => {
	const c = await connect(t, await startEtcd(t), '/interrupt/');
	const Approval = Annotation.Root({
		request: Annotation(),
		answer: Annotation(),
		done: Annotation(),
	});
	let asked = 0;
	const graph = new StateGraph(Approval)
		.addNode('ask', async (s) => {
			asked += 1;
			return { answer: interrupt({ question: `approve ${s.request}?` }) };
		})
		.addNode('act', async (s) => ({ done: `${s.request}: ${s.answer}` }))
		.addEdge(START, 'ask')
		.addEdge('ask', 'act')
		.addEdge('act', END)
		.compile({ checkpointer: new LeaseRunSaver(c) });
	serve(t, c, 'approval', graph);
	const first = await submitRun(c, 'approval', 'ticket-7', { input: { request: 'refund' } });
	assert.equal((await waitRun(c, first.id, { timeoutMs: 20000 })).state, 'succeeded');
	const paused = await graph.getState({ configurable: { thread_id: 'ticket-7' } });
	assert.deepEqual(paused.next, ['ask']);
	assert.equal(paused.tasks[0].interrupts[0].value.question, 'approve refund?');

	const second = await submitRun(c, 'approval', 'ticket-7', { command: { resume: 'yes' } });
	assert.equal((await waitRun(c, second.id, { timeoutMs: 20000 })).state, 'succeeded');
	const done = await graph.getState({ configurable: { thread_id: 'ticket-7' } });
	assert.equal(done.values.done, 'refund: yes');
	assert.equal(asked, 2); // an interrupted node runs again when resumed
});

test('subgraphs checkpoint under their own namespace', async (t) => {
	const c = await connect(t, await startEtcd(t), '/subgraph/');
	const saver = new LeaseRunSaver(c);
	const Inner = Annotation.Root({ topic: Annotation(), note: Annotation() });
	const Outer = Annotation.Root({ topic: Annotation(), note: Annotation(), log: State.spec.log });
	const inner = new StateGraph(Inner)
		.addNode('inner', async (s) => ({ note: `inner:${s.topic}` }))
		.addEdge(START, 'inner')
		.addEdge('inner', END)
		.compile();
	const graph = new StateGraph(Outer)
		.addNode('outer', async (s) => ({ log: [`outer:${s.topic}`] }))
		.addNode('sub', inner)
		.addEdge(START, 'outer')
		.addEdge('outer', 'sub')
		.addEdge('sub', END)
		.compile({ checkpointer: saver });
	serve(t, c, 'nested', graph);
	const run = await submitRun(c, 'nested', 'n1', { input: { topic: 'z' } });
	assert.equal((await waitRun(c, run.id, { timeoutMs: 20000 })).state, 'succeeded');
	const snap = await graph.getState({ configurable: { thread_id: 'n1' } });
	assert.deepEqual(snap.values.log, ['outer:z']);
	assert.equal(snap.values.note, 'inner:z');
	const namespaces = new Set();
	for await (const tup of saver.list({ configurable: { thread_id: 'n1' } }))
		namespaces.add(tup.config.configurable.checkpoint_ns);
	assert.ok(namespaces.has(''));
	assert.ok([...namespaces].some((ns) => ns.startsWith('sub:')), [...namespaces].join(', '));
	const root = [];
	for await (const tup of saver.list({ configurable: { thread_id: 'n1', checkpoint_ns: '' } })) root.push(tup);
	assert.ok(root.length > 0 && root.every((x) => x.config.configurable.checkpoint_ns === ''));
});

test('deleteThread removes a thread, and is refused while a run of it is active', async (t) => {
	const c = await connect(t, await startEtcd(t), '/delete/');
	let release;
	const gate = new Promise((resolve) => {
		release = resolve;
	});
	const Slow = Annotation.Root({ n: Annotation() });
	const saver = new LeaseRunSaver(c);
	const graph = new StateGraph(Slow)
		.addNode('wait', async (s) => {
			await gate;
			return { n: s.n + 1 };
		})
		.addEdge(START, 'wait')
		.addEdge('wait', END)
		.compile({ checkpointer: saver });
	serve(t, c, 'slow', graph);
	const run = await submitRun(c, 'slow', 'doomed', { input: { n: 1 } });
	const other = await submitRun(c, 'slow', 'kept', { input: { n: 1 } });
	await assert.rejects(submitRun(c, 'slow', 'doomed', { input: { n: 2 } }), ThreadBusyError);
	// Wait until the run has started (its hint is written first).
	for (let i = 0; i < 500 && (await c.shared.get('lgrun.doomed')) === undefined; i++)
		await new Promise((r) => setTimeout(r, 10));
	await assert.rejects(saver.deleteThread('doomed'), /run lg\.doomed\.1 is running/);
	release();
	await waitRun(c, run.id, { timeoutMs: 20000 });
	await waitRun(c, other.id, { timeoutMs: 20000 });
	assert.ok((await c.shared.list('lg.doomed.', { keysOnly: true })).length > 0);
	await saver.deleteThread('doomed');
	assert.deepEqual(await c.shared.list('lg.doomed.', { keysOnly: true }), []);
	assert.equal(await saver.getTuple({ configurable: { thread_id: 'doomed' } }), undefined);
	assert.ok((await saver.getTuple({ configurable: { thread_id: 'kept' } })) !== undefined);
	// The run numbering goes on: a deleted thread does not reuse run ids.
	const next = await submitRun(c, 'slow', 'doomed', { input: { n: 5 } });
	assert.equal(next.seq, 2);
});

test('deleteThread is refused while a run of it is submitted and not yet started', async (t) => {
	const c = await connect(t, await startEtcd(t), '/delete-pending/');
	const saver = new LeaseRunSaver(c);
	const graph = diamond(saver);
	const { runner, done } = await serve(t, c, 'diamond', graph);
	const first = await submitRun(c, 'diamond', 'queued', { input: { topic: 'a' } });
	assert.equal((await waitRun(c, first.id, { timeoutMs: 20000 })).state, 'succeeded');
	runner.stop();
	await done;
	// No runner: run 2 stays pending, and the hint still names run 1.
	const second = await submitRun(c, 'diamond', 'queued', { input: { topic: 'b' } });
	assert.equal(second.id, 'lg.queued.2');
	await assert.rejects(saver.deleteThread('queued'), {
		code: 'LR_EINVAL',
		message: /thread queued: run lg\.queued\.2 is pending/,
	});
	assert.ok((await saver.getTuple({ configurable: { thread_id: 'queued' } })) !== undefined);
});

test('putWrites keeps the first write at a position and replaces special writes, as MemorySaver', async (t) => {
	const c = await connect(t, await startEtcd(t), '/put-writes/');
	const saver = new LeaseRunSaver(c);
	const checkpoint = { ...emptyCheckpoint(), id: uuid6(-1) };
	// The same calls on both savers: a node's writes saved twice (a
	// resumed attempt saving them again), then an error replaced.
	async function calls(s) {
		const config = await s.put({ configurable: { thread_id: 'w', checkpoint_ns: '' } }, checkpoint, {});
		await s.putWrites(config, [['a', 'first'], ['b', 1]], 'task-1');
		await s.putWrites(config, [['a', 'second'], ['b', 2]], 'task-1');
		await s.putWrites(config, [[ERROR, { message: 'first error' }]], 'task-1');
		await s.putWrites(config, [[ERROR, { message: 'second error' }]], 'task-1');
		return (await s.getTuple(config)).pendingWrites;
	}
	let ours;
	startRunner(t, c, { name: 'writer' }, (r) =>
		r.handle('write', (step) => withThread(step, 'w', async () => (ours = await calls(saver)))),
	);
	await c.submit(spec('lg.w.1', ['write']));
	assert.equal((await waitDone(c, 'lg.w.1')).state, 'succeeded');
	const theirs = await calls(new MemorySaver());
	assert.deepEqual(ours, [
		['task-1', ERROR, { message: 'second error' }],
		['task-1', 'a', 'first'],
		['task-1', 'b', 1],
	]);
	assert.deepEqual(ours, theirs);
});
