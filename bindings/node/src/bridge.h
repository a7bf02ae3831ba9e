// bridge.h - how a step handled in JavaScript runs: the C worker thread
// that runs the step hands it to the JavaScript thread (a thread-safe
// function) and then serves the handler's requests (checkpoint, shared
// writes, log lines, the result) until the handler's promise settles.
//
// Threads: a StepCall is made and served by its C worker thread; the
// JavaScript thread only pushes requests into it (under its mutex) and
// reads the snapshot taken before dispatch. RunnerCore's mutex guards the
// set of calls in progress and `closing`; its JavaScript references are
// used on the JavaScript thread only.
#ifndef LEASERUN_NODE_BRIDGE_H
#define LEASERUN_NODE_BRIDGE_H

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "addon.h"

namespace lrnode {

class StepHandle;

// What the JavaScript handler asks of its step.
struct Request {
	enum Kind { CHECKPOINT, SHARED_PUT, LOG, FINISH } kind;
	explicit Request(Kind k) : kind(k) {}
	uint32_t id = 0;                 // CHECKPOINT, SHARED_PUT: answered by id
	std::string text;                // state (CHECKPOINT, FINISH), log line
	bool has_text = false;
	std::string error;               // FINISH: why it failed
	std::vector<std::string> names;  // SHARED_PUT
	std::vector<std::string> values; // SHARED_PUT: JSON texts
	int level = 0;                   // LOG
	lr_step_result result = LR_STEP_OK; // FINISH
};

class RunnerCore;

// One call of a JavaScript handler for one attempt of a step.
class StepCall : public std::enable_shared_from_this<StepCall> {
public:
	explicit StepCall(lr_step *s);
	~StepCall();
	StepCall(const StepCall &) = delete;
	StepCall &operator=(const StepCall &) = delete;

	// The step as the handler sees it, copied before dispatch.
	std::string task_id, name, runner, state, spec, env;
	int64_t index = 0, count = 0, attempt = 0, fence = 0;

	// Queue a request for the worker thread; false when the call is over
	// (its result was given, or the runner is closing). Any thread.
	bool Push(Request r);
	// End the call with LR_STEP_RETRY and this reason unless it is over
	// already. Any thread.
	void Abandon(const char *why);
	// Worker thread: serve requests until the result comes.
	lr_step_result Serve(RunnerCore *core);
	// Worker thread, once Serve returned: the call is over; give its
	// eventfd back (later requests are refused).
	void Close();
	bool ok() const { return efd_ >= 0; }
	// "task ID, step NAME": what messages about this call start with.
	std::string Where() const;
	// Why the handler must stop now ("" when it need not), judged from
	// the clock and the runner's stop flags, not from any thread having
	// noticed: a process frozen past its lease deadline knows at its
	// first look. "the step is over" once its result was given. Any
	// thread (the JavaScript thread: step.signal, step.cancelled).
	std::string StopReason();

private:
	std::string StopText();
	lr_step_result Finish(const Request &r);
	void Checkpoint(RunnerCore *core, const Request &r);
	void SharedPut(RunnerCore *core, const Request &r);
	void Reply(RunnerCore *core, uint32_t id, int rc, const lr_err &e);
	void Wait(bool watch_cancel);

	lr_step *s_;
	int efd_;          // eventfd: a request was pushed; -1 once closed (mu_)
	std::mutex mu_;
	std::deque<Request> q_;
	bool over_ = false;
};
using StepCallPtr = std::shared_ptr<StepCall>;

// A message for the JavaScript thread.
struct Msg {
	enum Kind { DISPATCH, RESULT, ABORT, CLOSED, EVENT, LOG, DONE } kind;
	explicit Msg(Kind k) : kind(k) {}
	StepCallPtr call;       // DISPATCH, RESULT, ABORT, CLOSED
	uint32_t id = 0;        // RESULT
	int rc = 0;             // RESULT, DONE
	std::string text;       // RESULT, ABORT, DONE: message; EVENT: its name
	std::string task, step, extra; // EVENT, LOG
	int64_t n[4] = { 0, 0, 0, 0 }; // EVENT: which, numbers; LOG: level, index
};

// The native runner's state that threads share. Owned by the Runner
// object; lives until the runner thread is joined.
class RunnerCore {
public:
	lr_runner *r = nullptr;
	ConnPtr conn;

	// Hand a message to the JavaScript thread; false (and msg deleted)
	// when the environment is closing. Any thread.
	bool Post(Msg *msg);
	// Register a call in progress; false when closing. Worker threads.
	bool Enter(const StepCallPtr &call);
	void Leave(const StepCallPtr &call);
	// Stop the runner and end every call in progress: JavaScript will
	// not answer any more. Any thread.
	void CloseAll(const char *why);

	// Set while lr_runner_run runs (JavaScript thread).
	napi_threadsafe_function tsfn = nullptr;
	std::thread thread;

	// Written by the runner thread before it lets go of tsfn.
	int run_rc = 0;
	lr_err run_err = {};

	// JavaScript thread only.
	Napi::FunctionReference dispatch, on_event, on_log;
	Napi::ObjectReference self; // the Runner object, kept alive while running
	std::unique_ptr<Napi::Promise::Deferred> done;
	bool running = false;
	bool done_seen = false;     // DONE arrived: the environment is alive
	// The handle of each call in progress, from dispatch until the worker
	// thread lets go of the call.
	std::map<const StepCall *, std::pair<Napi::ObjectReference, StepHandle *>> handles;

private:
	std::mutex mu_;
	std::set<StepCallPtr> active_;
	bool closing_ = false;
};

// The C handler of every step a JavaScript handler takes (user: RunnerCore).
lr_step_result Bridge(lr_step *s, void *user);

// JavaScript thread: deliver a message about a step (env is null when the
// environment is going away: then only C state is touched).
void DeliverStepMsg(napi_env env, RunnerCore *core, Msg *msg);
// The class of step handles, for module set-up.
Napi::Function DefineStepHandle(Napi::Env env);

} // namespace lrnode

#endif
