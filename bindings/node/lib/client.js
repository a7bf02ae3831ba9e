// client.js - Client: a connection to the etcd cluster, and the task and
// shared-value operations. Every call is a promise settled by libleaserun
// on libuv's thread pool (withLocks: on threads of its own, its waits
// would fill the pool); none blocks the event loop.
import native from './native.js';
import { LeaseRunError } from './errors.js';
import { jsonText } from './json.js';

const STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];

/** @internal An object argument (options, locks, limits): `none` for
 * undefined or null, else the object; anything else is a TypeError
 * naming `what`. */
export function objectOr(o, what, none) {
	if (o === undefined || o === null) return none;
	if (typeof o !== 'object' || Array.isArray(o))
		throw new TypeError(`${what} must be an object, not ${Array.isArray(o) ? 'an array' : typeof o}`);
	return o;
}

const optionsOf = (o, call) => objectOr(o, `${call}: options`, {});

// Options as the command takes them: given, else LEASERUN_*, else the
// library's default.
function connectOptions(o) {
	const env = process.env;
	const pick = (v, name) => (v !== undefined && v !== null ? v : env[name]);
	let endpoints = pick(o.endpoints, 'LEASERUN_ENDPOINTS');
	if (Array.isArray(endpoints)) endpoints = endpoints.join(',');
	let user = pick(o.user, 'LEASERUN_USER');
	let password = pick(o.password, 'LEASERUN_PASSWORD');
	if (typeof user === 'string' && user.includes(':')) {
		const at = user.indexOf(':');
		password = password ?? user.slice(at + 1);
		user = user.slice(0, at);
	}
	return {
		endpoints,
		prefix: pick(o.prefix, 'LEASERUN_PREFIX'),
		cacert: pick(o.cacert, 'LEASERUN_CACERT'),
		cert: pick(o.cert, 'LEASERUN_CERT'),
		key: pick(o.key, 'LEASERUN_KEY'),
		tlsServerName: o.tlsServerName,
		user,
		password,
		dialTimeout: o.dialTimeout,
		callTimeout: o.callTimeout,
	};
}

function stateNumber(state) {
	if (state === undefined || state === null) return -1;
	const n = STATES.indexOf(state);
	if (n < 0) throw new TypeError(`state: expected one of ${STATES.join(', ')}, got ${state}`);
	return n;
}

// A spec as JSON text. Bytes are the file's text, as `leaserun submit
// FILE` reads it (JSON.stringify would make a Buffer {"type": "Buffer",
// "data": [...]}); bytes that are not UTF-8 are refused as jansson would.
function specText(spec) {
	if (typeof spec === 'string') return spec;
	if (ArrayBuffer.isView(spec)) {
		const bytes = new Uint8Array(spec.buffer, spec.byteOffset, spec.byteLength);
		try {
			return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
		} catch {
			throw new LeaseRunError('invalid spec: the bytes given are not UTF-8 text', 'LR_EINVAL');
		}
	}
	return jsonText(spec);
}

function parse(text) {
	return text === null ? undefined : JSON.parse(text);
}

/** Shared JSON values under P"shared/<name>" (see docs/embedding.md). */
class Shared {
	#native;
	constructor(n) {
		this.#native = n;
	}

	/** The value, or undefined when there is none. */
	async get(name) {
		return parse(await this.#native.sharedGet(name));
	}

	/** Values whose names start with prefix, in name order. */
	async list(prefix = '', options) {
		const { keysOnly = false } = optionsOf(options, 'shared.list');
		const rows = await this.#native.sharedList(prefix, keysOnly);
		return rows.map(([name, text, modRevision]) => ({
			name,
			value: keysOnly ? undefined : parse(text),
			modRevision,
		}));
	}

	/** Delete one name, or with {prefix: true} every name starting with it;
	 * resolves to how many were deleted. Not fenced: a step writes with
	 * step.sharedPut. The name must be a string; the empty prefix, which
	 * means every shared value (LangGraph threads' checkpoints included),
	 * only with {prefix: true, all: true}. */
	async delete(name, options) {
		const { prefix = false, all = false } = optionsOf(options, 'shared.delete');
		if (typeof name !== 'string')
			throw new TypeError(`shared.delete: the name must be a string, not ${name === null ? 'null' : typeof name}`);
		if (prefix && name === '' && all !== true)
			throw new TypeError("shared.delete: the empty prefix deletes every shared value: say so with {prefix: true, all: true}");
		return this.#native.sharedDelete(name, prefix);
	}
}

export class Client {
	#native;

	/** Use Client.connect(). */
	constructor(n) {
		if (!(n instanceof native.NativeClient)) throw new TypeError('use Client.connect()');
		this.#native = n;
		this.shared = new Shared(n);
	}

	/**
	 * Connect to etcd. Options as the command's: endpoints ("h:p,h:p" or an
	 * array), prefix, cacert, cert, key, tlsServerName, user ("name" or
	 * "name:password"), password, dialTimeout and callTimeout (seconds);
	 * missing ones come from LEASERUN_* variables, then the defaults.
	 */
	static async connect(options) {
		return new Client(await native.openClient(connectOptions(optionsOf(options, 'connect'))));
	}

	/** The key prefix in use ("/leaserun/"). */
	get prefix() {
		return this.#native.prefix();
	}

	/** @internal the native client, for Runner. */
	get _native() {
		return this.#native;
	}

	/** Validate and store a task (an object, or JSON text as a string or
	 * as UTF-8 bytes: a Buffer read from a file); resolves to {id,
	 * created}. Submitting an identical spec again is a success. */
	async submit(spec, options) {
		const { id } = optionsOf(options, 'submit');
		return this.#native.submit(specText(spec), id ?? null);
	}

	/** One task's status; rejects with code LR_ENOTFOUND when there is none. */
	async status(id) {
		return this.#native.status(id);
	}

	/** Tasks oldest first, optionally of one state, at most limit (a
	 * whole number up to 1e9; 0: all). */
	async list(options) {
		const { state, limit = 0 } = optionsOf(options, 'list');
		return this.#native.list(stateNumber(state), limit);
	}

	/** Cancel a pending or running task; {already: state} when it had
	 * finished (nothing changed), {already: null} otherwise. */
	async cancel(id) {
		return this.#native.cancel(id);
	}

	/**
	 * Hold locks ({PATH: MODE}, see docs/locks.md) and slots ({limits:
	 * {KEY: N}}) while fn runs: taken all at once on a lease of their own,
	 * waiting first come first served (up to `wait` seconds, 0 to a year,
	 * then a LeaseRunError with code LR_EBUSY naming a holder; forever when
	 * absent or Infinity; `ttl` 1 to 86400 seconds, default 10),
	 * kept alive while fn runs, given back when it settles. An AbortSignal
	 * `signal` ends the wait: withLocks then rejects with an error named
	 * AbortError (code LR_ECANCELLED) naming the locks, and leaves nothing
	 * queued; once they are held it does not stop fn. fn gets the hold's
	 * fence (pass it to what you write, so that a stale holder is
	 * refused), an AbortSignal fired if the lease is lost, and the slots
	 * taken ({gpu: 2}). Settles as fn settles: should giving them back
	 * fail (the lease then expires within ttl), that LeaseRunError is
	 * emitted as a process warning instead.
	 */
	async withLocks(locks, options, fn) {
		if (typeof options === 'function') [fn, options] = [options, {}];
		if (typeof fn !== 'function') throw new TypeError('withLocks: expected a function');
		const { limits, ttl = 10, wait, signal } = optionsOf(options, 'withLocks');
		objectOr(locks, 'withLocks: locks', null);
		objectOr(limits, 'withLocks: limits', null);
		if (signal !== undefined && signal !== null && !(signal instanceof AbortSignal))
			throw new TypeError('withLocks: signal: expected an AbortSignal');
		const aborted = () => {
			const what = JSON.stringify({ ...locks, ...(limits ? { limits } : {}) });
			const err = new LeaseRunError(`withLocks ${what}: the wait was aborted`, 'LR_ECANCELLED');
			err.name = 'AbortError';
			err.cause = signal.reason;
			return err;
		};
		if (signal?.aborted) throw aborted();
		const acquire = native.holdAcquire(
			this.#native,
			locks && Object.keys(locks).length ? jsonText(locks) : null,
			limits && Object.keys(limits).length ? jsonText(limits) : null,
			ttl,
			wait,
		);
		signal?.addEventListener('abort', acquire.cancel, { once: true });
		let held;
		try {
			held = await acquire.promise;
		} catch (err) {
			throw err.code === 'LR_ECANCELLED' && signal?.aborted ? aborted() : err;
		} finally {
			signal?.removeEventListener('abort', acquire.cancel);
		}
		if (signal?.aborted) {
			// Taken just as the wait was aborted: given back, fn not run.
			await native.holdRelease(held.handle).catch((err) => process.emitWarning(err));
			throw aborted();
		}
		const lost = new AbortController();
		native.holdWatch(held.handle, () =>
			lost.abort(new LeaseRunError(`hold ${held.id}: its lease was lost`, 'LR_ELEASE')));
		try {
			return await fn(held.fence, lost.signal, JSON.parse(held.slots));
		} finally {
			// fn's result or error stands: a failed release (the locks go
			// when the lease expires) is a process warning.
			await native.holdRelease(held.handle).catch((err) => process.emitWarning(err));
		}
	}

	/** Live runners (lease in hexadecimal, as etcdctl shows it). */
	async runners() {
		return this.#native.runners();
	}

	/** Close once every call in flight and every runner on it is done. */
	close() {
		this.#native.close();
	}
}
