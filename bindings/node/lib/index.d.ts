// Type declarations of the leaserun package (lib/index.js).
import { EventEmitter } from 'node:events';

/** Codes of libleaserun's errors (leaserun.h). */
/** Multi-granularity lock modes. */
export type LockMode = 'IS' | 'IX' | 'S' | 'SIX' | 'X';

export interface WithLocksOptions {
	/** Slot pools: at most N holders of KEY at once. */
	limits?: Record<string, number>;
	/** The lease's TTL in whole seconds, 1 to 86400 (default 10). */
	ttl?: number;
	/** Give up after this many seconds, 0 to a year (0: try once;
	 * default or Infinity: wait forever). */
	wait?: number;
	/** Ends the wait: withLocks rejects with a LeaseRunError named
	 * AbortError (code LR_ECANCELLED) and nothing stays queued. Once the
	 * locks are held it does not stop fn. */
	signal?: AbortSignal;
}

export type ErrorCode =
	| 'LR_EINVAL'
	| 'LR_EEXIST'
	| 'LR_ENOTFOUND'
	| 'LR_EUNAVAILABLE'
	| 'LR_ETIMEDOUT'
	| 'LR_EAMBIGUOUS'
	| 'LR_EPERM'
	| 'LR_EAUTH'
	| 'LR_ETLS'
	| 'LR_EETCD'
	| 'LR_ECONFLICT'
	| 'LR_ELEASE'
	| 'LR_ECANCELLED'
	| 'LR_ETOOLARGE'
	| 'LR_EINUSE'
	| 'LR_ESYS'
	| 'LR_ENOMEM'
	| 'LR_ECLOSED'
	| 'LR_EINTERNAL'
	| 'LR_EBUSY';

/** A failure of libleaserun, with its code and a message that names the
 * endpoint, task and step involved. */
export class LeaseRunError extends Error {
	constructor(message: string, code?: ErrorCode);
	code: ErrorCode;
}

/** Thrown by a step handler: the task ends `failed` at once, no retry. */
export class Fail extends Error {
	constructor(message?: string, options?: ErrorOptions);
}

export type TaskState = 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A task spec (docs/commands.md, "Task spec"). */
export interface TaskSpec {
	id?: string;
	steps: { name: string; run: string; timeout_s?: number }[];
	state?: Json;
	max_attempts?: number;
	retry_backoff_ms?: number;
	env?: Record<string, string>;
}

export interface TaskStatus {
	id: string;
	state: TaskState;
	/** First step not committed. */
	nextStep: number;
	steps: number;
	stepName: string | null;
	attempt: number;
	maxAttempts: number;
	runner: string | null;
	error: string | null;
	updatedAt: string | null;
	/** Pending or running: when a cancel was requested ("" when the request
	 * does not say), until the task ends (a holder stopping it, or a dead
	 * holder's task waiting for a runner to end it); null when not asked. */
	cancelRequestedAt: string | null;
	createRevision: number;
}

export interface RunnerInfo {
	name: string;
	host: string;
	pid: number;
	concurrency: number;
	ttl: number;
	ttlLeft: number;
	/** The runner's lease, in hexadecimal as etcdctl shows it. */
	lease: string;
	startedAt: string;
	version: string;
}

/** Connection options, as the command's; a missing one comes from its
 * LEASERUN_* variable, then the default. */
export interface ConnectOptions {
	/** "host:port[,host:port...]" or a list; default 127.0.0.1:2379. */
	endpoints?: string | string[];
	/** Key prefix; default "/leaserun/". */
	prefix?: string;
	/** CA certificate (PEM file): use TLS. */
	cacert?: string;
	/** Client certificate and key (PEM files): mutual TLS. */
	cert?: string;
	key?: string;
	/** The name checked against the server certificate. */
	tlsServerName?: string;
	/** etcd user: "name" or "name:password". */
	user?: string;
	password?: string;
	/** Seconds, 0.001 to 3600: an unreachable cluster is reported within
	 * it (default 5). */
	dialTimeout?: number;
	/** Seconds, 0.001 to 3600: the deadline of one etcd call (default 5). */
	callTimeout?: number;
}

export interface SharedEntry {
	name: string;
	/** undefined with keysOnly. */
	value: Json | undefined;
	modRevision: number;
}

/** Shared JSON values under P"shared/<name>"; names are
 * [A-Za-z0-9._:-]{1,200}. A step writes them with step.sharedPut. */
export interface Shared {
	get(name: string): Promise<Json | undefined>;
	list(prefix?: string, options?: { keysOnly?: boolean }): Promise<SharedEntry[]>;
	/** Not fenced: for tools and clean-up. Resolves to how many went. */
	delete(name: string, options?: { prefix?: boolean; all?: boolean }): Promise<number>;
}

export class Client {
	private constructor();
	/** Connect; rejects with LR_EUNAVAILABLE (naming the endpoints) within
	 * the dial timeout, LR_EAUTH, LR_ETLS, LR_EINVAL. */
	static connect(options?: ConnectOptions): Promise<Client>;
	readonly prefix: string;
	readonly shared: Shared;
	/** Validate and store a task (an object, or JSON text: a string, or
	 * UTF-8 bytes as read from a file); an identical spec again is a
	 * success (created false). LR_EINVAL names the field (an empty `id`
	 * too), LR_EEXIST: same id, another spec. */
	submit(spec: TaskSpec | string | Uint8Array, options?: { id?: string }): Promise<{ id: string; created: boolean }>;
	/** LR_ENOTFOUND when there is no such task. */
	status(id: string): Promise<TaskStatus>;
	/** Oldest first; limit: a whole number up to 1e9 (0, the default: all),
	 * else a RangeError naming limit. */
	list(options?: { state?: TaskState; limit?: number }): Promise<TaskStatus[]>;
	/** already: the final state when the task had finished (nothing changed). */
	cancel(id: string): Promise<{ already: TaskState | null }>;
	runners(): Promise<RunnerInfo[]>;
	/**
	 * Hold locks and slots while fn runs (see docs/locks.md): taken at once
	 * on a lease of their own, fairly; released when fn settles. Rejects
	 * with code LR_EBUSY when `wait` (seconds) runs out, LR_EINVAL for an
	 * invalid path, mode or limit.
	 */
	withLocks<T>(
		locks: Record<string, LockMode>,
		options: WithLocksOptions,
		fn: (fence: number, signal: AbortSignal, slots: Record<string, number>) => Promise<T> | T,
	): Promise<T>;
	withLocks<T>(
		locks: Record<string, LockMode>,
		fn: (fence: number, signal: AbortSignal, slots: Record<string, number>) => Promise<T> | T,
	): Promise<T>;
	/** Close once the calls in flight and the runners on it are done. */
	close(): void;
	// Resource locks (withLocks) come with the locks of the task spec.
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface LogRecord {
	level: LogLevel;
	runner: string | null;
	task: string | null;
	step: string | null;
	/** -1 when not about a step. */
	stepIndex: number;
	msg: string;
}

export interface RunnerOptions {
	/** Default "<hostname>-<pid>"; a live runner's name cannot be taken. */
	name?: string;
	/** Tasks run at once, 1 to 1024 (default 1). */
	concurrency?: number;
	/** Lease TTL in whole seconds, 1 to 86400 (default 10). */
	ttl?: number;
	/** Whole seconds, 0 to 86400, a graceful stop gives running steps (default 10). */
	grace?: number;
	/** Stop once no task is pending or claimed. */
	exitWhenIdle?: boolean;
	/** Records below it are not made. */
	logLevel?: LogLevel;
	/** Receives every record; default: stderr, JSON lines (text on a tty). */
	log?: (record: LogRecord) => void;
	/** SIGTERM and SIGINT stop the runner gracefully while it runs
	 * (default true). */
	stopOnSignals?: boolean;
}

/** One attempt of one step, as its handler sees it. */
export class Step<S = any> {
	private constructor();
	readonly taskId: string;
	readonly name: string;
	/** 0-based index of the step, and the number of steps. */
	readonly index: number;
	readonly count: number;
	/** 1-based attempt of this step. */
	readonly attempt: number;
	/** The claim's fence: grows with every claim of the task. */
	readonly fence: number;
	readonly runner: string;
	/** Fired on lease loss, cancel, shutdown or a passed lease deadline;
	 * its reason is a LeaseRunError (LR_ECANCELLED). Reading it looks at
	 * the clock first: read step.signal each time rather than keep it. */
	readonly signal: AbortSignal;
	/** Whether the step must stop now (from the clock, as step.signal). */
	readonly cancelled: boolean;
	/** The task's state, committed with the step when the handler returns
	 * (undefined commits null; a function or a symbol fails the attempt
	 * with LR_EINVAL). */
	state: S;
	/** The step's spec object. */
	readonly spec: { name: string; run: string; timeout_s: number };
	/** The task spec's env. */
	readonly env: Record<string, string>;
	/** Commit `state` now (fenced) without finishing the step: a resumed
	 * attempt starts from it. LR_ELEASE when the claim is gone,
	 * LR_ECANCELLED once stopped, LR_ETOOLARGE over 512 KiB, LR_EINVAL
	 * when `state` is a function or a symbol. */
	checkpoint(): Promise<void>;
	/** Write shared values in one txn fenced by this step's claim (at most
	 * 100, 1 MiB together); LR_ELEASE once another holder may have the
	 * task. A string or an array is a TypeError (rejected). */
	sharedPut(values: Record<string, Json> | Map<string, Json>): Promise<void>;
	/** A log line tagged with runner, task and step (a NUL written as \0). */
	log(msg: string, level?: LogLevel): void;
}

export type StepHandler<S = any> = (step: Step<S>) => Promise<void> | void;

export interface RunnerEvents {
	claimed: [{ taskId: string; nextStep: number; attempt: number; fence: number }];
	stepCommitted: [{ taskId: string; step: number; name: string }];
	leaseLost: [{ reason: string }];
	taskDone: [{ taskId: string; state: TaskState; error: string | null }];
}

export interface Latency {
	count: number;
	meanMs: number;
	p50Ms: number;
	p90Ms: number;
	p99Ms: number;
	maxMs: number;
}

export interface RunnerStats {
	claimsWon: number;
	claimsLost: number;
	stepsCommitted: number;
	attemptsFailed: number;
	tasksFinished: number;
	tasksSucceeded: number;
	tasksFailed: number;
	tasksCancelled: number;
	tasksLetGo: number;
	leaseLosses: number;
	claim: Latency;
	commit: Latency;
	completion: Latency;
}

export class Runner extends EventEmitter<RunnerEvents> {
	/** Options are checked here: a TypeError or RangeError naming the
	 * option, LR_EINVAL for a name the library refuses. */
	constructor(client: Client, options?: RunnerOptions);
	/** Handle steps named stepName (null or '*': every step without a
	 * handler of its own). A handler that throws is a failed attempt
	 * (retried), one that throws Fail ends the task failed. Before run(). */
	handle<S = any>(stepName: string | null, fn: StepHandler<S>): this;
	/** Run until stop(), a signal, or idle with exitWhenIdle; resolves after
	 * the graceful stop. LR_EINUSE when the name is held by a live runner.
	 * A runner runs once. */
	run(): Promise<void>;
	/** A graceful stop; asked before run(), run() ends at once. */
	stop(): void;
	stats(): RunnerStats;
}

export const LeaseRun: {
	Client: typeof Client;
	Runner: typeof Runner;
	Step: typeof Step;
	Fail: typeof Fail;
	LeaseRunError: typeof LeaseRunError;
};
export default LeaseRun;
