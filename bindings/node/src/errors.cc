// errors.cc - the library's error codes as JavaScript errors, and promises
// settled from libuv's thread pool or a thread of their own (Job).
// JavaScript thread, except Job::Execute (a pool thread) and the thread
// StartOnThread starts.
#include <cmath>
#include <cstdio>
#include <thread>

#include "addon.h"

namespace lrnode {

const char *CodeName(int code)
{
	switch (code) {
	case LR_OK: return "LR_OK";
	case LR_EINVAL: return "LR_EINVAL";
	case LR_EEXIST: return "LR_EEXIST";
	case LR_ENOTFOUND: return "LR_ENOTFOUND";
	case LR_EUNAVAILABLE: return "LR_EUNAVAILABLE";
	case LR_ETIMEDOUT: return "LR_ETIMEDOUT";
	case LR_EAMBIGUOUS: return "LR_EAMBIGUOUS";
	case LR_EPERM: return "LR_EPERM";
	case LR_EAUTH: return "LR_EAUTH";
	case LR_ETLS: return "LR_ETLS";
	case LR_EETCD: return "LR_EETCD";
	case LR_ECONFLICT: return "LR_ECONFLICT";
	case LR_ELEASE: return "LR_ELEASE";
	case LR_ECANCELLED: return "LR_ECANCELLED";
	case LR_ETOOLARGE: return "LR_ETOOLARGE";
	case LR_EINUSE: return "LR_EINUSE";
	case LR_ESYS: return "LR_ESYS";
	case LR_ENOMEM: return "LR_ENOMEM";
	case LR_ECLOSED: return "LR_ECLOSED";
	case LR_EBUSY: return "LR_EBUSY";
	default: return "LR_EINTERNAL";
	}
}

Napi::Error MakeError(Napi::Env env, int code, const std::string &msg)
{
	std::string text = msg.empty() ? lr_strerror(code) : msg;
	AddonData &d = Data(env);
	if (d.errorClass.IsEmpty()) {
		Napi::Error e = Napi::Error::New(env, text);
		e.Set("code", Napi::String::New(env, CodeName(code)));
		return e;
	}
	Napi::Object e = d.errorClass.New({ Napi::String::New(env, text),
	                                    Napi::String::New(env, CodeName(code)) });
	return Napi::Error(env, e);
}

void SetErrorClass(const Napi::CallbackInfo &info)
{
	if (!info[0].IsFunction())
		throw Napi::TypeError::New(info.Env(), "setErrorClass: expected a class");
	Data(info.Env()).errorClass = Napi::Persistent(info[0].As<Napi::Function>());
}

std::string String(Napi::Value v, const char *what)
{
	if (!v.IsString())
		throw Napi::TypeError::New(v.Env(), std::string(what) + ": expected a string");
	std::string s = v.As<Napi::String>().Utf8Value();
	if (s.find('\0') != std::string::npos)
		throw Napi::TypeError::New(v.Env(), std::string(what) +
		                                        ": a NUL character is not allowed");
	return s;
}

std::string OptString(Napi::Value v, const char *what)
{
	if (v.IsUndefined() || v.IsNull())
		return "";
	return String(v, what);
}

double OptNumber(Napi::Value v, const char *what, double dflt, double lo, double hi, bool whole)
{
	if (v.IsUndefined() || v.IsNull())
		return dflt;
	if (!v.IsNumber())
		throw Napi::TypeError::New(v.Env(), std::string(what) + ": expected a number");
	double d = v.As<Napi::Number>().DoubleValue();
	if (!(d >= lo && d <= hi) || (whole && d != std::trunc(d))) {
		char msg[160];
		snprintf(msg, sizeof(msg), "%s: expected %s from %g to %g, got %g", what,
		         whole ? "a whole number" : "a number", lo, hi, d);
		throw Napi::RangeError::New(v.Env(), msg);
	}
	return d;
}

Job::Job(Napi::Env env, Work work, Result result)
    : Napi::AsyncWorker(env, "leaserun"), deferred_(Napi::Promise::Deferred::New(env)),
      work_(std::move(work)), result_(std::move(result)), err_{}
{
}

Napi::Promise Job::Start(Napi::Env env, Work work, Result result)
{
	Job *job = new Job(env, std::move(work), std::move(result));
	Napi::Promise p = job->deferred_.Promise();
	job->Queue(); // deleted by node-addon-api once settled
	return p;
}

void Job::Execute()
{
	rc_ = work_(&err_);
}

void Job::OnOK()
{
	Settle(Env(), deferred_, rc_, err_, result_);
}

void Job::Settle(Napi::Env env, Napi::Promise::Deferred &deferred, int rc, const lr_err &err,
                 const Result &result)
{
	if (rc != 0) {
		deferred.Reject(MakeError(env, rc, err.msg).Value());
		return;
	}
	try {
		deferred.Resolve(result(env));
	} catch (const Napi::Error &e) {
		deferred.Reject(e.Value());
	}
}

Napi::Promise Job::StartOnThread(Napi::Env env, Work work, Result result)
{
	struct Run {
		Napi::Promise::Deferred deferred;
		Work work;
		Result result;
		lr_err err{};
		int rc = 0;
	};
	auto *run = new Run{ Napi::Promise::Deferred::New(env), std::move(work), std::move(result) };
	Napi::Promise p = run->deferred.Promise();
	Napi::ThreadSafeFunction done = Napi::ThreadSafeFunction::New(
	    env, Napi::Function::New(env, [](const Napi::CallbackInfo &) {}), "leaserun", 0, 1);
	std::thread([run, done]() mutable {
		run->rc = run->work(&run->err);
		napi_status s = done.BlockingCall(run, [](Napi::Env env, Napi::Function, Run *r) {
			// No env: the environment is going away, nobody waits.
			if (env != nullptr)
				Settle(env, r->deferred, r->rc, r->err, r->result);
			delete r;
		});
		if (s != napi_ok)
			delete run;
		done.Release();
	}).detach();
	return p;
}

} // namespace lrnode
