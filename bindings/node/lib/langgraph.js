// langgraph.js - LangGraph.js on leaserun: a checkpoint saver whose writes
// are fenced by the run holding the thread, and compiled graphs run as
// leaserun tasks, one run per thread at a time.
export { LeaseRunSaver, withThread } from './langgraph/saver.js';
export { ThreadBusyError, currentRun, serveGraph, submitRun, waitRun } from './langgraph/runs.js';
export { runId, threadKey, threadLock } from './langgraph/names.js';
