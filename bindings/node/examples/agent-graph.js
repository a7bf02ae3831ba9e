#!/usr/bin/env node
// agent-graph.js - an agent graph of five deterministic nodes run by
// leaserun: plan, then research and draft side by side, then review and
// publish. Each node logs its start and end (to stdout, and as JSON lines
// to $AGENT_LOG when set), so a run killed midway and resumed on another
// runner shows which nodes ran again.
//
//   node examples/agent-graph.js run [--name N] [--concurrency C] [--ttl S]
//   node examples/agent-graph.js submit THREAD TOPIC   # prints the run id
//   node examples/agent-graph.js show THREAD           # the thread's state
//
// Connection options come from LEASERUN_ENDPOINTS, LEASERUN_PREFIX, ...
// AGENT_STEP_MS sets how long each node works (default 500; draft takes
// three times as long).
import { appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { Annotation, END, START, StateGraph } from '@langchain/langgraph';

import { Client, Runner } from '../lib/index.js';
import { LeaseRunSaver, serveGraph, submitRun } from '../lib/langgraph.js';

const STEP_MS = Number(process.env.AGENT_STEP_MS ?? 500);

function log(node, event, extra = {}) {
	const line = { node, event, pid: process.pid, ...extra };
	console.log(JSON.stringify(line));
	if (process.env.AGENT_LOG) appendFileSync(process.env.AGENT_LOG, `${JSON.stringify(line)}\n`);
}

// A node that logs, works for `ms` (stopping early if the run is aborted),
// and returns its update.
function node(name, ms, update) {
	return async (state, config) => {
		log(name, 'start', { topic: state.topic });
		await sleep(ms, undefined, { signal: config.signal });
		const out = update(state);
		log(name, 'end');
		return out;
	};
}

const State = Annotation.Root({
	topic: Annotation(),
	notes: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
	text: Annotation(),
	verdict: Annotation(),
	published: Annotation(),
});

// The graph, compiled with its checkpoints in etcd through client.
function buildGraph(client) {
	return new StateGraph(State)
		.addNode('plan', node('plan', STEP_MS, (s) => ({ notes: [`plan: outline ${s.topic}`] })))
		.addNode('research', node('research', STEP_MS, (s) => ({ notes: [`research: 3 sources on ${s.topic}`] })))
		.addNode('draft', node('draft', 3 * STEP_MS, (s) => ({ text: `A note on ${s.topic}.` })))
		.addNode('review', node('review', STEP_MS, (s) => ({ verdict: `ok (${s.notes.length} notes)` })))
		.addNode('publish', node('publish', STEP_MS, (s) => ({ published: `${s.text} ${s.verdict}` })))
		.addEdge(START, 'plan')
		.addEdge('plan', 'research')
		.addEdge('plan', 'draft')
		.addEdge(['research', 'draft'], 'review')
		.addEdge('review', 'publish')
		.addEdge('publish', END)
		.compile({ checkpointer: new LeaseRunSaver(client) });
}

async function main() {
	const { values, positionals } = parseArgs({
		allowPositionals: true,
		options: { name: { type: 'string' }, concurrency: { type: 'string' }, ttl: { type: 'string' } },
	});
	const [command, ...args] = positionals;
	const client = await Client.connect();
	const graph = buildGraph(client);
	try {
		if (command === 'run') {
			const runner = new Runner(client, {
				name: values.name,
				concurrency: Number(values.concurrency ?? 4),
				ttl: values.ttl !== undefined ? Number(values.ttl) : undefined,
				logLevel: 'info',
			});
			serveGraph(runner, 'agent', graph);
			await runner.run(); // until SIGTERM or SIGINT
		} else if (command === 'submit' && args.length === 2) {
			const run = await submitRun(client, 'agent', args[0], { input: { topic: args[1] } });
			console.log(run.id);
		} else if (command === 'show' && args.length === 1) {
			const snap = await graph.getState({ configurable: { thread_id: args[0] } });
			console.log(JSON.stringify({ values: snap.values, next: snap.next }, null, 2));
		} else {
			console.error('usage: agent-graph.js run [--name N] [--concurrency C] [--ttl S] | submit THREAD TOPIC | show THREAD');
			process.exitCode = 2;
		}
	} finally {
		client.close();
	}
}

main().catch((err) => {
	console.error(`agent-graph: ${err.message}`);
	process.exitCode = 1;
});
