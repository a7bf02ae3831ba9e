/* test_garbage.c - hostile records in etcd. Anyone with write access to the
 * prefix can put anything under tasks/, claims/, checkpoints/, done/,
 * runners/ and cancel/: invalid JSON, wrong types, values of a megabyte,
 * keys that are no task id, claims on no lease. Two `leaserun worker` processes live through it
 * (some garbage is there before they start, the rest arrives while they
 * run): each garbage task ends failed with the validation error or is left
 * alone, the valid tasks beside it succeed, and `status` and `runners`
 * still answer. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "leaserun.h"
#include "proc.h"
#include "records/record.h"
#include "test.h"

#define PREFIX "/garbage/"

static etcdh_cluster *cluster;
static lr_client *client;
static char tmpdir[512];
static proc_bg workers[2];

/* The end of each worker's log, for a failure's report. */
static void show_logs(void)
{
	for (int i = 0; i < 2; i++) {
		if (workers[i].pid <= 0)
			continue;
		char *log = proc_slurp(workers[i].log);
		size_t len = strlen(log);
		fprintf(stderr, "--- %s (%s), last lines ---\n%s\n", workers[i].log,
		        proc_alive(&workers[i]) ? "running" : "exited",
		        len > 6000 ? log + len - 6000 : log);
		free(log);
	}
}

static void put(const char *kind, const char *id, const char *value, size_t len,
                int64_t lease)
{
	char key[LR_KEY_SIZE * 2];
	lr_err err = { 0 };
	snprintf(key, sizeof(key), "%s%s%s", PREFIX, kind, id);
	CHECK_OK(lr_kv_put(lr_client_etcd(client), key, value, len, lease, NULL,
	                   NULL, &err), &err);
}

static void put_str(const char *kind, const char *id, const char *value)
{
	put(kind, id, value, strlen(value), 0);
}

/* A valid two-step task. */
static void put_valid(const char *id)
{
	char spec[256];
	snprintf(spec, sizeof(spec),
	         "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"},"
	         "{\"name\":\"b\",\"run\":\"true\"}]}", id);
	char out[LR_ID_SIZE];
	lr_err err = { 0 };
	CHECK_OK(lr_submit_text(client, spec, strlen(spec), NULL, out, NULL, &err), &err);
}

/* A JSON document of about `size` bytes: one long string in `field`. */
static char *huge_json(const char *head, size_t size, const char *tail)
{
	size_t hl = strlen(head), tl = strlen(tail);
	char *v = malloc(hl + size + tl + 1);
	CHECK(v != NULL);
	memcpy(v, head, hl);
	memset(v + hl, 'x', size);
	memcpy(v + hl + size, tail, tl + 1);
	return v;
}

/* Invalid specs and the words their failure must carry. */
struct bad_spec {
	const char *id;
	const char *value;
	const char *why;
};

static const struct bad_spec before[] = {
	{ "g-syntax", "{\"id\":\"g-syntax\",\"steps\":[", "line 1, column" },
	{ "g-types", "{\"id\":\"g-types\",\"steps\":\"run everything\"}",
	  "steps: expected an array" },
	{ "g-array", "[1,2,3]", "expected a JSON object" },
	{ "g-other-id", "{\"id\":\"someone-else\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}",
	  "does not match" },
	{ "g-empty", "", "empty" },
};

static const struct bad_spec during[] = {
	{ "g-unknown", "{\"id\":\"g-unknown\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],\"evil\":1}",
	  "unknown field" },
	{ "g-negative", "{\"id\":\"g-negative\",\"steps\":[{\"name\":\"a\",\"run\":\"true\",\"timeout_s\":-5}]}",
	  "timeout_s" },
	{ "g-nul", "{\"id\":\"g-nul\",\"steps\":[{\"name\":\"a\\u0000b\",\"run\":\"true\"}]}",
	  "u0000" },
	{ "g-bigint", "{\"id\":\"g-bigint\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],"
	  "\"max_attempts\":99999999999999999999999}", "line 1" },
};

static void put_bad(const struct bad_spec *b)
{
	put_str(LR_K_TASKS, b->id, b->value);
}

/* Everything that is no valid spec but is no plain string either. */
static void put_odd_tasks(void)
{
	/* Binary bytes, NUL included. */
	static const char bin[] = "\x00\xff\xfe{\"id\":\x01";
	put(LR_K_TASKS, "g-binary", bin, sizeof(bin) - 1, 0);
	/* A parse error whose text, as the parser gives it, would end inside
	 * a UTF-8 sequence (found by fuzz_spec). */
	static const char cut[] = "{\"id\":\"g-utf8\",\"steps\":[{\"name\":\"\\u00e9t\\u0\xd0\x9a\"}]}";
	put(LR_K_TASKS, "g-utf8", cut, sizeof(cut) - 1, 0);
	/* Nested deeper than the parser goes. */
	size_t depth = 100000;
	char *deep = malloc(2 * depth + 1);
	CHECK(deep != NULL);
	memset(deep, '[', depth);
	memset(deep + depth, ']', depth);
	deep[2 * depth] = '\0';
	put_str(LR_K_TASKS, "g-deep", deep);
	free(deep);
	/* Over the 1 MiB spec limit (etcd takes up to 1.5 MiB). */
	char *huge = huge_json("{\"id\":\"g-huge\",\"steps\":[{\"name\":\"a\",\"run\":\"",
	                       (1 << 20) + 4096, "\"}]}");
	put_str(LR_K_TASKS, "g-huge", huge);
	free(huge);
	/* Keys that are no task id. */
	put_str(LR_K_TASKS, "bad id", "{\"id\":\"bad id\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	put_str(LR_K_TASKS, "a/b", "{\"id\":\"a/b\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	put_str(LR_K_TASKS, "", "{}");
	put_str(LR_K_TASKS, "\xff\xfe-not-utf8", "{\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	put_str(LR_K_TASKS, "\xc3\xa9t\xc3\xa9", "{\"id\":\"x\",\"steps\":[]}");
	char long_id[400];
	memset(long_id, 'L', sizeof(long_id) - 1);
	long_id[sizeof(long_id) - 1] = '\0';
	put_str(LR_K_TASKS, long_id, "{\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
}

/* Garbage beside valid tasks in the other directories. */
static void put_other_garbage(void)
{
	/* A checkpoint that does not decode, for a task that exists. */
	put_str(LR_K_CHECKPOINTS, "v-ckpt", "{\"next_step\":\"two\"}");
	put_valid("v-ckpt");
	/* A checkpoint past the last step. */
	put_str(LR_K_CHECKPOINTS, "v-ckpt-far",
	        "{\"next_step\":999,\"attempt\":1,\"state\":{},\"runner\":\"x\","
	        "\"fence\":0,\"updated_at\":\"\"}");
	put_valid("v-ckpt-far");
	/* A huge checkpoint. */
	char *huge;
	huge = huge_json("{\"next_step\":0,\"attempt\":0,\"state\":\"", 1200000,
	                       "\",\"runner\":\"x\",\"fence\":0,\"updated_at\":\"\"}");
	put_str(LR_K_CHECKPOINTS, "v-ckpt-huge", huge);
	free(huge);
	put_valid("v-ckpt-huge");

	/* An undecodable claim on a lease that runs out: the task is taken
	 * over once it is gone. */
	lr_err err = { 0 };
	int64_t lease = 0, granted = 0, sent = 0;
	CHECK_OK(lr_lease_grant(lr_client_etcd(client), 2, &lease, &granted, &sent,
	                        &err), &err);
	put(LR_K_CLAIMS, "v-claim", "{\"runner\":42}", 13, lease);
	put_valid("v-claim");
	/* A claim on no lease, which would never expire: its claimer
	 * deletes it and runs the task. */
	put_str(LR_K_CLAIMS, "v-nolease-2", "{\"runner\":\"ghost\",\"lease\":1}");
	put_valid("v-nolease-2");
	/* Claims and done records of tasks that do not exist. */
	put_str(LR_K_CLAIMS, "ghost", "not json at all");
	put_str(LR_K_DONE, "ghost", "[\"done?\"]");
	put_str(LR_K_CANCEL, "ghost", "\x01\x02");
	huge = huge_json("{\"runner\":\"", 1100000, "\",\"lease\":1}");
	put_str(LR_K_CLAIMS, "ghost-huge", huge);
	free(huge);
	/* An undecodable done record ends a task as far as runners go. */
	put_str(LR_K_DONE, "v-done", "{\"status\":\"maybe\"}");
	put_valid("v-done");
	huge = huge_json("{\"status\":\"failed\",\"error\":\"", 1100000, "\"}");
	put_str(LR_K_DONE, "v-done-huge", huge);
	free(huge);
	put_valid("v-done-huge");
	/* An undecodable cancel request still asks to cancel. */
	put_str(LR_K_CANCEL, "v-cancel", "{\"requested_at\":[]}");
	put_valid("v-cancel");
	/* Runner records nobody wrote. */
	put_str(LR_K_RUNNERS, "evil", "{\"pid\":\"many\"}");
	put_str(LR_K_RUNNERS, "bad name", "{}");
	huge = huge_json("{\"pid\":1,\"host\":\"", 1100000, "\"}");
	put_str(LR_K_RUNNERS, "huge", huge);
	free(huge);
}

/* The done record of id as a new string, NULL when none. */
static char *done_of(const char *id)
{
	char key[LR_KEY_SIZE];
	lr_range_result r;
	lr_err err = { 0 };
	lr_key(client, LR_K_DONE, id, key);
	CHECK_OK(lr_kv_get(lr_client_etcd(client), key, &r, &err), &err);
	char *v = r.n > 0 ? strndup(r.kvs[0].value, r.kvs[0].value_len) : NULL;
	lr_range_result_free(&r);
	return v;
}

/* Wait until every id in ids has a done record. */
static void wait_done(const char *const *ids, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	for (const char *const *id = ids; *id != NULL; id++) {
		char *d;
		while ((d = done_of(*id)) == NULL) {
			if (lr_mono_ms() >= end) {
				show_logs();
				TEST_FAIL("task %s has no done record after %d ms", *id,
				          timeout_ms);
			}
			lr_sleep_ms(50);
		}
		free(d);
	}
}

static void check_done(const char *id, const char *status, const char *words)
{
	char *d = done_of(id);
	CHECK(d != NULL);
	lr_done_rec rec;
	lr_err err = { 0 };
	if (lr_done_decode(d, strlen(d), &rec, &err) != 0)
		TEST_FAIL("done/%s: %s: %s", id, err.msg, d);
	fprintf(stderr, "   %s: %s: %s\n", id, rec.status, rec.error ? rec.error : "");
	CHECK_STR(rec.status, status);
	if (words != NULL) {
		CHECK(rec.error != NULL);
		CHECK_HAS(rec.error, words);
	}
	lr_done_rec_clear(&rec);
	free(d);
}

/* The worker still runs; otherwise fail with the end of the logs. */
static void check_alive(proc_bg *w)
{
	if (proc_alive(w))
		return;
	show_logs();
	TEST_FAIL("worker %d exited with status %d", (int)w->pid, w->status);
}

/* SIGTERM must end the worker with 0; otherwise fail with the end of the
 * logs, where a sanitizer's report of the worker would be. */
static void stop_worker(proc_bg *w)
{
	int status = proc_stop(w, SIGTERM, 10000);
	if (status == 0)
		return;
	show_logs();
	TEST_FAIL("worker %d stopped with status %d, not 0", (int)w->pid, status);
}

static void start_worker(proc_bg *w, const char *name, const char *const *env)
{
	char log[600];
	snprintf(log, sizeof(log), "%s/%s.log", tmpdir, name);
	const char *args[] = { "worker", "--name", name, "--ttl", "2",
		               "--concurrency", "2", "--grace", "1", NULL };
	char *argv[16];
	proc_cli_argv(argv, 16, args);
	proc_start(w, argv, env, log);
}

TEST(runners_live_through_garbage_and_fail_or_skip_it_while_valid_tasks_succeed)
{
	char ep[128];
	snprintf(ep, sizeof(ep), "LEASERUN_ENDPOINTS=%s", etcdh_endpoints(cluster));
	const char *env[] = { ep, "LEASERUN_PREFIX=" PREFIX, NULL };

	/* Some garbage is there before the runners start... */
	for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++)
		put_bad(&before[i]);
	put_odd_tasks();
	put_valid("v-1");
	put_str(LR_K_CLAIMS, "v-nolease-1", "not json");
	put_valid("v-nolease-1");
	proc_bg *w1 = &workers[0], *w2 = &workers[1];
	start_worker(w1, "w1", env);
	start_worker(w2, "w2", env);
	lr_sleep_ms(500);
	/* ...and the rest arrives while they run. */
	for (size_t i = 0; i < sizeof(during) / sizeof(during[0]); i++)
		put_bad(&during[i]);
	put_other_garbage();
	put_valid("v-2");
	put_valid("v-3");

	static const char *const valid[] = { "v-1", "v-2", "v-3", "v-claim", "v-cancel",
		                             "v-nolease-1", "v-nolease-2", NULL };
	static const char *const failing[] = {
		"g-syntax", "g-types", "g-array", "g-other-id", "g-empty", "g-unknown",
		"g-negative", "g-nul", "g-bigint", "g-binary", "g-utf8", "g-deep", "g-huge",
		"v-ckpt", "v-ckpt-far", "v-ckpt-huge", NULL,
	};
	wait_done(valid, 20000);
	wait_done(failing, 10000);

	check_alive(w1);
	check_alive(w2);
	for (const char *const *id = valid; *id != NULL; id++)
		if (strcmp(*id, "v-cancel") != 0)
			check_done(*id, "succeeded", NULL);
	check_done("v-cancel", "cancelled", NULL);
	for (size_t i = 0; i < sizeof(before) / sizeof(before[0]); i++)
		check_done(before[i].id, "failed", before[i].why);
	for (size_t i = 0; i < sizeof(during) / sizeof(during[0]); i++)
		check_done(during[i].id, "failed", during[i].why);
	check_done("g-binary", "failed", "invalid spec");
	check_done("g-utf8", "failed", "invalid escape");
	check_done("g-deep", "failed", "invalid spec");
	check_done("g-huge", "failed", "over the 1 MiB limit");
	check_done("v-ckpt", "failed", "unreadable checkpoint");
	check_done("v-ckpt-far", "failed", "step 999");
	check_done("v-ckpt-huge", "failed", "checkpoint");

	/* The command still reads it all. */
	const char *const reads[][3] = {
		{ "status", NULL }, { "status", "--json" }, { "status", "v-done" },
		{ "status", "v-done-huge" },
		{ "status", "g-huge" }, { "runners", NULL }, { "runners", "--json" },
	};
	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		proc_result r = proc_cli(env, NULL, reads[i][0], reads[i][1], (char *)NULL);
		CHECK_INT(r.status, ==, 0);
		if (reads[i][1] != NULL && strcmp(reads[i][1], "--json") == 0) {
			json_t *doc = json_loads(r.out, 0, NULL);
			CHECK(json_is_array(doc));
			json_decref(doc);
		}
		proc_result_free(&r);
	}
	proc_result r = proc_cli(env, NULL, "status", "g-syntax", "--json", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "\"failed\"");
	CHECK_HAS(r.out, "line 1, column");
	proc_result_free(&r);

	/* Still alive, and they stop as asked. */
	check_alive(w1);
	check_alive(w2);
	stop_worker(w1);
	stop_worker(w2);
	char *log1 = proc_slurp(w1->log);
	char *log2 = proc_slurp(w2->log);
	/* The failures were logged by whoever ended them. */
	CHECK(strstr(log1, "g-syntax") != NULL || strstr(log2, "g-syntax") != NULL);
	/* And the claims on no lease were named. */
	CHECK(strstr(log1, "hangs on no lease") != NULL || strstr(log2, "hangs on no lease") != NULL);
	free(log1);
	free(log2);
}

TEST_LIST(
	TEST_CASE(runners_live_through_garbage_and_fail_or_skip_it_while_valid_tasks_succeed),
);

static int setup(void)
{
	const char *tmp = getenv("TMPDIR");
	signal(SIGPIPE, SIG_IGN);
	snprintf(tmpdir, sizeof(tmpdir), "%s/leaserun-garbage-XXXXXX",
	         tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (mkdtemp(tmpdir) == NULL)
		return -1;
	etcdh_opts o = { .members = 1 };
	if (etcdh_start(&o, &cluster) != 0)
		return -1;
	lr_client_opts co = { .endpoints = etcdh_endpoints(cluster), .prefix = PREFIX,
		              .dial_timeout_s = 5, .call_timeout_s = 10 };
	lr_err err = { 0 };
	if (lr_client_open(&co, &client, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	return 0;
}

static void teardown(void)
{
	char cmd[600];
	lr_client_close(client);
	etcdh_destroy(cluster);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

TEST_MAIN(setup, teardown)
