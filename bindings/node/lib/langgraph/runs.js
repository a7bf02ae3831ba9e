// runs.js - a compiled LangGraph graph run as leaserun tasks: one task per
// run, at most one run of a thread at a time.
//
// Policy for a second run on a busy thread: reject (ThreadBusyError). Run
// number k+1 of a thread is created only after run k was seen finished,
// and its task id, lg.<thread>.<k+1>, can be created once: two submitters
// racing for the same slot get one run, and the other an error. A run
// that finished is final (done/<id> is written once), and its claim went
// with that write, so every write of run k is refused once run k+1 can
// start. Each run also holds the thread's lock exclusively (threadLock),
// so an older run retried by hand waits for the newer one to finish
// instead of forking the thread's checkpoints. See docs/embedding.md,
// "LangGraph".
import { Command } from '@langchain/langgraph';

import { LeaseRunError } from '../errors.js';
import { graphStep, runHintName, runId, threadLock } from './names.js';
import { LeaseRunSaver, withThread } from './saver.js';
import { nullOn, runSlot, statusOrNull } from './slots.js';

const FINAL = new Set(['succeeded', 'failed', 'cancelled']);

/** A run was asked for on a thread that has one pending or running. */
export class ThreadBusyError extends Error {
	constructor(threadId, runId, state) {
		super(`thread ${threadId} is busy: run ${runId} is ${state}`);
		this.name = 'ThreadBusyError';
		this.code = 'ETHREADBUSY';
		this.threadId = threadId;
		this.runId = runId;
	}
}

function runSpec(graph, threadId, seq, options) {
	const { input = null, command, maxAttempts, retryBackoffMs } = options;
	const id = runId(threadId, seq);
	const spec = {
		id,
		steps: [
			{
				name: graphStep(graph),
				// A shell runner on this prefix cannot run it: fail loudly.
				run: `echo "leaserun: ${id} is a LangGraph run: it needs a Node.js runner serving graph ${graph}" >&2; exit 2`,
			},
		],
		state: { thread_id: threadId, graph, seq, input, ...(command ? { command } : {}) },
		// Runs of a thread never overlap, even one retried by hand
		// (`leaserun retry`) while a newer one runs: it waits in line.
		locks: { [threadLock(threadId)]: 'X' },
	};
	if (maxAttempts !== undefined) spec.max_attempts = maxAttempts;
	if (retryBackoffMs !== undefined) spec.retry_backoff_ms = retryBackoffMs;
	return spec;
}

// Submit spec: {created} when it is stored (or was, identical), null when
// the id holds another run.
function trySubmit(client, spec) {
	return nullOn('LR_EEXIST', client.submit(spec));
}

/**
 * Submit a run of graph `graph` (the name a runner serves it under) on
 * thread `threadId`. options: input (the graph's input, JSON), or command
 * ({resume, update, goto}: a LangGraph Command, for example to answer an
 * interrupt); maxAttempts (5); retryBackoffMs. Resolves to {id, seq,
 * created}; rejects with ThreadBusyError while another run of the thread
 * is pending or running. Submitting the very same run again while it is
 * pending or running is a success (created false), so a submit may be
 * retried.
 */
export async function submitRun(client, graph, threadId, options = {}) {
	graphStep(graph); // a valid name, before anything is read
	for (;;) {
		const { seq, status } = await runSlot(client, threadId);
		const spec = runSpec(graph, threadId, seq, options);
		const stored = await trySubmit(client, spec);
		if (stored !== null) return { id: spec.id, seq, created: stored.created };
		if (status !== null) throw new ThreadBusyError(threadId, spec.id, status.state);
		// Another submitter took this free slot first: look again.
	}
}

/** The last run started on the thread ({id, seq, status}), or null. */
export async function currentRun(client, threadId) {
	const hint = await client.shared.get(runHintName(threadId));
	if (hint === undefined) return null;
	return { id: hint.run, seq: hint.seq, status: await statusOrNull(client, hint.run) };
}

// A number option of waitRun: a RangeError (a TypeError for another type)
// naming it, rather than a poll that never waits (0, NaN, a negative
// interval) or a limit silently gone (NaN).
function msOption(v, name, lo) {
	if (typeof v !== 'number') throw new TypeError(`waitRun: ${name}: expected a number, not ${typeof v}`);
	if (!(v >= lo)) throw new RangeError(`waitRun: ${name}: expected a number of milliseconds from ${lo}, got ${v}`);
	return v;
}

/** Resolve to the run's final status (polling every intervalMs, at least
 * 1, doubling to 1 s; timeoutMs 0 or Infinity: no limit). */
export async function waitRun(client, id, options) {
	const { timeoutMs = 0, intervalMs = 100 } = options ?? {};
	msOption(timeoutMs, 'timeoutMs', 0);
	msOption(intervalMs, 'intervalMs', 1);
	const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : Infinity;
	for (let wait = intervalMs; ; wait = Math.min(wait * 2, 1000)) {
		const st = await client.status(id);
		if (FINAL.has(st.state)) return st;
		if (Date.now() >= deadline)
			throw new LeaseRunError(`run ${id} still ${st.state} after ${timeoutMs} ms`, 'LR_ETIMEDOUT');
		await new Promise((resolve) => setTimeout(resolve, Math.min(wait, deadline - Date.now())));
	}
}

/**
 * Serve compiled graph `graph` under name `name` on runner: the runner runs
 * the runs submitRun makes for it. The graph must be compiled with a
 * LeaseRunSaver. options.config is merged into every invoke's config
 * (recursionLimit, configurable, ...).
 *
 * A run resumed after its runner died continues from the thread's last
 * checkpoint written by this run, this very task, not an earlier one of
 * the same id that was purged (nodes of checkpointed super-steps, and
 * tasks whose writes were saved, do not run again); a run that never
 * wrote a checkpoint starts from its input.
 */
export function serveGraph(runner, name, graph, options = {}) {
	const saver = graph.checkpointer;
	if (!(saver instanceof LeaseRunSaver))
		throw new TypeError(`serveGraph ${name}: compile the graph with a LeaseRunSaver checkpointer`);
	const base = options.config ?? {};
	runner.handle(graphStep(name), async (step) => {
		const { thread_id: threadId, seq, input, command } = step.state;
		// This incarnation of the run's task: tasks/<id> is created once,
		// never changed, and cannot be purged while claimed; a purged run's
		// id submitted again is a new key with a newer create revision,
		// while claims after a crash and `leaserun retry` keep it.
		const { createRevision } = await saver._client.status(step.taskId);
		await withThread(step, threadId, async () => {
			await step.sharedPut({ [runHintName(threadId)]: { seq, run: step.taskId } });
			const latest = await saver.getTuple({ configurable: { thread_id: threadId } });
			// Its own checkpoints only: an earlier task of the same id
			// (purged) left the thread's, which this run must not take for
			// its own.
			const resuming = latest?.metadata?.leaserun_run === step.taskId &&
				latest?.metadata?.leaserun_task_revision === createRevision;
			if (resuming) step.log(`resuming from checkpoint ${latest.config.configurable.checkpoint_id}`);
			const graphInput = resuming ? null : command ? new Command(command) : input;
			// Each super-step's checkpoint written before the next starts
			// (LangGraph's default writes it while the next runs): a runner
			// that was frozen past its lease finds its write refused and
			// starts no node the next holder may be running.
			const config = {
				durability: 'sync',
				...base,
				configurable: { ...(base.configurable ?? {}), thread_id: threadId },
				signal: step.signal,
			};
			const result = await graph.invoke(graphInput, config);
			const last = await saver.getTuple({ configurable: { thread_id: threadId } });
			step.state.checkpoint_id = last?.config.configurable.checkpoint_id ?? null;
			step.state.interrupted = Array.isArray(result?.__interrupt__) && result.__interrupt__.length > 0;
		}, { taskRevision: createRevision });
	});
	return runner;
}
