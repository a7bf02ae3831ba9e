// addon.h - what the parts of the Node.js addon share: the connection
// handle, errors as JavaScript values, promises settled from a thread pool.
// Everything here runs on the JavaScript thread unless said otherwise.
#ifndef LEASERUN_NODE_ADDON_H
#define LEASERUN_NODE_ADDON_H

#include <napi.h>

#include <functional>
#include <memory>
#include <string>

#include "leaserun.h"

namespace lrnode {

// One lr_client, closed when the last user lets go of it: the Client
// object, a call in flight, a runner. Any thread may drop the last
// reference.
class Conn {
public:
	explicit Conn(lr_client *c) : c_(c) {}
	~Conn() { lr_client_close(c_); }
	Conn(const Conn &) = delete;
	Conn &operator=(const Conn &) = delete;
	lr_client *get() const { return c_; }

private:
	lr_client *c_;
};
using ConnPtr = std::shared_ptr<Conn>;

// What one instance of the addon keeps (one per JavaScript environment:
// worker_threads may load it too).
struct AddonData {
	Napi::FunctionReference errorClass; // LeaseRunError, from JavaScript
	Napi::FunctionReference clientClass;
	Napi::FunctionReference stepClass;
};
AddonData &Data(Napi::Env env);

// A JavaScript LeaseRunError (the class lib/errors.js registers at load)
// with code "LR_EINVAL" etc. and the library's message.
Napi::Error MakeError(Napi::Env env, int code, const std::string &msg);
inline Napi::Error MakeError(Napi::Env env, const lr_err &e)
{
	return MakeError(env, e.code, e.msg);
}
// "LR_EINVAL" for LR_EINVAL, ...
const char *CodeName(int code);
// Keep the error class given by JavaScript (module function setErrorClass).
void SetErrorClass(const Napi::CallbackInfo &info);

// Run work on libuv's thread pool and settle a promise with result() (on
// the JavaScript thread) when it returns 0, or reject it with the lr_err
// it filled. work must not touch JavaScript values.
class Job : public Napi::AsyncWorker {
public:
	using Work = std::function<int(lr_err *)>;
	using Result = std::function<Napi::Value(Napi::Env)>;
	static Napi::Promise Start(Napi::Env env, Work work, Result result);
	// The same on a thread of its own, for work that may wait without
	// bound (a wait for locks): the pool has a few threads only (4 by
	// default), and work queued behind waiting jobs, file system calls
	// included, would wait with them. The promise keeps the process alive
	// as a pool job does.
	static Napi::Promise StartOnThread(Napi::Env env, Work work, Result result);

private:
	Job(Napi::Env env, Work work, Result result);
	void Execute() override;
	void OnOK() override;
	static void Settle(Napi::Env env, Napi::Promise::Deferred &deferred, int rc,
	                   const lr_err &err, const Result &result);
	Napi::Promise::Deferred deferred_;
	Work work_;
	Result result_;
	lr_err err_;
	int rc_ = 0;
};

// A string argument or property; throws a TypeError naming `what` for
// anything else, and for a string holding a NUL character (C would read
// only what comes before it: "p1\0x" would name p1).
std::string String(Napi::Value v, const char *what);
// The same, or "" for undefined/null.
std::string OptString(Napi::Value v, const char *what);

// A number option: dflt for undefined/null; else a number from lo to hi
// (whole when `whole`). A TypeError naming `what` for anything but a
// number, a RangeError naming it and the range for NaN, infinities, a
// number out of range or a fraction where a whole number is meant: C
// must never see a value it cannot convert.
double OptNumber(Napi::Value v, const char *what, double dflt, double lo, double hi, bool whole);

// What the External argument info[0] carries: native objects are made by
// the addon only, with their state in an External (misuse: the message
// of the TypeError otherwise).
template <typename T> T FromExternal(const Napi::CallbackInfo &info, const char *misuse)
{
	if (!info[0].IsExternal())
		throw Napi::TypeError::New(info.Env(), misuse);
	return *info[0].As<Napi::External<T>>().Data();
}

// Module parts.
Napi::Object InitClient(Napi::Env env, Napi::Object exports);
Napi::Object InitRunner(Napi::Env env, Napi::Object exports);
Napi::Object InitHold(Napi::Env env, Napi::Object exports);
// The connection of a native Client object (throws when it is closed).
ConnPtr ClientConn(Napi::Value client);

} // namespace lrnode

#endif
