// check.ts - compiled (not run) by types.test.js: the declarations describe
// the package as the examples and tests use it, and refuse misuse.
import LeaseRun, { Client, Fail, LeaseRunError, Runner, type Step, type TaskStatus } from '../../lib/index.js';
import { LeaseRunSaver, ThreadBusyError, serveGraph, submitRun, waitRun, withThread } from '../../lib/langgraph.js';
import { Annotation, END, START, StateGraph } from '@langchain/langgraph';

interface Plan {
	todo: string[];
	done: number;
}

export async function useIt(): Promise<void> {
	const client = await Client.connect({ endpoints: ['127.0.0.1:2379'], prefix: '/app/', dialTimeout: 2 });
	const { id, created }: { id: string; created: boolean } = await client.submit({
		steps: [{ name: 'plan', run: '-' }],
		state: { todo: ['a'], done: 0 },
	});
	const st: TaskStatus = await client.status(id);
	const running: boolean = st.state === 'running' && created;
	await client.shared.get('notes.1');
	const runner = new Runner(client, { name: 'w1', concurrency: 4, logLevel: 'info', log: (r) => r.msg });
	runner.handle<Plan>('plan', async (step: Step<Plan>) => {
		step.state.done += step.state.todo.length;
		await step.checkpoint();
		await step.sharedPut({ 'notes.1': { fence: step.fence } });
		if (step.signal.aborted) throw new Fail('stopped');
		step.log('planned', 'debug');
	});
	runner.on('taskDone', (e) => e.state === 'failed' && e.error?.length);
	runner.handle(null, async () => {
		throw new LeaseRun.Fail('no handler');
	});
	await runner.run();
	const e = new LeaseRunError('x', 'LR_ELEASE');
	try {
		await client.withLocks({ 'org/a': 'X' }, { wait: 0 }, async () => 1);
	} catch (err) {
		// The code a wait that ran out rejects with.
		if (err instanceof LeaseRunError && err.code === 'LR_EBUSY') void err.message;
	}

	const State = Annotation.Root({ n: Annotation<number>() });
	const graph = new StateGraph(State)
		.addNode('inc', async (s) => ({ n: s.n + 1 }))
		.addEdge(START, 'inc')
		.addEdge('inc', END)
		.compile({ checkpointer: new LeaseRunSaver(client) });
	serveGraph(runner, 'counter', graph, { config: { recursionLimit: 10 } });
	try {
		const run = await submitRun(client, 'counter', 'thread-1', { input: { n: 1 } });
		const final: TaskStatus = await waitRun(client, run.id, { timeoutMs: 1000 });
		void final;
	} catch (err) {
		if (err instanceof ThreadBusyError) void err.runId;
	}
	runner.handle('x', async (step) => {
		await withThread(step, 'thread-1', async () => graph.invoke(null));
	});
	void running;
	void e;

	// Misuse the declarations must refuse:
	// @ts-expect-error a spec needs steps
	await client.submit({ state: {} });
	// @ts-expect-error no such state
	await client.list({ state: 'sleeping' });
	// @ts-expect-error levels are names
	new Runner(client, { logLevel: 3 });
	// @ts-expect-error handlers take a step
	runner.handle("y", async (n: number) => n);
	// @ts-expect-error unknown event data
	runner.on('claimed', (e) => e.nope);
}
