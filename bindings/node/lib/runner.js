// runner.js - Runner and Step: step handlers written in JavaScript, run by
// libleaserun's runner. The runner's C worker thread that holds a task
// hands each step to the event loop and waits for the handler's promise;
// checkpoints and shared writes go back to that thread, which makes the
// fenced etcd calls. See docs/embedding.md, "Node.js".
import { EventEmitter } from 'node:events';

import { Client, objectOr } from './client.js';
import { Fail, LeaseRunError } from './errors.js';
import { jsonText } from './json.js';
import native from './native.js';

const LEVELS = { debug: 0, info: 1, warn: 2, error: 3 };
const RESULT = { ok: 0, retry: 1, fail: 2 };
const DEFAULT = Symbol('default handler');

function levelNumber(level, what) {
	if (level === undefined) return undefined;
	const n = LEVELS[level];
	if (n === undefined) throw new TypeError(`${what}: expected debug, info, warn or error`);
	return n;
}

const NO_MESSAGE = 'the handler failed with a value that has no message';

// What a handler threw, as the task's error text. Never throws: a value
// without a string form (Object.create(null), a throwing message getter)
// gets a fixed text, and a NUL (which the library refuses) is escaped.
function message(err) {
	let text;
	try {
		text = err instanceof Error ? err.message || err.name : err;
		text = String(text);
	} catch {
		text = '';
	}
	return text === '' ? NO_MESSAGE : text.replaceAll('\0', '\\0');
}

// Whether a thrown value asks to fail the task at once (never throws:
// instanceof runs a Proxy's traps).
function isFail(err) {
	try {
		return err instanceof Fail;
	} catch {
		return false;
	}
}

// step.state as the JSON text to commit or checkpoint: undefined is null,
// as a handler that sets no state means none; a value JSON.stringify has
// no text for (a function, a symbol, an object whose toJSON gives
// undefined) is an error, never "unchanged". Throws JSON.stringify's own
// TypeError for a BigInt or a cycle.
function stateText(state) {
	const text = jsonText(state ?? null);
	if (text === undefined) {
		const type = typeof state;
		const what = `${type === 'object' ? 'an' : 'a'} ${type}`;
		throw new LeaseRunError(`step.state is not JSON (${what})`, 'LR_EINVAL');
	}
	return text;
}

/** One attempt of one step, as a handler sees it. */
export class Step {
	#handle;
	#controller;
	#spec;
	#env;

	constructor(handle, info, controller) {
		this.#handle = handle;
		this.#controller = controller;
		this.#spec = info.spec;
		this.#env = info.env;
		/** The task's id. */
		this.taskId = info.taskId;
		/** The step's name, its index (0-based) and the number of steps. */
		this.name = info.stepName;
		this.index = info.index;
		this.count = info.count;
		/** 1-based attempt of this step. */
		this.attempt = info.attempt;
		/** The claim's fence: grows with every claim of the task; give it to
		 * external systems that must refuse a stale worker. */
		this.fence = info.fence;
		/** The runner's name. */
		this.runner = info.runner;
		/** The task's state: a plain object (any JSON value) to read and
		 * change; it is committed with the step when the handler returns. */
		this.state = JSON.parse(info.state);
	}

	/** Aborted on lease loss, cancel, shutdown or a passed lease deadline:
	 * stop soon, nothing more is committed for this attempt. Reading it
	 * looks at the clock first: a process frozen past its deadline finds
	 * it aborted at its first look. A signal kept from an earlier read (or
	 * handed to other code) learns of a passed deadline only once the
	 * runner's own thread has run, which after a freeze can come after
	 * the handler's next timer: read step.signal (or step.cancelled) each
	 * time. */
	get signal() {
		this.#look();
		return this.#controller.signal;
	}

	/** Whether the step must stop now (as step.signal.aborted, from the
	 * clock). */
	get cancelled() {
		return this.#look();
	}

	#look() {
		const signal = this.#controller.signal;
		if (!signal.aborted) {
			const why = this.#handle.stopped();
			if (why !== undefined) this.#controller.abort(new LeaseRunError(why, 'LR_ECANCELLED'));
		}
		return signal.aborted;
	}

	/** The step's spec object {name, run, timeout_s}. */
	get spec() {
		if (typeof this.#spec === 'string') this.#spec = JSON.parse(this.#spec);
		return this.#spec;
	}

	/** The task spec's env object. */
	get env() {
		if (typeof this.#env === 'string') this.#env = JSON.parse(this.#env);
		return this.#env;
	}

	/** Commit step.state now without finishing the step (a fenced txn): a
	 * resumed attempt starts from it. Rejects with LR_ELEASE when the
	 * claim is gone, LR_ECANCELLED once the step was stopped, LR_EINVAL
	 * when the state is a function or a symbol, and with JSON.stringify's
	 * error when it holds a BigInt or a cycle. */
	async checkpoint() {
		return this.#handle.checkpoint(stateText(this.state));
	}

	/** Write shared values (name -> JSON value) in one txn fenced by this
	 * step's claim: refused (LR_ELEASE) once another holder may have
	 * taken the task. At most 100 values, 1 MiB together. Rejects (never
	 * throws) on values that are not JSON or a `values` that is no object. */
	async sharedPut(values) {
		// Object.entries would take a string or an array too, as values
		// named "0", "1", ...
		if (typeof values !== 'object' || values === null || Array.isArray(values))
			throw new TypeError(`sharedPut: expected an object or a Map of name -> value, not ${
				values === null ? 'null' : Array.isArray(values) ? 'an array' : typeof values}`);
		const entries = values instanceof Map ? [...values] : Object.entries(values);
		const texts = entries.map(([k, v]) => {
			const text = jsonText(v);
			if (text === undefined)
				throw new LeaseRunError(`sharedPut: the value of ${String(k)} is not JSON (${typeof v})`, 'LR_EINVAL');
			return text;
		});
		return this.#handle.sharedPut(entries.map(([k]) => k), texts);
	}

	/** A log line tagged with runner, task and step. A NUL character
	 * (which the library refuses) is written as \\0: a line of a tool's
	 * output must not fail the step. */
	log(msg, level = 'info') {
		this.#handle.log(levelNumber(level, 'level'), String(msg).replaceAll('\0', '\\0'));
	}
}

/**
 * A runner: claims tasks under the client's prefix and runs their steps
 * through the handlers given with handle(). Events: 'claimed',
 * 'stepCommitted', 'leaseLost', 'taskDone' (from the runner's loop).
 */
export class Runner extends EventEmitter {
	#client;
	#options;
	#native;
	#handlers = new Map();
	#started = false;

	/**
	 * options: name (default "<hostname>-<pid>"), concurrency (1), ttl
	 * (seconds, 10), grace (seconds, 10), exitWhenIdle, logLevel ('debug'
	 * .. 'error'), log (a function receiving each record; default: the
	 * library's stderr sink), stopOnSignals (true: SIGTERM and SIGINT stop
	 * the runner gracefully while it runs).
	 */
	constructor(client, options = {}) {
		super();
		if (!(client instanceof Client)) throw new TypeError('Runner: expected a Client');
		options = objectOr(options, 'Runner: options', {});
		if (options.log !== undefined && typeof options.log !== 'function')
			throw new TypeError(`Runner: log must be a function, not ${typeof options.log}`);
		// A string 'false' is truthy: a switch is a boolean or left out.
		for (const flag of ['exitWhenIdle', 'stopOnSignals'])
			if (options[flag] !== undefined && typeof options[flag] !== 'boolean')
				throw new TypeError(`Runner: ${flag} must be true or false, not ${typeof options[flag]}`);
		this.#client = client;
		this.#options = options;
		// Made now: a bad option is refused where it is given, and a stop()
		// asked before run() is kept (run() then ends at once).
		this.#nativeRunner();
	}

	/** Handle steps named stepName (null or '*': every step without a
	 * handler of its own) with an async function of a Step. Before run(). */
	handle(stepName, fn) {
		if (this.#started) throw new Error('handle(): the runner has started already');
		if (typeof fn !== 'function') throw new TypeError('handle(): expected a function');
		const key = stepName === null || stepName === undefined || stepName === '*' ? DEFAULT : stepName;
		if (key !== DEFAULT && typeof key !== 'string') {
			// An object may have no string form: it is named by its type only.
			const what = typeof key === 'object' || typeof key === 'function' ? typeof key : `${typeof key} ${String(key)}`;
			throw new TypeError(`handle(): the step name must be a string, null or '*', not ${what}`);
		}
		if (key !== DEFAULT && key.includes('\0'))
			throw new TypeError(`handle(): the step name ${JSON.stringify(key)} holds a NUL character`);
		this.#handlers.set(key, fn);
		return this;
	}

	#nativeRunner() {
		if (this.#native) return this.#native;
		const o = this.#options;
		const opts = {
			name: o.name,
			concurrency: o.concurrency,
			ttl: o.ttl,
			grace: o.grace,
			exitWhenIdle: o.exitWhenIdle,
			logLevel: levelNumber(o.logLevel, 'logLevel'),
			log: typeof o.log === 'function',
			events: true,
		};
		this.#native = new native.NativeRunner(this.#client._native, opts);
		return this.#native;
	}

	/** Run until stop() (or SIGTERM/SIGINT, or idle with exitWhenIdle);
	 * resolves after the graceful stop: steps given `grace` seconds,
	 * claims released, lease revoked. A runner runs once. */
	async run() {
		const n = this.#nativeRunner();
		const names = [...this.#handlers.keys()].filter((k) => k !== DEFAULT);
		// Held by the native runner while it runs only: their closures
		// hold this object.
		const hooks = {
			dispatch: (handle, info) => this.#dispatch(handle, info),
			event: (name, data) => this.emit(name, data),
			log: typeof this.#options.log === 'function' ? this.#options.log : undefined,
		};
		const done = n.run(names, this.#handlers.has(DEFAULT), hooks);
		this.#started = true;
		const stop = () => this.stop();
		const signals = this.#options.stopOnSignals === false ? [] : ['SIGTERM', 'SIGINT'];
		for (const s of signals) process.on(s, stop);
		try {
			await done;
		} finally {
			for (const s of signals) process.off(s, stop);
		}
	}

	/** Ask for a graceful stop (any time; harmless once stopped; before
	 * run(), run() ends at once). */
	stop() {
		this.#native.stop();
	}

	/** What the runner has done: counters and latency summaries. */
	stats() {
		return this.#nativeRunner().stats();
	}

	async #dispatch(handle, info) {
		const controller = new AbortController();
		handle.onabort = (why) => controller.abort(new LeaseRunError(why, 'LR_ECANCELLED'));
		// The step's worker waits for finish(): it is called whatever happens.
		// Should finish itself throw, the rejected promise makes the addon
		// give the attempt up (retried) instead.
		let result = RESULT.retry;
		let state = null;
		let error = NO_MESSAGE;
		try {
			const step = new Step(handle, info, controller);
			const fn = this.#handlers.get(info.stepName) ?? this.#handlers.get(DEFAULT);
			await fn(step);
			state = stateText(step.state);
			[result, error] = [RESULT.ok, null];
		} catch (err) {
			[result, error] = [isFail(err) ? RESULT.fail : RESULT.retry, message(err)];
		} finally {
			handle.finish(result, state, error);
		}
	}
}
