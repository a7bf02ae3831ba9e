// step.cc - a step handled in JavaScript: the C handler (Bridge) that
// hands the step to the JavaScript thread and serves its requests on the
// step's worker thread, and the handle JavaScript holds (StepHandle).
// Threads: Bridge and StepCall::Serve run on a C worker thread of the
// runner; StepHandle and DeliverStepMsg on the JavaScript thread.
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "bridge.h"

namespace lrnode {

namespace {

int64_t MonoMs()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string Dump(const void *v)
{
	char *text = v != nullptr ? json_dumps(static_cast<const json_t *>(v),
	                                       JSON_COMPACT | JSON_ENCODE_ANY)
	                          : nullptr;
	std::string out = text != nullptr ? text : "null";
	free(text);
	return out;
}

// Parse JSON text; on failure fill e and return NULL.
json_t *Load(const std::string &text, const char *what, lr_err *e)
{
	json_error_t je;
	json_t *v = json_loadb(text.data(), text.size(), JSON_DECODE_ANY, &je);
	if (v == nullptr) {
		e->code = LR_EINVAL;
		snprintf(e->msg, sizeof(e->msg), "%s is not JSON: %s", what, je.text);
	}
	return v;
}

const char kClosing[] = "the runner's JavaScript environment is closing";
const char kDispatchFailed[] = "the step's handler could not report its result";

} // namespace

// ---- StepCall: the worker thread's side ----------------------------------

StepCall::StepCall(lr_step *s) : s_(s), efd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK))
{
	task_id = lr_step_task_id(s);
	name = lr_step_name(s);
	runner = lr_step_runner(s);
	index = lr_step_index(s);
	count = lr_step_count(s);
	attempt = lr_step_attempt(s);
	fence = lr_step_fence(s);
	state = Dump(lr_step_state(s));
	spec = Dump(lr_step_spec(s));
	env = Dump(lr_step_env(s));
}

StepCall::~StepCall()
{
	if (efd_ >= 0)
		close(efd_);
}

bool StepCall::Push(Request r)
{
	std::lock_guard<std::mutex> lock(mu_);
	if (over_)
		return false;
	if (r.kind == Request::FINISH)
		over_ = true;
	q_.push_back(std::move(r));
	// Under the mutex: Close cannot take the descriptor from under us.
	uint64_t one = 1;
	ssize_t n = write(efd_, &one, sizeof(one));
	(void)n; // the counter cannot overflow: it is drained at every wake-up
	return true;
}

void StepCall::Close()
{
	std::lock_guard<std::mutex> lock(mu_);
	over_ = true;
	if (efd_ >= 0)
		close(efd_);
	efd_ = -1;
}

void StepCall::Abandon(const char *why)
{
	Request r(Request::FINISH);
	r.result = LR_STEP_RETRY;
	r.error = why;
	Push(std::move(r));
}

void StepCall::Reply(RunnerCore *core, uint32_t id, int rc, const lr_err &e)
{
	Msg *m = new Msg(Msg::RESULT);
	m->call = shared_from_this();
	m->id = id;
	m->rc = rc;
	if (rc != 0)
		m->text = e.msg;
	core->Post(m);
}

void StepCall::Checkpoint(RunnerCore *core, const Request &r)
{
	lr_err e = {};
	int rc = LR_EINVAL;
	json_t *st = Load(r.text, "the state", &e);
	if (st != nullptr) {
		lr_step_set_state(s_, st);
		rc = lr_step_checkpoint(s_, &e);
	}
	Reply(core, r.id, rc, e);
}

void StepCall::SharedPut(RunnerCore *core, const Request &r)
{
	lr_err e = {};
	int rc = 0;
	size_t n = r.names.size();
	std::vector<const char *> names(n);
	std::vector<const void *> values(n, nullptr);
	for (size_t i = 0; i < n && rc == 0; i++) {
		names[i] = r.names[i].c_str();
		values[i] = Load(r.values[i], r.names[i].c_str(), &e);
		if (values[i] == nullptr)
			rc = LR_EINVAL;
	}
	if (rc == 0)
		rc = lr_step_shared_put_many(s_, n, names.data(), values.data(), &e);
	for (const void *v : values)
		json_decref(const_cast<json_t *>(static_cast<const json_t *>(v)));
	Reply(core, r.id, rc, e);
}

lr_step_result StepCall::Finish(const Request &r)
{
	if (r.has_text) {
		lr_err e = {};
		json_t *st = Load(r.text, "the state", &e);
		if (st == nullptr) {
			lr_step_set_error(s_, "%s", e.msg);
			return LR_STEP_RETRY;
		}
		lr_step_set_state(s_, st);
	}
	if (!r.error.empty())
		lr_step_set_error(s_, "%s", r.error.c_str());
	return r.result;
}

// Sleep until a request comes, or (watch_cancel) the step is cancelled or
// its lease deadline passes: a deadline that passes without any cancel
// (the keepalive stalled) must stop the handler too.
void StepCall::Wait(bool watch_cancel)
{
	struct pollfd p[2] = { { efd_, POLLIN, 0 }, { lr_step_cancel_fd(s_), POLLIN, 0 } };
	int timeout = -1;
	if (watch_cancel) {
		int64_t left = lr_step_deadline_ms(s_) - MonoMs();
		timeout = left < 0 ? 0 : left > 60000 ? 60000 : static_cast<int>(left) + 1;
	}
	if (poll(p, watch_cancel ? 2 : 1, timeout) < 0 && errno != EINTR)
		usleep(1000); // cannot happen with valid fds; never spin
	uint64_t drained;
	ssize_t n = read(efd_, &drained, sizeof(drained));
	(void)n;
}

lr_step_result StepCall::Serve(RunnerCore *core)
{
	bool aborted = false;
	for (;;) {
		std::deque<Request> batch;
		{
			std::lock_guard<std::mutex> lock(mu_);
			batch.swap(q_);
		}
		for (const Request &r : batch) {
			switch (r.kind) {
			case Request::FINISH:
				return Finish(r); // always the last request
			case Request::CHECKPOINT:
				Checkpoint(core, r);
				break;
			case Request::SHARED_PUT:
				SharedPut(core, r);
				break;
			case Request::LOG:
				lr_step_log(s_, static_cast<lr_log_level>(r.level), "%s", r.text.c_str());
				break;
			}
		}
		if (!aborted && lr_step_cancelled(s_)) {
			aborted = true;
			Msg *m = new Msg(Msg::ABORT);
			m->call = shared_from_this();
			m->text = StopText();
			core->Post(m);
		}
		Wait(!aborted);
	}
}

std::string StepCall::Where() const
{
	return "task " + task_id + ", step " + name;
}

// Why the step was stopped, once lr_step_cancelled said it was.
std::string StepCall::StopText()
{
	const char *why;
	switch (lr_step_stop_reason(s_)) {
	case LR_STEP_LEASE_LOST:
		why = lr_step_deadline_ms(s_) <= MonoMs()
		          ? "the lease deadline passed without a renewal: the step must stop"
		          : "the runner's lease is lost: the step must stop";
		break;
	case LR_STEP_CANCELLED:
		why = "the step was stopped: the task was cancelled";
		break;
	default:
		why = "the step was stopped: the runner is stopping";
		break;
	}
	return Where() + ": " + why;
}

std::string StepCall::StopReason()
{
	// Under the mutex: until the result is pushed (over_), the worker
	// thread is in Serve and s_ lives; Close takes the mutex too.
	std::lock_guard<std::mutex> lock(mu_);
	if (over_)
		return Where() + ": the step is over";
	return lr_step_cancelled(s_) ? StopText() : std::string();
}

lr_step_result Bridge(lr_step *s, void *user)
{
	RunnerCore *core = static_cast<RunnerCore *>(user);
	StepCallPtr call = std::make_shared<StepCall>(s);
	if (!call->ok()) {
		lr_step_set_error(s, "eventfd: %s", strerror(errno));
		return LR_STEP_RETRY;
	}
	if (!core->Enter(call)) {
		lr_step_set_error(s, "%s", kClosing);
		return LR_STEP_RETRY;
	}
	Msg *m = new Msg(Msg::DISPATCH);
	m->call = call;
	if (!core->Post(m))
		call->Abandon(kClosing);
	lr_step_result res = call->Serve(core);
	// The handle lives until JavaScript collects it: the descriptor goes now.
	call->Close();
	core->Leave(call);
	Msg *closed = new Msg(Msg::CLOSED);
	closed->call = call;
	core->Post(closed);
	return res;
}

// ---- StepHandle: the JavaScript side ----------------------------------------

class StepHandle : public Napi::ObjectWrap<StepHandle> {
public:
	static Napi::Function Define(Napi::Env env)
	{
		return DefineClass(env, "StepHandle",
		                   { InstanceMethod<&StepHandle::Checkpoint>("checkpoint"),
		                     InstanceMethod<&StepHandle::Stopped>("stopped"),
		                     InstanceMethod<&StepHandle::SharedPut>("sharedPut"),
		                     InstanceMethod<&StepHandle::Log>("log"),
		                     InstanceMethod<&StepHandle::Finish>("finish") });
	}

	explicit StepHandle(const Napi::CallbackInfo &info)
	    : Napi::ObjectWrap<StepHandle>(info),
	      call_(FromExternal<StepCallPtr>(info, "step handles come from the runner"))
	{
	}

	// The answer to request id.
	void Settle(Napi::Env env, uint32_t id, int rc, const std::string &msg)
	{
		auto it = pending_.find(id);
		if (it == pending_.end())
			return;
		Napi::Promise::Deferred d = it->second;
		pending_.erase(it);
		if (rc == 0)
			d.Resolve(env.Undefined());
		else
			d.Reject(MakeError(env, rc, msg).Value());
	}

	// The worker thread let go: whatever is unanswered never will be.
	void Closed(Napi::Env env)
	{
		auto pending = std::move(pending_);
		pending_.clear();
		for (auto &p : pending)
			p.second.Reject(MakeError(env, LR_ECANCELLED, call_->Where() + ": the step is over").Value());
	}

private:
	Napi::Value Ask(Napi::Env env, Request r)
	{
		Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
		r.id = next_id_++;
		uint32_t id = r.id;
		if (!call_->Push(std::move(r))) {
			d.Reject(MakeError(env, LR_ECANCELLED, call_->Where() + ": the step is over").Value());
			return d.Promise();
		}
		pending_.emplace(id, d);
		return d.Promise();
	}

	Napi::Value Checkpoint(const Napi::CallbackInfo &info)
	{
		Request r(Request::CHECKPOINT);
		r.text = OptString(info[0], "state");
		return Ask(info.Env(), std::move(r));
	}

	// stopped(): why the handler must stop now, or undefined.
	Napi::Value Stopped(const Napi::CallbackInfo &info)
	{
		std::string why = call_->StopReason();
		if (why.empty())
			return info.Env().Undefined();
		return Napi::String::New(info.Env(), why);
	}

	Napi::Value SharedPut(const Napi::CallbackInfo &info)
	{
		Napi::Env env = info.Env();
		if (!info[0].IsArray() || !info[1].IsArray())
			throw Napi::TypeError::New(env, "sharedPut: expected names and values");
		Napi::Array names = info[0].As<Napi::Array>(), values = info[1].As<Napi::Array>();
		Request r(Request::SHARED_PUT);
		for (uint32_t i = 0; i < names.Length(); i++) {
			r.names.push_back(OptString(names.Get(i), "name"));
			r.values.push_back(OptString(values.Get(i), "value"));
		}
		return Ask(env, std::move(r));
	}

	Napi::Value Log(const Napi::CallbackInfo &info)
	{
		Request r(Request::LOG);
		r.level = info[0].As<Napi::Number>().Int32Value();
		r.text = OptString(info[1], "message");
		return Napi::Boolean::New(info.Env(), call_->Push(std::move(r)));
	}

	// finish(result, stateText | null, error | null): the handler is done.
	Napi::Value Finish(const Napi::CallbackInfo &info)
	{
		Request r(Request::FINISH);
		int res = info[0].As<Napi::Number>().Int32Value();
		r.result = res == LR_STEP_OK ? LR_STEP_OK : res == LR_STEP_FAIL ? LR_STEP_FAIL
		                                                                : LR_STEP_RETRY;
		r.has_text = info[1].IsString();
		if (r.has_text)
			r.text = String(info[1], "state");
		r.error = OptString(info[2], "error");
		return Napi::Boolean::New(info.Env(), call_->Push(std::move(r)));
	}

	StepCallPtr call_;
	std::unordered_map<uint32_t, Napi::Promise::Deferred> pending_;
	uint32_t next_id_ = 1;
};

Napi::Function DefineStepHandle(Napi::Env env)
{
	return StepHandle::Define(env);
}

namespace {

Napi::Object StepInfo(Napi::Env env, const StepCall &c)
{
	Napi::Object o = Napi::Object::New(env);
	o.Set("taskId", c.task_id);
	o.Set("stepName", c.name);
	o.Set("runner", c.runner);
	o.Set("index", static_cast<double>(c.index));
	o.Set("count", static_cast<double>(c.count));
	o.Set("attempt", static_cast<double>(c.attempt));
	o.Set("fence", static_cast<double>(c.fence));
	o.Set("state", c.state);
	o.Set("spec", c.spec);
	o.Set("env", c.env);
	return o;
}

void Dispatch(Napi::Env env, RunnerCore *core, const StepCallPtr &call)
{
	Napi::Object h = Data(env).stepClass.New({ Napi::External<StepCallPtr>::New(
	    env, new StepCallPtr(call), [](Napi::Env, StepCallPtr *p) { delete p; }) });
	core->handles[call.get()] = { Napi::Persistent(h), StepHandle::Unwrap(h) };
	// The handler's promise settles after finish(); should it reject
	// instead, nothing will finish the step: give the attempt up (retried)
	// rather than leave the worker waiting (Abandon is a no-op once
	// finished).
	try {
		Napi::Value p = core->dispatch.Call({ h, StepInfo(env, *call) });
		if (p.IsPromise()) {
			Napi::Function then = p.As<Napi::Object>().Get("then").As<Napi::Function>();
			then.Call(p, { env.Undefined(),
			               Napi::Function::New(env, [call](const Napi::CallbackInfo &) {
				               call->Abandon(kDispatchFailed);
			               }) });
		}
	} catch (const Napi::Error &) {
		call->Abandon(kDispatchFailed);
	}
}

void Abort(Napi::Env env, RunnerCore *core, const StepCall *call, const std::string &why)
{
	auto it = core->handles.find(call);
	if (it == core->handles.end())
		return;
	try {
		Napi::Value fn = it->second.first.Value().Get("onabort");
		if (fn.IsFunction())
			fn.As<Napi::Function>().Call(it->second.first.Value(),
			                             { Napi::String::New(env, why) });
	} catch (const Napi::Error &) {
		// an abort listener that throws must not stop the step's end
	}
}

} // namespace

void DeliverStepMsg(napi_env raw, RunnerCore *core, Msg *msg)
{
	if (raw == nullptr) {
		if (msg->kind == Msg::DISPATCH)
			msg->call->Abandon(kClosing);
		return;
	}
	Napi::Env env(raw);
	Napi::HandleScope scope(env);
	switch (msg->kind) {
	case Msg::DISPATCH:
		Dispatch(env, core, msg->call);
		break;
	case Msg::RESULT: {
		auto it = core->handles.find(msg->call.get());
		if (it != core->handles.end())
			it->second.second->Settle(env, msg->id, msg->rc, msg->text);
		break;
	}
	case Msg::ABORT:
		Abort(env, core, msg->call.get(), msg->text);
		break;
	case Msg::CLOSED: {
		auto it = core->handles.find(msg->call.get());
		if (it != core->handles.end()) {
			it->second.second->Closed(env);
			core->handles.erase(it);
		}
		break;
	}
	default:
		break;
	}
}

} // namespace lrnode
