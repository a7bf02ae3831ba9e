// errors.js - the errors the package throws: LeaseRunError (every failure
// of the library, with its code) and Fail (thrown by a handler to end its
// task failed instead of retrying).

/** A failure of libleaserun: `code` is "LR_EINVAL", "LR_ELEASE", ... */
export class LeaseRunError extends Error {
	constructor(message, code = 'LR_EINTERNAL') {
		super(message);
		this.name = 'LeaseRunError';
		this.code = code;
	}
}

/** Thrown by a step handler: the task ends `failed` at once (no retry). */
export class Fail extends Error {
	constructor(message, options) {
		super(message, options);
		this.name = 'Fail';
	}
}
