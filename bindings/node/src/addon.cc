// addon.cc - the module leaserun.node: per-environment data and the
// functions and classes it exports (lib/native.js is its only user).
// JavaScript thread.
#include "addon.h"

namespace lrnode {

AddonData &Data(Napi::Env env)
{
	return *env.GetInstanceData<AddonData>();
}

static Napi::Value StrError(const Napi::CallbackInfo &info)
{
	int code = info[0].As<Napi::Number>().Int32Value();
	return Napi::String::New(info.Env(), lr_strerror(code));
}

Napi::Object Init(Napi::Env env, Napi::Object exports)
{
	env.SetInstanceData(new AddonData());
	exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass, "setErrorClass"));
	exports.Set("strerror", Napi::Function::New(env, StrError, "strerror"));
	InitClient(env, exports);
	InitRunner(env, exports);
	InitHold(env, exports);
	return exports;
}

} // namespace lrnode

static Napi::Object InitModule(Napi::Env env, Napi::Object exports)
{
	return lrnode::Init(env, exports);
}

NODE_API_MODULE(leaserun, InitModule)
