// saver.js - LeaseRunSaver: LangGraph's checkpoints and pending writes kept
// in etcd as leaserun shared values. Reads work anywhere; every write is
// made by the leaserun run that holds the thread, fenced by that run's
// claim (step.sharedPut), so a worker that lost the thread cannot fork its
// checkpoint chain.
import { AsyncLocalStorage } from 'node:async_hooks';

import {
	BaseCheckpointSaver,
	WRITES_IDX_MAP,
	compareWritesSortKeys,
	copyCheckpoint,
	getCheckpointId,
	writesSortKey,
} from '@langchain/langgraph-checkpoint';

import { LeaseRunError } from '../errors.js';
import {
	ALL_THREADS,
	checkpointName,
	checkpointPrefix,
	nameKind,
	nsKey,
	runId,
	threadKey,
	threadPrefix,
	writeName,
	writesPrefix,
} from './names.js';
import { runSlot } from './slots.js';

// The run holding a thread in this async context: {step, threadId,
// taskRevision}.
const holding = new AsyncLocalStorage();

// etcd takes a limited number of operations per txn (LR_SHARED_PUT_MAX).
const PUT_MAX = 100;

/**
 * Run fn with `step` holding thread `threadId`: the saver's writes for that
 * thread made inside fn go through the step, fenced. The step's task must
 * be a run of the thread (submitRun made it), so that one task at a time
 * writes the thread. taskRevision (the create revision of the step's task)
 * is stamped on its checkpoints, so that a resumed run can tell its own
 * from those of an earlier, purged task of the same id.
 */
export function withThread(step, threadId, fn, { taskRevision } = {}) {
	const seq = Number(String(step.taskId).split('.').pop());
	if (!Number.isInteger(seq) || runId(threadId, seq) !== step.taskId)
		throw new LeaseRunError(
			`task ${step.taskId} is not a run of thread ${threadId}: only its runs may write it`,
			'LR_EINVAL',
		);
	return holding.run({ step, threadId, taskRevision }, fn);
}

function configurable(config) {
	return config?.configurable ?? {};
}

function threadOf(config, what) {
	const t = configurable(config).thread_id;
	if (t === undefined || t === null)
		throw new Error(`${what}: the config has no configurable.thread_id`);
	return String(t);
}

function configOf(threadId, ns, checkpointId) {
	return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpointId } };
}

export class LeaseRunSaver extends BaseCheckpointSaver {
	#client;

	/** client: a connected leaserun Client; serde: LangGraph's serializer. */
	constructor(client, serde) {
		super(serde);
		this.#client = client;
	}

	/** @internal the client, for serveGraph. */
	get _client() {
		return this.#client;
	}

	// ---- stored form ------------------------------------------------------

	async #encode(value) {
		const [type, bytes] = await this.serde.dumpsTyped(value);
		// Text inside a JSON string: stored exactly, whatever it holds.
		return type === 'json'
			? { type, text: new TextDecoder().decode(bytes) }
			: { type, base64: Buffer.from(bytes).toString('base64') };
	}

	async #decode(stored) {
		const data = stored.text ?? new Uint8Array(Buffer.from(stored.base64, 'base64'));
		return this.serde.loadsTyped(stored.type, data);
	}

	// The step that may write threadId now, or an error saying why none.
	#writer(threadId, what) {
		const held = holding.getStore();
		if (held === undefined)
			throw new LeaseRunError(
				`${what} of thread ${threadId}: writes come only from the leaserun run that holds ` +
					'the thread (see submitRun and serveGraph)',
				'LR_EINVAL',
			);
		if (held.threadId !== threadId)
			throw new LeaseRunError(
				`${what} of thread ${threadId}: this run holds thread ${held.threadId}`,
				'LR_EINVAL',
			);
		return held.step;
	}

	async #put(step, entries) {
		for (let i = 0; i < entries.length; i += PUT_MAX)
			await step.sharedPut(Object.fromEntries(entries.slice(i, i + PUT_MAX)));
	}

	// ---- reads ---------------------------------------------------------------

	async #pendingWrites(threadId, ns, checkpointId) {
		const rows = await this.#client.shared.list(writesPrefix(threadId, ns, checkpointId));
		const writes = rows.map((r) => r.value);
		writes.sort((a, b) =>
			compareWritesSortKeys(
				writesSortKey(a.task_path ?? '', a.task_id, a.idx),
				writesSortKey(b.task_path ?? '', b.task_id, b.idx),
			),
		);
		return Promise.all(writes.map(async (w) => [w.task_id, w.channel, await this.#decode(w.value)]));
	}

	async #tuple(stored) {
		const { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: id, parent_checkpoint_id: parent } = stored;
		const tuple = {
			config: configOf(threadId, ns, id),
			checkpoint: await this.#decode(stored.checkpoint),
			metadata: await this.#decode(stored.metadata),
			pendingWrites: await this.#pendingWrites(threadId, ns, id),
		};
		if (parent) tuple.parentConfig = configOf(threadId, ns, parent);
		return tuple;
	}

	async getTuple(config) {
		const threadId = threadOf(config, 'getTuple');
		const ns = configurable(config).checkpoint_ns ?? '';
		let id = getCheckpointId(config);
		if (!id) {
			// Checkpoint ids (uuid6) sort by time: the last name is the latest.
			const names = await this.#client.shared.list(checkpointPrefix(threadId, ns), { keysOnly: true });
			if (names.length === 0) return undefined;
			id = names[names.length - 1].name.split('.').pop();
		}
		const stored = await this.#client.shared.get(checkpointName(threadId, ns, id));
		return stored === undefined ? undefined : this.#tuple(stored);
	}

	async *list(config, options = {}) {
		const { before, filter } = options;
		let { limit } = options;
		const c = configurable(config);
		const prefix = c.thread_id !== undefined ? threadPrefix(String(c.thread_id)) : ALL_THREADS;
		const wantNs = c.checkpoint_ns !== undefined ? nsKey(c.checkpoint_ns) : undefined;
		const beforeId = getCheckpointId(before ?? {});
		const names = (await this.#client.shared.list(prefix, { keysOnly: true }))
			.map((r) => r.name)
			.filter((n) => nameKind(n) === 'c')
			.map((n) => ({ name: n, parts: n.split('.') }))
			.filter(({ parts }) => wantNs === undefined || parts[2] === wantNs)
			.filter(({ parts }) => !c.checkpoint_id || parts[4] === c.checkpoint_id)
			.filter(({ parts }) => !beforeId || parts[4] < beforeId);
		// Newest first within each thread and namespace, as MemorySaver.
		names.sort((a, b) =>
			a.parts[1] !== b.parts[1] ? (a.parts[1] < b.parts[1] ? -1 : 1)
			: a.parts[2] !== b.parts[2] ? (a.parts[2] < b.parts[2] ? -1 : 1)
			: a.parts[4] < b.parts[4] ? 1 : -1,
		);
		for (const { name } of names) {
			if (limit !== undefined && limit <= 0) return;
			const stored = await this.#client.shared.get(name);
			if (stored === undefined) continue; // deleted meanwhile
			const metadata = await this.#decode(stored.metadata);
			if (filter && !Object.entries(filter).every(([k, v]) => metadata?.[k] === v)) continue;
			if (limit !== undefined) limit -= 1;
			yield this.#tuple(stored);
		}
	}

	// ---- writes ----------------------------------------------------------------

	async put(config, checkpoint, metadata) {
		const threadId = threadOf(config, 'put');
		const ns = configurable(config).checkpoint_ns ?? '';
		const step = this.#writer(threadId, 'put');
		// Which run wrote it, and which incarnation of its task (the create
		// revision of tasks/<id>, when the run gave it): a run resumed after
		// a crash continues from its own checkpoints instead of taking its
		// input again, and a later task of a purged run's id does not.
		const revision = holding.getStore().taskRevision;
		const stamped = {
			...metadata,
			leaserun_run: step.taskId,
			...(revision !== undefined ? { leaserun_task_revision: revision } : {}),
		};
		const stored = {
			thread_id: threadId,
			checkpoint_ns: ns,
			checkpoint_id: checkpoint.id,
			parent_checkpoint_id: configurable(config).checkpoint_id ?? null,
			checkpoint: await this.#encode(copyCheckpoint(checkpoint)),
			metadata: await this.#encode(stamped),
			run: step.taskId,
			fence: step.fence,
		};
		await this.#put(step, [[checkpointName(threadId, ns, checkpoint.id), stored]]);
		return configOf(threadId, ns, checkpoint.id);
	}

	async putWrites(config, writes, taskId, taskPath) {
		const threadId = threadOf(config, 'putWrites');
		const ns = configurable(config).checkpoint_ns ?? '';
		const checkpointId = configurable(config).checkpoint_id;
		if (!checkpointId) throw new Error('putWrites: the config has no configurable.checkpoint_id');
		const step = this.#writer(threadId, 'putWrites');
		const entries = await Promise.all(
			writes.map(async ([channel, value], i) => {
				const idx = WRITES_IDX_MAP[channel] ?? i;
				return [
					writeName(threadId, ns, checkpointId, taskId, idx),
					{ task_id: taskId, task_path: taskPath ?? '', channel, idx, value: await this.#encode(value) },
				];
			}),
		);
		// As MemorySaver: a write at a position (idx >= 0) already saved for
		// this checkpoint and task is kept, not replaced; the special writes
		// (errors, interrupts, resumes: negative idx) replace theirs. Only
		// the run holding the thread writes it, so what it reads here is
		// what its txn finds.
		const kept = entries.some(([, w]) => w.idx >= 0) ? await this.#saved(entries[0][0]) : new Set();
		const fresh = entries.filter(([name, w]) => w.idx < 0 || !kept.has(name));
		// One txn for up to 100 writes: a task's writes are all there or none.
		await this.#put(step, fresh);
	}

	// The names of the writes saved for the task of write `name`.
	async #saved(name) {
		const taskPrefix = name.slice(0, name.lastIndexOf('.') + 1);
		const rows = await this.#client.shared.list(taskPrefix, { keysOnly: true });
		return new Set(rows.map((r) => r.name));
	}

	/** Delete the thread's checkpoints and writes. Not fenced (an
	 * operator's clean-up); refused while a run of the thread is pending
	 * (submitted, not yet started) or running, and when that cannot be
	 * known (etcd unreachable: the error is passed on). */
	async deleteThread(threadId) {
		threadKey(threadId); // validates
		const { seq, status } = await runSlot(this.#client, threadId);
		if (status !== null)
			throw new LeaseRunError(`thread ${threadId}: run ${runId(threadId, seq)} is ${status.state}`, 'LR_EINVAL');
		await this.#client.shared.delete(threadPrefix(threadId), { prefix: true });
	}
}
