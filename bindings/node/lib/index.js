// index.js - the package's entry point: Client, Runner, Step and the errors.
import { Client } from './client.js';
import { Fail, LeaseRunError } from './errors.js';
import { Runner, Step } from './runner.js';

export { Client, Fail, LeaseRunError, Runner, Step };

/** Everything under one name: LeaseRun.Client, LeaseRun.Fail, ... */
export const LeaseRun = { Client, Runner, Step, Fail, LeaseRunError };
export default LeaseRun;
