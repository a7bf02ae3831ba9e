// Type declarations of leaserun/langgraph (lib/langgraph.js).
import type { RunnableConfig } from '@langchain/core/runnables';
import type {
	BaseCheckpointSaver,
	ChannelVersions,
	Checkpoint,
	CheckpointListOptions,
	CheckpointMetadata,
	CheckpointTuple,
	PendingWrite,
	SerializerProtocol,
} from '@langchain/langgraph-checkpoint';

import type { Client, Json, Runner, Step, TaskStatus } from './index.js';

/** Checkpoints and pending writes of LangGraph threads in etcd. Reads work
 * anywhere; writes only inside the leaserun run that holds the thread
 * (serveGraph, withThread), fenced by its claim. */
export class LeaseRunSaver extends BaseCheckpointSaver {
	constructor(client: Client, serde?: SerializerProtocol);
	getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined>;
	list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple>;
	put(
		config: RunnableConfig,
		checkpoint: Checkpoint,
		metadata: CheckpointMetadata,
		newVersions: ChannelVersions,
	): Promise<RunnableConfig>;
	putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void>;
	/** Not fenced; refused while a run of the thread is pending (submitted,
	 * not yet started) or running, or when etcd cannot say. */
	deleteThread(threadId: string): Promise<void>;
}

/** Run fn with step holding the thread: the saver's writes for it go
 * through the step. The step's task must be a run of the thread. */
export function withThread<T>(
	step: Step,
	threadId: string,
	fn: () => T,
	options?: {
		/** The create revision of the step's task (client.status(id).createRevision),
		 * stamped on its checkpoints as metadata leaserun_task_revision. */
		taskRevision?: number;
	},
): T;

/** Another run of the thread is pending or running. */
export class ThreadBusyError extends Error {
	readonly code: 'ETHREADBUSY';
	readonly threadId: string;
	readonly runId: string;
}

export interface RunOptions {
	/** The graph's input (JSON). */
	input?: Json;
	/** A LangGraph Command instead of input: {resume}, {update}, {goto}. */
	command?: { resume?: Json; update?: Json; goto?: string | string[] };
	maxAttempts?: number;
	retryBackoffMs?: number;
}

/** Ask for a run of graph `graph` on thread threadId; rejects with
 * ThreadBusyError while another run of the thread is pending or running. */
export function submitRun(
	client: Client,
	graph: string,
	threadId: string,
	options?: RunOptions,
): Promise<{ id: string; seq: number; created: boolean }>;

/** The last run started on the thread, or null. */
export function currentRun(
	client: Client,
	threadId: string,
): Promise<{ id: string; seq: number; status: TaskStatus | null } | null>;

/** The run's final status (polling every intervalMs, at least 1, doubling
 * to 1 s; timeoutMs 0 or Infinity: no limit; others a RangeError). */
export function waitRun(
	client: Client,
	id: string,
	options?: { timeoutMs?: number; intervalMs?: number },
): Promise<TaskStatus>;

/** A compiled graph with a LeaseRunSaver as its checkpointer. */
export interface ServableGraph {
	checkpointer?: unknown;
	invoke(input: unknown, config?: RunnableConfig): Promise<unknown>;
}

/** Run graph `graph`'s runs (made by submitRun with this name) on runner. */
export function serveGraph(
	runner: Runner,
	name: string,
	graph: ServableGraph,
	options?: { config?: RunnableConfig },
): Runner;

/** The task id of run seq of a thread, and the thread's part of names. */
export function runId(threadId: string, seq: number): string;
export function threadKey(threadId: string): string;
/** The lock path ("lg/<threadKey>") each run of the thread holds in X. */
export function threadLock(threadId: string): string;
