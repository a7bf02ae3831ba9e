// client.cc - the native Client: open a connection, and the task and
// shared-value operations, each a promise settled by a call to libleaserun
// on libuv's thread pool.
// JavaScript thread; the lambdas given to Job::Start as work run on a pool
// thread and touch only C data.
#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "addon.h"

namespace lrnode {

namespace {

// Options of lr_client_open kept as strings for the pool thread.
struct OpenOpts {
	std::string endpoints, prefix, cacert, cert, key, tls_server_name, user, password;
	double dial_timeout_s = 0, call_timeout_s = 0;
};

const char *OrNull(const std::string &s)
{
	return s.empty() ? nullptr : s.c_str();
}

// The command's bounds for --dial-timeout (seconds), and the call timeout.
const double kMinTimeoutS = 0.001, kMaxTimeoutS = 3600;

// The most tasks list() returns at once (as `leaserun status --limit`).
const double kListMax = 1e9;

// A JSON value as compact text (malloc'd by jansson); "" for NULL.
std::string JsonText(const void *v)
{
	if (v == nullptr)
		return "";
	char *text = json_dumps(static_cast<const json_t *>(v),
	                        JSON_COMPACT | JSON_ENCODE_ANY);
	std::string out = text != nullptr ? text : "null";
	free(text);
	return out;
}

Napi::Value StrOrNull(Napi::Env env, const char *s)
{
	return s != nullptr ? Napi::Value(Napi::String::New(env, s)) : env.Null();
}

Napi::Object StatusObject(Napi::Env env, const lr_task_status &s)
{
	Napi::Object o = Napi::Object::New(env);
	o.Set("id", s.id);
	o.Set("state", lr_task_state_name(s.state));
	o.Set("nextStep", static_cast<double>(s.next_step));
	o.Set("steps", static_cast<double>(s.steps));
	o.Set("stepName", StrOrNull(env, s.step_name));
	o.Set("attempt", static_cast<double>(s.attempt));
	o.Set("maxAttempts", static_cast<double>(s.max_attempts));
	o.Set("runner", StrOrNull(env, s.runner));
	o.Set("error", StrOrNull(env, s.error));
	o.Set("updatedAt", StrOrNull(env, s.updated_at));
	o.Set("cancelRequestedAt", StrOrNull(env, s.cancel_requested_at));
	o.Set("createRevision", static_cast<double>(s.create_revision));
	return o;
}

// Statuses owned by a shared_ptr, for a pool thread to fill.
struct StatusList {
	lr_task_status *items = nullptr;
	size_t n = 0;
	~StatusList() { lr_task_list_free(items, n); }
};

struct SharedList {
	lr_shared_entry *items = nullptr;
	size_t n = 0;
	std::vector<std::string> texts; // values as JSON text
	~SharedList() { lr_shared_list_free(items, n); }
};

class Client : public Napi::ObjectWrap<Client> {
public:
	static Napi::Function Define(Napi::Env env)
	{
		return DefineClass(env, "NativeClient",
		                   { InstanceMethod<&Client::Submit>("submit"),
		                     InstanceMethod<&Client::Status>("status"),
		                     InstanceMethod<&Client::List>("list"),
		                     InstanceMethod<&Client::Cancel>("cancel"),
		                     InstanceMethod<&Client::Runners>("runners"),
		                     InstanceMethod<&Client::SharedGet>("sharedGet"),
		                     InstanceMethod<&Client::SharedList>("sharedList"),
		                     InstanceMethod<&Client::SharedDelete>("sharedDelete"),
		                     InstanceMethod<&Client::Prefix>("prefix"),
		                     InstanceMethod<&Client::Close>("close") });
	}

	explicit Client(const Napi::CallbackInfo &info)
	    : Napi::ObjectWrap<Client>(info), conn_(FromExternal<ConnPtr>(info, "use openClient()"))
	{
	}

	ConnPtr Conn(Napi::Env env) const
	{
		if (!conn_)
			throw MakeError(env, LR_ECLOSED, "the client is closed");
		return conn_;
	}

private:
	Napi::Value Submit(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		auto text = std::make_shared<std::string>(OptString(info[0], "spec"));
		// Only a missing id means "generate one": an empty one is refused
		// (as `leaserun submit --id ''`), never a new task on every retry.
		bool has_id = !info[1].IsUndefined() && !info[1].IsNull();
		std::string id_override = OptString(info[1], "id");
		struct Out {
			char id[LR_ID_SIZE];
			int created;
		};
		auto out = std::make_shared<Out>();
		return Job::Start(
		    info.Env(),
		    [conn, text, has_id, id_override, out](lr_err *err) {
			    return lr_submit_text(conn->get(), text->data(), text->size(),
			                          has_id ? id_override.c_str() : nullptr, out->id,
			                          &out->created, err);
		    },
		    [out](Napi::Env env) {
			    Napi::Object o = Napi::Object::New(env);
			    o.Set("id", out->id);
			    o.Set("created", out->created != 0);
			    return o;
		    });
	}

	Napi::Value Status(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		std::string id = OptString(info[0], "id");
		auto st = std::make_shared<StatusList>();
		return Job::Start(
		    info.Env(),
		    [conn, id, st](lr_err *err) -> int {
			    st->items = static_cast<lr_task_status *>(calloc(1, sizeof(*st->items)));
			    if (st->items == nullptr)
				    return LR_ENOMEM;
			    st->n = 1;
			    return lr_task_get(conn->get(), id.c_str(), st->items, err);
		    },
		    [st](Napi::Env env) { return StatusObject(env, st->items[0]); });
	}

	Napi::Value List(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		int state = info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : -1;
		// 0: no limit; at most the command's --limit maximum.
		size_t limit = static_cast<size_t>(OptNumber(info[1], "limit", 0, 0, kListMax, true));
		auto st = std::make_shared<StatusList>();
		return Job::Start(
		    info.Env(),
		    [conn, state, limit, st](lr_err *err) {
			    return lr_task_list(conn->get(), state, limit, &st->items, &st->n, err);
		    },
		    [st](Napi::Env env) {
			    Napi::Array a = Napi::Array::New(env, st->n);
			    for (size_t i = 0; i < st->n; i++)
				    a.Set(static_cast<uint32_t>(i), StatusObject(env, st->items[i]));
			    return a;
		    });
	}

	Napi::Value Cancel(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		std::string id = OptString(info[0], "id");
		auto already = std::make_shared<int>(-1);
		return Job::Start(
		    info.Env(),
		    [conn, id, already](lr_err *err) {
			    return lr_cancel(conn->get(), id.c_str(), already.get(), err);
		    },
		    [already](Napi::Env env) {
			    Napi::Object o = Napi::Object::New(env);
			    o.Set("already", *already >= 0
			                         ? StrOrNull(env, lr_task_state_name(
			                                              static_cast<lr_task_state>(*already)))
			                         : env.Null());
			    return o;
		    });
	}

	Napi::Value Runners(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		struct Out {
			lr_runner_info *items = nullptr;
			size_t n = 0;
			~Out() { free(items); }
		};
		auto out = std::make_shared<Out>();
		return Job::Start(
		    info.Env(),
		    [conn, out](lr_err *err) {
			    return lr_runners_list(conn->get(), &out->items, &out->n, err);
		    },
		    [out](Napi::Env env) {
			    Napi::Array a = Napi::Array::New(env, out->n);
			    for (size_t i = 0; i < out->n; i++) {
				    const lr_runner_info &r = out->items[i];
				    Napi::Object o = Napi::Object::New(env);
				    char lease[24];
				    snprintf(lease, sizeof(lease), "%llx",
				             static_cast<unsigned long long>(r.lease));
				    o.Set("name", r.name);
				    o.Set("host", r.host);
				    o.Set("pid", static_cast<double>(r.pid));
				    o.Set("concurrency", static_cast<double>(r.concurrency));
				    o.Set("ttl", static_cast<double>(r.ttl));
				    o.Set("ttlLeft", static_cast<double>(r.ttl_left));
				    o.Set("lease", lease); // hexadecimal, as etcdctl shows it
				    o.Set("startedAt", r.started_at);
				    o.Set("version", r.version);
				    a.Set(static_cast<uint32_t>(i), o);
			    }
			    return a;
		    });
	}

	Napi::Value SharedGet(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		std::string name = OptString(info[0], "name");
		auto text = std::make_shared<std::string>();
		return Job::Start(
		    info.Env(),
		    [conn, name, text](lr_err *err) {
			    void *v = nullptr;
			    int rc = lr_shared_get(conn->get(), name.c_str(), &v, err);
			    *text = JsonText(v);
			    json_decref(static_cast<json_t *>(v));
			    return rc;
		    },
		    [text](Napi::Env env) {
			    return text->empty() ? env.Null() : Napi::Value(Napi::String::New(env, *text));
		    });
	}

	Napi::Value SharedList(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		std::string prefix = OptString(info[0], "prefix");
		int flags = info[1].ToBoolean() ? LR_SHARED_KEYS_ONLY : 0;
		auto out = std::make_shared<struct SharedList>();
		return Job::Start(
		    info.Env(),
		    [conn, prefix, flags, out](lr_err *err) {
			    int rc = lr_shared_list(conn->get(), prefix.c_str(), flags, &out->items,
			                            &out->n, err);
			    for (size_t i = 0; rc == 0 && i < out->n; i++)
				    out->texts.push_back(JsonText(out->items[i].value));
			    return rc;
		    },
		    [out](Napi::Env env) {
			    Napi::Array a = Napi::Array::New(env, out->n);
			    for (size_t i = 0; i < out->n; i++) {
				    Napi::Array e = Napi::Array::New(env, 3);
				    e.Set(0u, out->items[i].name);
				    e.Set(1u, out->texts[i].empty()
				                  ? env.Null()
				                  : Napi::Value(Napi::String::New(env, out->texts[i])));
				    e.Set(2u, static_cast<double>(out->items[i].mod_revision));
				    a.Set(static_cast<uint32_t>(i), e);
			    }
			    return a;
		    });
	}

	Napi::Value SharedDelete(const Napi::CallbackInfo &info)
	{
		ConnPtr conn = Conn(info.Env());
		// A name is required: a missing one read as "" would, with the
		// prefix flag, delete every shared value.
		std::string name = String(info[0], "name");
		int flags = info[1].ToBoolean() ? LR_SHARED_PREFIX : 0;
		auto deleted = std::make_shared<int64_t>(0);
		return Job::Start(
		    info.Env(),
		    [conn, name, flags, deleted](lr_err *err) {
			    return lr_shared_delete(conn->get(), name.c_str(), flags, deleted.get(), err);
		    },
		    [deleted](Napi::Env env) { return Napi::Number::New(env, static_cast<double>(*deleted)); });
	}

	Napi::Value Prefix(const Napi::CallbackInfo &info)
	{
		return Napi::String::New(info.Env(), lr_client_prefix(Conn(info.Env())->get()));
	}

	// The connection closes once no call in flight and no runner uses it.
	Napi::Value Close(const Napi::CallbackInfo &info)
	{
		conn_.reset();
		return info.Env().Undefined();
	}

	ConnPtr conn_;
};

Napi::Value OpenClient(const Napi::CallbackInfo &info)
{
	Napi::Env env = info.Env();
	Napi::Object o = info[0].IsObject() ? info[0].As<Napi::Object>() : Napi::Object::New(env);
	auto opts = std::make_shared<OpenOpts>();
	opts->endpoints = OptString(o.Get("endpoints"), "endpoints");
	opts->prefix = OptString(o.Get("prefix"), "prefix");
	opts->cacert = OptString(o.Get("cacert"), "cacert");
	opts->cert = OptString(o.Get("cert"), "cert");
	opts->key = OptString(o.Get("key"), "key");
	opts->tls_server_name = OptString(o.Get("tlsServerName"), "tlsServerName");
	opts->user = OptString(o.Get("user"), "user");
	opts->password = OptString(o.Get("password"), "password");
	opts->dial_timeout_s =
	    OptNumber(o.Get("dialTimeout"), "dialTimeout", 0, kMinTimeoutS, kMaxTimeoutS, false);
	opts->call_timeout_s =
	    OptNumber(o.Get("callTimeout"), "callTimeout", 0, kMinTimeoutS, kMaxTimeoutS, false);
	auto conn = std::make_shared<ConnPtr>();
	return Job::Start(
	    env,
	    [opts, conn](lr_err *err) {
		    lr_client_opts co = {};
		    co.endpoints = OrNull(opts->endpoints);
		    co.prefix = OrNull(opts->prefix);
		    co.dial_timeout_s = opts->dial_timeout_s;
		    co.call_timeout_s = opts->call_timeout_s;
		    co.cacert = OrNull(opts->cacert);
		    co.cert = OrNull(opts->cert);
		    co.key = OrNull(opts->key);
		    co.tls_server_name = OrNull(opts->tls_server_name);
		    co.user = OrNull(opts->user);
		    co.password = OrNull(opts->password);
		    lr_client *c = nullptr;
		    int rc = lr_client_open(&co, &c, err);
		    if (rc == 0)
			    *conn = std::make_shared<Conn>(c);
		    return rc;
	    },
	    [conn](Napi::Env env) {
		    auto *held = new ConnPtr(*conn);
		    Napi::External<ConnPtr> ext = Napi::External<ConnPtr>::New(
		        env, held, [](Napi::Env, ConnPtr *p) { delete p; });
		    return Data(env).clientClass.New({ ext });
	    });
}

} // namespace

ConnPtr ClientConn(Napi::Value client)
{
	Napi::Env env = client.Env();
	if (!client.IsObject() ||
	    !client.As<Napi::Object>().InstanceOf(Data(env).clientClass.Value()))
		throw Napi::TypeError::New(env, "expected a native client");
	return Client::Unwrap(client.As<Napi::Object>())->Conn(env);
}

Napi::Object InitClient(Napi::Env env, Napi::Object exports)
{
	Napi::Function cls = Client::Define(env);
	Data(env).clientClass = Napi::Persistent(cls);
	exports.Set("NativeClient", cls);
	exports.Set("openClient", Napi::Function::New(env, OpenClient, "openClient"));
	return exports;
}

} // namespace lrnode
