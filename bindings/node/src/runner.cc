// runner.cc - the native Runner: lr_runner_run on a thread of its own,
// and the thread-safe function that carries steps, results, lifecycle
// events and log records to the JavaScript thread.
// Threads: the Runner's methods, CallJs and Finalize run on the JavaScript
// thread; RunThread on the runner thread; LogSink and the lifecycle
// callbacks on the runner's threads (its loop and its workers).
#include <cstring>
#include <string>
#include <vector>

#include "bridge.h"

namespace lrnode {

// ---- RunnerCore ---------------------------------------------------------------

bool RunnerCore::Post(Msg *msg)
{
	napi_threadsafe_function f = tsfn;
	if (f == nullptr || napi_call_threadsafe_function(f, msg, napi_tsfn_blocking) != napi_ok) {
		delete msg;
		return false;
	}
	return true;
}

bool RunnerCore::Enter(const StepCallPtr &call)
{
	std::lock_guard<std::mutex> lock(mu_);
	if (closing_)
		return false;
	active_.insert(call);
	return true;
}

void RunnerCore::Leave(const StepCallPtr &call)
{
	std::lock_guard<std::mutex> lock(mu_);
	active_.erase(call);
}

void RunnerCore::CloseAll(const char *why)
{
	std::set<StepCallPtr> calls;
	{
		std::lock_guard<std::mutex> lock(mu_);
		closing_ = true;
		calls = active_;
	}
	lr_runner_stop(r);
	for (const StepCallPtr &c : calls)
		c->Abandon(why);
}

namespace {

const char *const kEventNames[] = { "claimed", "stepCommitted", "leaseLost", "taskDone" };
enum { EV_CLAIMED, EV_COMMITTED, EV_LEASE_LOST, EV_DONE };

void PostEvent(void *user, int which, const char *task, const char *text, int64_t x,
               int64_t y, int64_t z)
{
	Msg *m = new Msg(Msg::EVENT);
	m->n[0] = which;
	m->n[1] = x;
	m->n[2] = y;
	m->n[3] = z;
	m->task = task != nullptr ? task : "";
	m->extra = text != nullptr ? text : "";
	static_cast<RunnerCore *>(user)->Post(m);
}

void OnClaimed(void *user, const char *task, int64_t next_step, int64_t attempt, int64_t fence)
{
	PostEvent(user, EV_CLAIMED, task, nullptr, next_step, attempt, fence);
}

void OnCommitted(void *user, const char *task, int64_t step, const char *name)
{
	PostEvent(user, EV_COMMITTED, task, name, step, 0, 0);
}

void OnLeaseLost(void *user, const char *why)
{
	PostEvent(user, EV_LEASE_LOST, nullptr, why, 0, 0, 0);
}

void OnTaskDone(void *user, const char *task, lr_task_state st, const char *error)
{
	PostEvent(user, EV_DONE, task, error, st, 0, 0);
}

void LogSink(void *user, const lr_log_record *rec)
{
	RunnerCore *core = static_cast<RunnerCore *>(user);
	Msg *m = new Msg(Msg::LOG);
	m->n[0] = rec->level;
	m->n[1] = rec->step_index;
	m->task = rec->task != nullptr ? rec->task : "";
	m->step = rec->step != nullptr ? rec->step : "";
	m->extra = rec->runner != nullptr ? rec->runner : "";
	m->text = rec->msg != nullptr ? rec->msg : "";
	core->Post(m);
}

const char *const kLevels[] = { "debug", "info", "warn", "error" };

Napi::Value StrOrNull(Napi::Env env, const std::string &s)
{
	return s.empty() ? env.Null() : Napi::Value(Napi::String::New(env, s));
}

void DeliverEvent(Napi::Env env, RunnerCore *core, const Msg &m)
{
	if (core->on_event.IsEmpty())
		return;
	Napi::Object o = Napi::Object::New(env);
	int which = static_cast<int>(m.n[0]);
	switch (which) {
	case EV_CLAIMED:
		o.Set("taskId", m.task);
		o.Set("nextStep", static_cast<double>(m.n[1]));
		o.Set("attempt", static_cast<double>(m.n[2]));
		o.Set("fence", static_cast<double>(m.n[3]));
		break;
	case EV_COMMITTED:
		o.Set("taskId", m.task);
		o.Set("step", static_cast<double>(m.n[1]));
		o.Set("name", m.extra);
		break;
	case EV_LEASE_LOST:
		o.Set("reason", m.extra);
		break;
	case EV_DONE:
		o.Set("taskId", m.task);
		o.Set("state", lr_task_state_name(static_cast<lr_task_state>(m.n[1])));
		o.Set("error", StrOrNull(env, m.extra));
		break;
	}
	core->on_event.Call({ Napi::String::New(env, kEventNames[which]), o });
}

void DeliverLog(Napi::Env env, RunnerCore *core, const Msg &m)
{
	if (core->on_log.IsEmpty())
		return;
	Napi::Object o = Napi::Object::New(env);
	int level = static_cast<int>(m.n[0]);
	o.Set("level", kLevels[level >= 0 && level <= 3 ? level : 1]);
	o.Set("runner", StrOrNull(env, m.extra));
	o.Set("task", StrOrNull(env, m.task));
	o.Set("step", StrOrNull(env, m.step));
	o.Set("stepIndex", static_cast<double>(m.n[1]));
	o.Set("msg", m.text);
	core->on_log.Call({ o });
}

void CallJs(napi_env env, napi_value, void *context, void *data)
{
	RunnerCore *core = static_cast<RunnerCore *>(context);
	std::unique_ptr<Msg> msg(static_cast<Msg *>(data));
	try {
		switch (msg->kind) {
		case Msg::DISPATCH:
		case Msg::RESULT:
		case Msg::ABORT:
		case Msg::CLOSED:
			DeliverStepMsg(env, core, msg.get());
			break;
		case Msg::EVENT:
			if (env != nullptr)
				DeliverEvent(Napi::Env(env), core, *msg);
			break;
		case Msg::LOG:
			if (env != nullptr)
				DeliverLog(Napi::Env(env), core, *msg);
			break;
		case Msg::DONE:
			core->done_seen = env != nullptr;
			break;
		}
	} catch (const Napi::Error &e) {
		// A listener threw: report it as node reports any uncaught error.
		if (env != nullptr)
			napi_fatal_exception(env, e.Value());
	}
}

void RunThread(RunnerCore *core)
{
	core->run_err = {};
	core->run_rc = lr_runner_run(core->r, &core->run_err);
	core->Post(new Msg(Msg::DONE));
	napi_release_threadsafe_function(core->tsfn, napi_tsfn_release);
}

// The last message has been delivered (or the environment is going away):
// join the runner thread and settle run()'s promise.
void FinalizeRun(napi_env raw, void *, void *hint)
{
	RunnerCore *core = static_cast<RunnerCore *>(hint);
	core->CloseAll("the runner's JavaScript environment is closing");
	if (core->thread.joinable())
		core->thread.join();
	core->tsfn = nullptr;
	core->running = false;
	core->handles.clear();
	std::unique_ptr<Napi::Promise::Deferred> done = std::move(core->done);
	if (core->done_seen && done) {
		Napi::Env env(raw);
		Napi::HandleScope scope(env);
		if (core->run_rc == 0)
			done->Resolve(env.Undefined());
		else
			done->Reject(MakeError(env, core->run_rc, core->run_err.msg).Value());
	}
	// The hooks' closures hold the JavaScript Runner, which holds this
	// object: kept past the run, they would keep both (and the client's
	// connection) alive for good.
	core->dispatch.Reset();
	core->on_event.Reset();
	core->on_log.Reset();
	core->self.Reset();
}

} // namespace

// ---- the Runner object -------------------------------------------------------

class Runner : public Napi::ObjectWrap<Runner> {
public:
	static Napi::Function Define(Napi::Env env)
	{
		return DefineClass(env, "NativeRunner",
		                   { InstanceMethod<&Runner::Run>("run"),
		                     InstanceMethod<&Runner::Stop>("stop"),
		                     InstanceMethod<&Runner::Stats>("stats") });
	}

	// new NativeRunner(client, opts): opts.log and opts.events say
	// whether run() will be given those hooks.
	explicit Runner(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Runner>(info)
	{
		Napi::Env env = info.Env();
		core_.conn = ClientConn(info[0]);
		Napi::Object o = info[1].IsObject() ? info[1].As<Napi::Object>() : Napi::Object::New(env);
		name_ = OptString(o.Get("name"), "name");
		lr_runner_opts ro = {};
		ro.name = name_.empty() ? nullptr : name_.c_str();
		// The bounds of `leaserun worker` (concurrency: the library's).
		ro.concurrency = static_cast<int>(OptNumber(o.Get("concurrency"), "concurrency", 0, 1, 1024, true));
		ro.ttl_s = static_cast<int>(OptNumber(o.Get("ttl"), "ttl", 0, 1, 86400, true));
		int grace = static_cast<int>(OptNumber(o.Get("grace"), "grace", -2, 0, 86400, true));
		ro.grace_s = grace == -2 ? 0 : grace == 0 ? -1 : grace;
		ro.exit_when_idle = o.Get("exitWhenIdle").ToBoolean() ? 1 : 0;
		ro.log_level = static_cast<lr_log_level>(
		    OptNumber(o.Get("logLevel"), "logLevel", LR_LOG_DEBUG, LR_LOG_DEBUG, LR_LOG_ERROR, true));
		if (o.Get("log").ToBoolean()) {
			ro.log = LogSink;
			ro.log_user = &core_;
		}
		lr_err err = {};
		if (lr_runner_new(core_.conn->get(), &ro, &core_.r, &err) != 0)
			throw MakeError(env, err);
		if (o.Get("events").ToBoolean()) {
			lr_runner_callbacks cb = {};
			cb.claimed = OnClaimed;
			cb.step_committed = OnCommitted;
			cb.lease_lost = OnLeaseLost;
			cb.task_done = OnTaskDone;
			lr_runner_set_callbacks(core_.r, &cb, &core_);
		}
	}

	~Runner() override
	{
		// Never while running: run() keeps this object alive until the
		// runner thread is joined.
		lr_runner_free(core_.r);
	}

private:
	// run(stepNames, withDefault, {dispatch, event, log}), once: a stopped
	// lr_runner stays stopped. The hooks are held while it runs only.
	Napi::Value Run(const Napi::CallbackInfo &info)
	{
		Napi::Env env = info.Env();
		if (core_.running)
			throw MakeError(env, LR_EINVAL, "the runner is running already");
		if (ran_)
			throw MakeError(env, LR_EINVAL, "a runner runs once: make a new Runner");
		if (!info[2].IsObject() || !info[2].As<Napi::Object>().Get("dispatch").IsFunction())
			throw Napi::TypeError::New(env, "run: expected hooks with a dispatch function");
		if (!info[0].IsArray())
			throw Napi::TypeError::New(env, "run: expected an array of step names");
		// Every name is checked before any is registered: a bad one leaves
		// the runner as it was.
		Napi::Array names = info[0].As<Napi::Array>();
		std::vector<std::string> steps;
		for (uint32_t i = 0; i < names.Length(); i++)
			steps.push_back(String(names.Get(i), "step name"));
		for (const std::string &n : steps)
			if (lr_runner_handle(core_.r, n.c_str(), Bridge, &core_) != 0)
				throw MakeError(env, LR_ENOMEM, "out of memory");
		if (info[1].ToBoolean() && lr_runner_handle(core_.r, nullptr, Bridge, &core_) != 0)
			throw MakeError(env, LR_ENOMEM, "out of memory");
		ran_ = true;
		Napi::Object hooks = info[2].As<Napi::Object>();
		core_.dispatch = Napi::Persistent(hooks.Get("dispatch").As<Napi::Function>());
		if (hooks.Get("event").IsFunction())
			core_.on_event = Napi::Persistent(hooks.Get("event").As<Napi::Function>());
		if (hooks.Get("log").IsFunction())
			core_.on_log = Napi::Persistent(hooks.Get("log").As<Napi::Function>());
		napi_threadsafe_function f = nullptr;
		napi_status st = napi_create_threadsafe_function(
		    env, nullptr, nullptr, Napi::String::New(env, "leaserun runner"), 0, 1, nullptr,
		    FinalizeRun, &core_, CallJs, &f);
		if (st != napi_ok)
			throw MakeError(env, LR_EINTERNAL, "cannot create a thread-safe function");
		core_.tsfn = f;
		core_.done = std::make_unique<Napi::Promise::Deferred>(env);
		core_.done_seen = false;
		core_.running = true;
		core_.self = Napi::Persistent(Value());
		core_.thread = std::thread(RunThread, &core_);
		return core_.done->Promise();
	}

	Napi::Value Stop(const Napi::CallbackInfo &info)
	{
		lr_runner_stop(core_.r); // async-signal-safe, harmless when not running
		return info.Env().Undefined();
	}

	Napi::Value Stats(const Napi::CallbackInfo &info)
	{
		Napi::Env env = info.Env();
		lr_runner_stats s;
		lr_runner_get_stats(core_.r, &s);
		Napi::Object o = Napi::Object::New(env);
		auto n = [&](const char *k, uint64_t v) { o.Set(k, static_cast<double>(v)); };
		n("claimsWon", s.claims_won);
		n("claimsLost", s.claims_lost);
		n("stepsCommitted", s.steps_committed);
		n("attemptsFailed", s.attempts_failed);
		n("tasksFinished", s.tasks_finished);
		n("tasksSucceeded", s.tasks_succeeded);
		n("tasksFailed", s.tasks_failed);
		n("tasksCancelled", s.tasks_cancelled);
		n("tasksLetGo", s.tasks_let_go);
		n("leaseLosses", s.lease_losses);
		auto lat = [&](const char *k, const lr_latency &l) {
			Napi::Object x = Napi::Object::New(env);
			x.Set("count", static_cast<double>(l.count));
			x.Set("meanMs", l.mean_ms);
			x.Set("p50Ms", l.p50_ms);
			x.Set("p90Ms", l.p90_ms);
			x.Set("p99Ms", l.p99_ms);
			x.Set("maxMs", l.max_ms);
			o.Set(k, x);
		};
		lat("claim", s.claim);
		lat("commit", s.commit);
		lat("completion", s.completion);
		return o;
	}

	RunnerCore core_;
	std::string name_;
	bool ran_ = false;
};

Napi::Object InitRunner(Napi::Env env, Napi::Object exports)
{
	exports.Set("NativeRunner", Runner::Define(env));
	Napi::Function step = DefineStepHandle(env);
	Data(env).stepClass = Napi::Persistent(step);
	return exports;
}

} // namespace lrnode
