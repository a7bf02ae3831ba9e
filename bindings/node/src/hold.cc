// hold.cc - locks and slots held from JavaScript (client.withLocks): the
// hold is taken (a wait JavaScript may cancel) and given back on threads
// of their own, never libuv's few pool threads; another thread per hold
// waits for the loss of its lease and tells JavaScript through a
// thread-safe function.
// JavaScript thread, except the lambdas run by Job and the watcher thread,
// which touch only C data and the thread-safe function.
#include <jansson.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <thread>

#include "addon.h"

namespace lrnode {

namespace {

const double kMaxWaitS = 31536000; // a year, as `leaserun run --wait`

struct HoldState {
	ConnPtr conn;
	lr_hold *hold = nullptr;
	int stop_fd = -1;
	std::thread watcher;
	Napi::ThreadSafeFunction on_lost;
	bool watching = false;

	// Stop the watcher thread (JavaScript thread).
	void StopWatching()
	{
		if (!watching)
			return;
		uint64_t one = 1;
		ssize_t n = write(stop_fd, &one, sizeof(one));
		(void)n;
		watcher.join();
		on_lost.Release();
		watching = false;
	}
	~HoldState()
	{
		if (stop_fd >= 0)
			close(stop_fd);
	}
};
using HoldPtr = std::shared_ptr<HoldState>;

// The eventfd that cancels a wait for locks: readable once cancelled.
struct CancelFd {
	int fd = eventfd(0, EFD_CLOEXEC);
	CancelFd() = default;
	CancelFd(const CancelFd &) = delete;
	CancelFd &operator=(const CancelFd &) = delete;
	~CancelFd()
	{
		if (fd >= 0)
			close(fd);
	}
};

// The locks or limits given as JSON text ("" for none), parsed on the
// JavaScript thread: text jansson refuses is an error naming `what`, never
// "none" (that would hold the locks without the slots, or the reverse).
using JsonPtr = std::shared_ptr<json_t>;
JsonPtr ParseOrNull(Napi::Env env, const std::string &text, const char *what)
{
	if (text.empty())
		return nullptr;
	json_error_t je;
	json_t *v = json_loadb(text.data(), text.size(), 0, &je);
	if (v == nullptr)
		throw MakeError(env, LR_EINVAL, std::string("withLocks: ") + what + ": " + je.text);
	return JsonPtr(v, json_decref);
}

// holdAcquire(client, locksJson, limitsJson, ttlSeconds, waitSeconds) ->
// {promise: Promise<{handle, fence, id, slots}>, cancel()}: cancel() ends
// a wait (the promise then rejects with LR_ECANCELLED, nothing queued in
// etcd); once they are taken it changes nothing.
Napi::Value HoldAcquire(const Napi::CallbackInfo &info)
{
	Napi::Env env = info.Env();
	ConnPtr conn = ClientConn(info[0]);
	JsonPtr locks = ParseOrNull(env, OptString(info[1], "locks"), "locks");
	JsonPtr limits = ParseOrNull(env, OptString(info[2], "limits"), "limits");
	// The bounds of `leaserun run --ttl/--wait`; no wait, or an infinite
	// one, is forever.
	int64_t ttl = static_cast<int64_t>(OptNumber(info[3], "ttl", 0, 1, 86400, true));
	bool forever = info[4].IsNumber() && info[4].As<Napi::Number>().DoubleValue() == INFINITY;
	double wait_s = forever ? -1 : OptNumber(info[4], "wait", -1, 0, kMaxWaitS, false);
	int64_t wait = wait_s < 0 ? -1 : std::llround(wait_s * 1000);
	auto st = std::make_shared<HoldState>();
	st->conn = conn;
	auto cancel = std::make_shared<CancelFd>();
	if (cancel->fd < 0)
		throw MakeError(env, LR_ESYS, "eventfd failed");
	Napi::Object out = Napi::Object::New(env);
	out.Set("cancel", Napi::Function::New(env, [cancel](const Napi::CallbackInfo &ci) {
		        uint64_t one = 1;
		        ssize_t n = write(cancel->fd, &one, sizeof(one));
		        (void)n;
		        return ci.Env().Undefined();
	        }, "cancel"));
	out.Set("promise", Job::StartOnThread(
	    env,
	    [st, locks, limits, ttl, wait, cancel](lr_err *err) {
		    lr_hold_opts o = {};
		    o.locks = locks.get();
		    o.limits = limits.get();
		    o.ttl_s = ttl;
		    o.wait_ms = wait;
		    o.cancel_fd = cancel->fd;
		    return lr_hold_acquire(st->conn->get(), &o, &st->hold, err);
	    },
	    [st](Napi::Env env) {
		    Napi::Object o = Napi::Object::New(env);
		    auto *ext = new HoldPtr(st);
		    o.Set("handle", Napi::External<HoldPtr>::New(
		                        env, ext, [](Napi::Env, HoldPtr *p) {
			                        HoldPtr s = *p;
			                        delete p;
			                        // Dropped without release: give it back
			                        // off the JavaScript thread.
			                        if (s->hold != nullptr) {
				                        s->StopWatching();
				                        std::thread([s]() {
					                        lr_hold_release(s->hold, nullptr);
					                        s->hold = nullptr;
				                        }).detach();
			                        }
		                        }));
		    o.Set("fence", static_cast<double>(lr_hold_fence(st->hold)));
		    o.Set("id", lr_hold_id(st->hold));
		    char *slots = json_dumps(static_cast<const json_t *>(lr_hold_slots(st->hold)),
		                             JSON_COMPACT);
		    o.Set("slots", slots != nullptr ? slots : "{}");
		    free(slots);
		    return o;
	    }));
	return out;
}

HoldPtr HoldOf(const Napi::CallbackInfo &info)
{
	if (!info[0].IsExternal())
		throw Napi::TypeError::New(info.Env(), "use client.withLocks()");
	HoldPtr st = *info[0].As<Napi::External<HoldPtr>>().Data();
	if (st->hold == nullptr)
		throw MakeError(info.Env(), LR_ECLOSED, "the hold was released");
	return st;
}

// holdWatch(handle, onLost): onLost() once, if the lease is lost.
Napi::Value HoldWatch(const Napi::CallbackInfo &info)
{
	HoldPtr st = HoldOf(info);
	if (st->watching || !info[1].IsFunction())
		throw Napi::TypeError::New(info.Env(), "holdWatch: one callback, once");
	st->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (st->stop_fd < 0)
		throw MakeError(info.Env(), LR_ESYS, "eventfd failed");
	st->on_lost = Napi::ThreadSafeFunction::New(info.Env(), info[1].As<Napi::Function>(),
	                                            "leaserun-hold", 0, 1);
	// Waiting for it must not keep the process alive on its own.
	st->on_lost.Unref(info.Env());
	int lost_fd = lr_hold_lost_fd(st->hold), stop_fd = st->stop_fd;
	Napi::ThreadSafeFunction tsfn = st->on_lost;
	st->watcher = std::thread([lost_fd, stop_fd, tsfn]() mutable {
		struct pollfd p[2] = { { lost_fd, POLLIN, 0 }, { stop_fd, POLLIN, 0 } };
		while (poll(p, 2, -1) < 0)
			;
		if (p[0].revents != 0 && p[1].revents == 0)
			tsfn.NonBlockingCall();
	});
	st->watching = true;
	return info.Env().Undefined();
}

// holdRelease(handle) -> Promise: give everything back.
Napi::Value HoldRelease(const Napi::CallbackInfo &info)
{
	HoldPtr st = HoldOf(info);
	st->StopWatching();
	lr_hold *h = st->hold;
	st->hold = nullptr;
	// Revoking the lease waits for etcd (up to the call timeout): not on a
	// pool thread, which may be all that is left to a file read.
	return Job::StartOnThread(
	    info.Env(), [st, h](lr_err *err) { return lr_hold_release(h, err); },
	    [](Napi::Env env) { return env.Undefined(); });
}

} // namespace

Napi::Object InitHold(Napi::Env env, Napi::Object exports)
{
	exports.Set("holdAcquire", Napi::Function::New(env, HoldAcquire, "holdAcquire"));
	exports.Set("holdWatch", Napi::Function::New(env, HoldWatch, "holdWatch"));
	exports.Set("holdRelease", Napi::Function::New(env, HoldRelease, "holdRelease"));
	return exports;
}

} // namespace lrnode
