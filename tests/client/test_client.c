/* test_client.c - the task operations of the client (submit, status, list,
 * cancel, purge, shared values, runners) against a real one-member etcd. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "fixture.h"
#include "records/record.h"
#include "test.h"

static lr_err err;

static const char spec2[] =
    "{\"id\":\"job-1\",\"steps\":[{\"name\":\"ingest\",\"run\":\"true\"},"
    "{\"name\":\"analyse\",\"run\":\"true\"}],\"state\":{\"n\":0}}";

static void submit(lr_client *c, const char *text)
{
	char id[LR_ID_SIZE];
	CHECK_OK(lr_submit_text(c, text, strlen(text), NULL, id, NULL, &err),
	         &err);
}

static void put_claim(lr_client *c, const char *id, const char *runner,
                      int64_t lease)
{
	lr_claim_rec cl = { .lease = lease };
	snprintf(cl.runner, sizeof(cl.runner), "%s", runner);
	lr_rfc3339_now(cl.claimed_at);
	char *v = lr_claim_encode(&cl);
	fixture_put(c, LR_K_CLAIMS, id, v, lease);
	free(v);
}

static void put_checkpoint(lr_client *c, const char *id, int64_t next,
                           int64_t attempt, const char *state_json)
{
	lr_checkpoint_rec cp = { .next_step = next, .attempt = attempt,
		                 .runner = "r1", .fence = 0 };
	cp.state = json_loads(state_json, JSON_DECODE_ANY, NULL);
	lr_rfc3339_now(cp.updated_at);
	char *v = lr_checkpoint_encode(&cp);
	fixture_put(c, LR_K_CHECKPOINTS, id, v, 0);
	free(v);
	lr_checkpoint_rec_clear(&cp);
}

/* A done record finished age_ms ago. */
static void put_done(lr_client *c, const char *id, const char *status,
                     const char *error, int64_t age_ms)
{
	lr_done_rec d = { .attempts = 3, .error = (char *)error };
	snprintf(d.status, sizeof(d.status), "%s", status);
	lr_rfc3339_format(lr_wall_ms() - age_ms, d.finished_at);
	char *v = lr_done_encode(&d);
	fixture_put(c, LR_K_DONE, id, v, 0);
	free(v);
}

/* ---- client ---- */

TEST(open_adds_a_slash_to_the_prefix_and_refuses_an_empty_one)
{
	lr_client_opts o = { .endpoints = etcdh_endpoints(cluster),
		             .prefix = "/plain" };
	lr_client *c = NULL;
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	CHECK_STR(lr_client_prefix(c), "/plain/");
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_TASKS, "a", key);
	CHECK_STR(key, "/plain/tasks/a");
	CHECK_STR(lr_key_id(c, LR_K_TASKS, key), "a");
	CHECK(lr_key_id(c, LR_K_DONE, key) == NULL);
	lr_client_close(c);

	o.prefix = "";
	CHECK_INT(lr_client_open(&o, &c, &err), ==, LR_EINVAL);
	CHECK(c == NULL);
	char longp[300];
	memset(longp, 'p', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	o.prefix = longp;
	CHECK_INT(lr_client_open(&o, &c, &err), ==, LR_EINVAL);
}

/* A control character or a blank at either end would make a namespace of
 * its own that nobody sees: refused, the prefix shown escaped. A blank
 * inside is a character like any other. */
TEST(open_refuses_a_prefix_with_control_characters_or_blanks_at_its_ends)
{
	static const struct {
		const char *prefix, *shown, *why;
	} bad[] = {
		{ "/p ", "\"/p \"", "start or end with a blank" },
		{ " /p/", "\" /p/\"", "start or end with a blank" },
		{ "/p/ ", "\"/p/ \"", "start or end with a blank" },
		{ "/p\n", "\"/p\\x0a\"", "control characters" },
		{ "/a\tb/", "\"/a\\x09b/\"", "control characters" },
		{ "/p\r/", "\"/p\\x0d/\"", "control characters" },
		{ "\x01/p/", "\"\\x01/p/\"", "control characters" },
		{ "/p\x7f/", "\"/p\\x7f/\"", "control characters" },
		{ "/p\x1f", "\"/p\\x1f\"", "control characters" },
	};
	lr_client_opts o = { .endpoints = etcdh_endpoints(cluster) };
	lr_client *c = NULL;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.prefix = bad[i].prefix;
		memset(&err, 0, sizeof(err));
		CHECK_INT(lr_client_open(&o, &c, &err), ==, LR_EINVAL);
		CHECK(c == NULL);
		CHECK_INT(err.code, ==, LR_EINVAL);
		CHECK_HAS(err.msg, "prefix ");
		CHECK_HAS(err.msg, bad[i].shown);
		CHECK_HAS(err.msg, bad[i].why);
	}
	o.prefix = "/a b/\xc3\xa9t\xc3\xa9/";
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	CHECK_STR(lr_client_prefix(c), "/a b/\xc3\xa9t\xc3\xa9/");
	lr_client_close(c);
}

TEST(open_without_options_uses_the_default_prefix)
{
	lr_client_opts o = { .endpoints = etcdh_endpoints(cluster) };
	lr_client *c = NULL;
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	CHECK_STR(lr_client_prefix(c), "/leaserun/");
	lr_client_close(c);
}

TEST(state_names_parse_back)
{
	for (int s = LR_TASK_PENDING; s <= LR_TASK_CANCELLED; s++)
		CHECK_INT(lr_task_state_parse(lr_task_state_name((lr_task_state)s)),
		          ==, s);
	CHECK(lr_task_state_name((lr_task_state)9) == NULL);
	CHECK_INT(lr_task_state_parse("done"), ==, -1);
	CHECK(lr_id_valid("runner-1.a:b_c"));
	CHECK(!lr_id_valid("has space"));
	CHECK(!lr_id_valid(""));
}

/* ---- submit ---- */

TEST(submit_stores_the_normalised_spec_and_returns_its_id)
{
	lr_client *c = fixture_client("submit");
	char id[LR_ID_SIZE];
	int created = -1;
	CHECK_OK(lr_submit_text(c, spec2, strlen(spec2), NULL, id, &created,
	                        &err), &err);
	CHECK_STR(id, "job-1");
	CHECK_INT(created, ==, 1);
	char *stored = fixture_get(c, LR_K_TASKS, "job-1");
	CHECK_HAS(stored, "\"max_attempts\":5"); /* defaults filled in */
	free(stored);
	lr_client_close(c);
}

TEST(submit_of_an_identical_spec_succeeds_without_creating)
{
	lr_client *c = fixture_client("same");
	char id[LR_ID_SIZE];
	int created = -1;
	submit(c, spec2);
	/* Same spec, other layout and explicit defaults: the same task. */
	const char *again =
	    "{ \"steps\": [ {\"name\":\"ingest\",\"run\":\"true\",\"timeout_s\":0},"
	    " {\"name\":\"analyse\",\"run\":\"true\"} ], \"id\": \"job-1\","
	    " \"state\": {\"n\": 0}, \"max_attempts\": 5 }";
	CHECK_OK(lr_submit_text(c, again, strlen(again), NULL, id, &created,
	                        &err), &err);
	CHECK_INT(created, ==, 0);
	CHECK_STR(id, "job-1");
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 1);
	lr_client_close(c);
}

/* Optional fields given at what their absence means (priority 0, no
 * "after", no locks or limits) make the same spec, in either order; and a
 * spec stored with them spelled out (as before they were left out) is
 * still the same as its resubmit. */
TEST(submit_of_a_spec_with_optional_fields_at_their_defaults_is_the_same_spec)
{
	lr_client *c = fixture_client("same_defaults");
	static const char plain[] = "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}";
	static const char *const spelled[] = {
		"{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],\"priority\":0}",
		"{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],\"after\":[]}",
		"{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],\"locks\":{}}",
		"{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],\"limits\":{},"
		"\"priority\":0,\"after\":[],\"locks\":{}}",
	};
	for (size_t i = 0; i < sizeof(spelled) / sizeof(spelled[0]); i++)
		for (int order = 0; order < 2; order++) {
			char id[LR_ID_SIZE], first[400], second[400];
			snprintf(id, sizeof(id), "d-%zu-%d", i, order);
			snprintf(first, sizeof(first), order == 0 ? plain : spelled[i], id);
			snprintf(second, sizeof(second), order == 0 ? spelled[i] : plain, id);
			int created = -1;
			CHECK_OK(lr_submit_text(c, first, strlen(first), NULL, NULL, &created, &err),
			         &err);
			CHECK_INT(created, ==, 1);
			if (lr_submit_text(c, second, strlen(second), NULL, NULL, &created, &err) != 0)
				TEST_FAIL("%s after %s: %s", second, first, err.msg);
			CHECK_INT(created, ==, 0);
		}
	/* Stored as before, with "priority":0 spelled out: its resubmit is
	 * the same spec. */
	fixture_put(c, LR_K_TASKS, "d-old",
	            "{\"env\":{},\"id\":\"d-old\",\"max_attempts\":5,\"priority\":0,"
	            "\"retry_backoff_ms\":1000,\"state\":{},\"steps\":[{\"name\":\"a\","
	            "\"run\":\"true\",\"timeout_s\":0}]}",
	            0);
	static const char old[] = "{\"id\":\"d-old\",\"steps\":[{\"name\":\"a\","
	                          "\"run\":\"true\"}],\"priority\":0}";
	int created = -1;
	CHECK_OK(lr_submit_text(c, old, strlen(old), NULL, NULL, &created, &err), &err);
	CHECK_INT(created, ==, 0);
	/* A real difference still is one. */
	static const char other[] = "{\"id\":\"d-old\",\"steps\":[{\"name\":\"a\","
	                            "\"run\":\"true\"}],\"priority\":1}";
	CHECK_INT(lr_submit_text(c, other, strlen(other), NULL, NULL, NULL, &err), ==, LR_EEXIST);
	lr_client_close(c);
}

TEST(submit_of_a_different_spec_under_the_same_id_is_refused)
{
	lr_client *c = fixture_client("diff");
	char id[LR_ID_SIZE];
	submit(c, spec2);
	char *before = fixture_get(c, LR_K_TASKS, "job-1");
	const char *other = "{\"id\":\"job-1\",\"steps\":[{\"name\":\"x\",\"run\":\"y\"}]}";
	CHECK_INT(lr_submit_text(c, other, strlen(other), NULL, id, NULL, &err),
	          ==, LR_EEXIST);
	CHECK_HAS(err.msg, "job-1");
	CHECK_HAS(err.msg, "different spec");
	char *after = fixture_get(c, LR_K_TASKS, "job-1");
	CHECK_STR(after, before);
	free(before);
	free(after);
	lr_client_close(c);
}

TEST(submit_of_invalid_specs_stores_nothing)
{
	lr_client *c = fixture_client("invalid");
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "{\"steps\":[", "line 1" },
		{ "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],\"colour\":1}", "colour" },
		{ "{\"id\":\"x\"}", "steps" },
		{ "{\"steps\":[]}", "steps" },
		{ "{\"id\":\"no spaces\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}", "id" },
		{ "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],\"max_attempts\":\"5\"}", "max_attempts" },
		{ "[]", "object" },
	};
	char id[LR_ID_SIZE];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = lr_submit_text(c, cases[i].text, strlen(cases[i].text),
		                        NULL, id, NULL, &err);
		if (rc != LR_EINVAL)
			TEST_FAIL("case %zu: rc %d", i, rc);
		CHECK_HAS(err.msg, "invalid spec");
		CHECK_HAS(err.msg, cases[i].want);
	}
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

TEST(submit_json_takes_the_id_override_or_generates_one)
{
	lr_client *c = fixture_client("json");
	json_t *spec = json_pack("{s:[{s:s, s:s}]}", "steps", "name", "a", "run",
	                         "true");
	char id[LR_ID_SIZE], id2[LR_ID_SIZE];
	CHECK_OK(lr_submit_json(c, spec, "given", id, NULL, &err), &err);
	CHECK_STR(id, "given");
	CHECK_OK(lr_submit_json(c, spec, NULL, id, NULL, &err), &err);
	CHECK_OK(lr_submit_json(c, spec, NULL, id2, NULL, &err), &err);
	CHECK(strcmp(id, id2) != 0); /* generated ids differ */
	CHECK(json_object_get(spec, "id") == NULL); /* input untouched */
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 3);
	json_decref(spec);
	lr_client_close(c);
}

/* ---- status ---- */

TEST(status_of_a_new_task_is_pending_at_its_first_step)
{
	lr_client *c = fixture_client("pending");
	submit(c, spec2);
	lr_task_status s;
	CHECK_OK(lr_task_get(c, "job-1", &s, &err), &err);
	CHECK_STR(s.id, "job-1");
	CHECK_INT(s.state, ==, LR_TASK_PENDING);
	CHECK_INT(s.next_step, ==, 0);
	CHECK_INT(s.steps, ==, 2);
	CHECK_STR(s.step_name, "ingest");
	CHECK_INT(s.attempt, ==, 0);
	CHECK_INT(s.max_attempts, ==, 5);
	CHECK(s.runner == NULL);
	CHECK(s.error == NULL);
	CHECK(s.create_revision > 0);
	lr_task_status_clear(&s);
	lr_client_close(c);
}

TEST(status_of_a_claimed_task_is_running_on_the_claim_holder)
{
	lr_client *c = fixture_client("running");
	submit(c, spec2);
	put_checkpoint(c, "job-1", 1, 2, "{}");
	put_claim(c, "job-1", "holder-7", fixture_lease(c, 30));
	lr_task_status s;
	CHECK_OK(lr_task_get(c, "job-1", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_RUNNING);
	CHECK_STR(s.runner, "holder-7");
	CHECK_INT(s.next_step, ==, 1);
	CHECK_STR(s.step_name, "analyse");
	CHECK_INT(s.attempt, ==, 2);
	CHECK(s.updated_at != NULL);
	CHECK(s.error == NULL);
	lr_task_status_clear(&s);
	lr_client_close(c);
}

TEST(status_of_a_finished_task_comes_from_its_done_record)
{
	lr_client *c = fixture_client("done");
	submit(c, spec2);
	put_checkpoint(c, "job-1", 1, 1, "{}");
	put_done(c, "job-1", "failed", "step analyse exited with status 3", 0);
	lr_task_status s;
	CHECK_OK(lr_task_get(c, "job-1", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_FAILED);
	CHECK_STR(s.error, "step analyse exited with status 3");
	CHECK_INT(s.attempt, ==, 3);
	CHECK(s.step_name == NULL);
	lr_task_status_clear(&s);

	submit(c, "{\"id\":\"ok\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}");
	put_done(c, "ok", "succeeded", NULL, 0);
	CHECK_OK(lr_task_get(c, "ok", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_SUCCEEDED);
	CHECK_INT(s.next_step, ==, s.steps);
	CHECK(s.error == NULL);
	lr_task_status_clear(&s);
	lr_client_close(c);
}

TEST(status_of_an_unknown_or_invalid_id)
{
	lr_client *c = fixture_client("unknown");
	lr_task_status s;
	CHECK_INT(lr_task_get(c, "nope", &s, &err), ==, LR_ENOTFOUND);
	CHECK_HAS(err.msg, "no such task nope");
	CHECK_INT(lr_task_get(c, "bad id", &s, &err), ==, LR_EINVAL);
	CHECK_INT(lr_task_get(c, "nope", &s, NULL), ==, LR_ENOTFOUND);
	lr_client_close(c);
}

TEST(status_survives_garbage_records_and_names_them)
{
	lr_client *c = fixture_client("garbage");
	submit(c, spec2);
	fixture_put(c, LR_K_CHECKPOINTS, "job-1", "{not json", 0);
	fixture_put(c, LR_K_DONE, "job-1", "[1,2]", 0);
	lr_task_status s;
	CHECK_OK(lr_task_get(c, "job-1", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_FAILED); /* a done record ends it */
	CHECK_HAS(s.error, "unreadable checkpoint record");
	CHECK_HAS(s.error, "unreadable done record");
	CHECK_INT(s.steps, ==, 2);
	lr_task_status_clear(&s);

	submit(c, "{\"id\":\"c\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}");
	fixture_put(c, LR_K_CLAIMS, "c", "{\"runner\":5}", 0);
	CHECK_OK(lr_task_get(c, "c", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_RUNNING);
	CHECK_HAS(s.error, "unreadable claim record");
	lr_task_status_clear(&s);

	fixture_put(c, LR_K_TASKS, "broken", "{\"id\":\"broken\"", 0);
	CHECK_OK(lr_task_get(c, "broken", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_PENDING);
	CHECK_INT(s.steps, ==, 0);
	CHECK_HAS(s.error, "unreadable spec");
	lr_task_status_clear(&s);

	/* Ended by a runner for it: the stored error says why, once. */
	fixture_put(c, LR_K_TASKS, "empty", "{\"id\":\"empty\",\"steps\":[]}", 0);
	fixture_put(c, LR_K_DONE, "empty",
	            "{\"status\":\"failed\",\"attempts\":0,\"error\":\"invalid spec: "
	            "steps: 0 steps, a task has 1 to 1000\",\"state\":null,"
	            "\"finished_at\":\"2026-11-23T10:00:00.000Z\"}", 0);
	CHECK_OK(lr_task_get(c, "empty", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_FAILED);
	CHECK_STR(s.error, "invalid spec: steps: 0 steps, a task has 1 to 1000");
	lr_task_status_clear(&s);

	/* The same for a checkpoint a runner could not read. */
	static const char bad_ckpt[] = "{\"next_step\":0,\"attempt\":-1,\"state\":null,"
	                               "\"runner\":\"r\",\"fence\":0,\"updated_at\":\"\"}";
	lr_checkpoint_rec cp;
	lr_err why = { 0 };
	CHECK(lr_checkpoint_decode(bad_ckpt, strlen(bad_ckpt), &cp, &why) != 0);
	char done[1024], said[600];
	snprintf(said, sizeof(said), "unreadable checkpoint: %s", why.msg);
	snprintf(done, sizeof(done), "{\"status\":\"failed\",\"attempts\":0,\"error\":\"%s\","
	         "\"state\":null,\"finished_at\":\"2026-11-23T10:00:00.000Z\"}", said);
	submit(c, "{\"id\":\"ck\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}");
	fixture_put(c, LR_K_CHECKPOINTS, "ck", bad_ckpt, 0);
	fixture_put(c, LR_K_DONE, "ck", done, 0);
	CHECK_OK(lr_task_get(c, "ck", &s, &err), &err);
	CHECK_STR(s.error, said);
	lr_task_status_clear(&s);
	lr_client_close(c);
}

/* ---- list ---- */

static void check_ids(lr_task_status *v, size_t n, const char *const *want,
                      size_t nwant)
{
	CHECK_INT(n, ==, nwant);
	for (size_t i = 0; i < n; i++)
		CHECK_STR(v[i].id, want[i]);
}

TEST(list_is_oldest_first_filtered_by_state_and_limited)
{
	lr_client *c = fixture_client("list");
	/* Created in an order unlike the key order. */
	const char *ids[] = { "d", "b", "c", "a" };
	for (int i = 0; i < 4; i++) {
		char *s = fixture_spec(ids[i], 1);
		submit(c, s);
		free(s);
	}
	put_claim(c, "b", "r", fixture_lease(c, 30));
	put_done(c, "c", "succeeded", NULL, 0);
	put_done(c, "a", "cancelled", "cancelled while pending", 0);
	fixture_put(c, LR_K_TASKS, "not an id", "{}", 0);

	lr_task_status *v;
	size_t n;
	CHECK_OK(lr_task_list(c, -1, 0, &v, &n, &err), &err);
	check_ids(v, n, ids, 4);
	CHECK_INT(v[0].state, ==, LR_TASK_PENDING);
	CHECK_INT(v[1].state, ==, LR_TASK_RUNNING);
	CHECK_INT(v[2].state, ==, LR_TASK_SUCCEEDED);
	CHECK_INT(v[3].state, ==, LR_TASK_CANCELLED);
	lr_task_list_free(v, n);

	const struct {
		int filter;
		size_t limit;
		const char *want[4];
		size_t n;
	} cases[] = {
		{ LR_TASK_PENDING, 0, { "d" }, 1 },
		{ LR_TASK_RUNNING, 0, { "b" }, 1 },
		{ LR_TASK_SUCCEEDED, 0, { "c" }, 1 },
		{ LR_TASK_CANCELLED, 0, { "a" }, 1 },
		{ LR_TASK_FAILED, 0, { NULL }, 0 },
		{ -1, 2, { "d", "b" }, 2 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK_OK(lr_task_list(c, cases[i].filter, cases[i].limit, &v, &n,
		                      &err), &err);
		check_ids(v, n, cases[i].want, cases[i].n);
		lr_task_list_free(v, n);
	}
	CHECK_INT(lr_task_list(c, 7, 0, &v, &n, &err), ==, LR_EINVAL);
	lr_client_close(c);
}

TEST(list_reads_every_page_of_a_long_list)
{
	lr_client *c = fixture_client("pages");
	enum { N = 1234, PER_TXN = 100 };
	for (int first = 0; first < N; first += PER_TXN) {
		lr_txn *t = lr_txn_new();
		for (int i = first; i < first + PER_TXN && i < N; i++) {
			char id[16], key[LR_KEY_SIZE];
			snprintf(id, sizeof(id), "t%05d", N - i); /* keys descend */
			char *s = fixture_spec(id, 1);
			lr_key(c, LR_K_TASKS, id, key);
			lr_txn_put(t, LR_THEN, key, s, strlen(s), 0);
			free(s);
		}
		lr_txn_result r;
		CHECK_OK(lr_etcd_txn(lr_client_etcd(c), t, 0, &r, &err), &err);
		lr_txn_result_free(&r);
		lr_txn_free(t);
	}
	lr_task_status *v;
	size_t n;
	CHECK_OK(lr_task_list(c, LR_TASK_PENDING, 0, &v, &n, &err), &err);
	CHECK_INT(n, ==, N);
	for (size_t i = 1; i < n; i++)
		CHECK(v[i - 1].create_revision <= v[i].create_revision);
	/* Each txn created 100 tasks at one revision: those go by id. */
	CHECK_STR(v[0].id, "t01135");
	CHECK_STR(v[99].id, "t01234");
	CHECK_STR(v[n - 1].id, "t00034");
	lr_task_list_free(v, n);
	lr_client_close(c);
}

/* ---- cancel ---- */

TEST(cancel_of_a_pending_task_ends_it_cancelled_with_its_progress)
{
	lr_client *c = fixture_client("cancel_pending");
	submit(c, spec2);
	put_checkpoint(c, "job-1", 1, 2, "{\"n\":7}");
	int already = 99;
	CHECK_OK(lr_cancel(c, "job-1", &already, &err), &err);
	CHECK_INT(already, ==, -1);
	char *v = fixture_get(c, LR_K_DONE, "job-1");
	lr_done_rec d;
	CHECK_OK(lr_done_decode(v, strlen(v), &d, &err), &err);
	CHECK_STR(d.status, "cancelled");
	CHECK_INT(d.attempts, ==, 2);
	CHECK_INT(json_integer_value(json_object_get(d.state, "n")), ==, 7);
	lr_done_rec_clear(&d);
	free(v);
	CHECK_INT(fixture_count(c, LR_K_CANCEL), ==, 0);
	lr_task_status s;
	CHECK_OK(lr_task_get(c, "job-1", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_CANCELLED);
	lr_task_status_clear(&s);
	lr_client_close(c);
}

TEST(cancel_of_a_claimed_task_asks_its_holder)
{
	lr_client *c = fixture_client("cancel_claimed");
	submit(c, spec2);
	put_claim(c, "job-1", "holder", fixture_lease(c, 30));
	int already = 99;
	CHECK_OK(lr_cancel(c, "job-1", &already, &err), &err);
	CHECK_INT(already, ==, -1);
	char *req = fixture_get(c, LR_K_CANCEL, "job-1");
	CHECK_HAS(req, "requested_at");
	free(req);
	CHECK_INT(fixture_count(c, LR_K_DONE), ==, 0);
	CHECK_INT(fixture_count(c, LR_K_CLAIMS), ==, 1);
	lr_client_close(c);
}

TEST(cancel_of_a_finished_task_changes_nothing)
{
	lr_client *c = fixture_client("cancel_done");
	submit(c, spec2);
	put_done(c, "job-1", "succeeded", NULL, 0);
	int64_t before = fixture_revision(c);
	int already = -1;
	CHECK_OK(lr_cancel(c, "job-1", &already, &err), &err);
	CHECK_INT(already, ==, LR_TASK_SUCCEEDED);
	CHECK_INT(fixture_revision(c), ==, before);
	lr_client_close(c);
}

TEST(cancel_of_an_unknown_task_is_not_found)
{
	lr_client *c = fixture_client("cancel_unknown");
	CHECK_INT(lr_cancel(c, "ghost", NULL, &err), ==, LR_ENOTFOUND);
	CHECK_HAS(err.msg, "ghost");
	CHECK_INT(lr_cancel(c, "bad id", NULL, &err), ==, LR_EINVAL);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* ---- purge ---- */

#define HOUR_MS (3600 * 1000)

TEST(purge_deletes_only_old_finished_unclaimed_tasks)
{
	lr_client *c = fixture_client("purge");
	const char *all[] = { "old-ok", "old-failed", "recent", "claimed",
		              "pending" };
	for (int i = 0; i < 5; i++) {
		char *s = fixture_spec(all[i], 1);
		submit(c, s);
		free(s);
	}
	put_checkpoint(c, "old-ok", 0, 1, "{}");
	put_done(c, "old-ok", "succeeded", NULL, 2 * HOUR_MS);
	fixture_put(c, LR_K_CANCEL, "old-ok", "{\"requested_at\":\"\"}", 0);
	put_done(c, "old-failed", "failed", "boom", 2 * HOUR_MS);
	put_done(c, "recent", "succeeded", NULL, 0);
	/* A claim beside a done record: the guard keeps the task. */
	put_done(c, "claimed", "succeeded", NULL, 2 * HOUR_MS);
	put_claim(c, "claimed", "r", fixture_lease(c, 30));
	fixture_put(c, LR_K_DONE, "garbage", "nonsense", 0);

	size_t purged = 99;
	CHECK_OK(lr_purge(c, HOUR_MS, LR_TASK_SUCCEEDED, &purged, &err), &err);
	CHECK_INT(purged, ==, 1);
	const char *kinds[] = { LR_K_TASKS, LR_K_CHECKPOINTS, LR_K_DONE,
		                LR_K_CANCEL };
	for (int k = 0; k < 4; k++) {
		char *v = fixture_get(c, kinds[k], "old-ok");
		if (v != NULL)
			TEST_FAIL("%s of old-ok survived", kinds[k]);
	}
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 4);

	CHECK_OK(lr_purge(c, HOUR_MS, -1, &purged, &err), &err);
	CHECK_INT(purged, ==, 1); /* old-failed */
	char *v = fixture_get(c, LR_K_TASKS, "claimed");
	CHECK(v != NULL);
	free(v);
	v = fixture_get(c, LR_K_TASKS, "recent");
	CHECK(v != NULL);
	free(v);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 3);

	CHECK_INT(lr_purge(c, HOUR_MS, LR_TASK_RUNNING, &purged, &err), ==,
	          LR_EINVAL);
	CHECK_INT(lr_purge(c, -1, -1, &purged, &err), ==, LR_EINVAL);
	lr_client_close(c);
}

/* ---- shared values ---- */

static int increment(void *user, const void *current, void **next)
{
	(void)user;
	json_int_t n = current != NULL ? json_integer_value(current) : 0;
	*next = json_integer(n + 1);
	return 0;
}

struct counter_job {
	const char *prefix;
	int rc;
	lr_err err;
};

static void *count_to_100(void *arg)
{
	struct counter_job *job = arg;
	lr_client_opts o = { .endpoints = etcdh_endpoints(cluster),
		             .prefix = job->prefix };
	lr_client *c = NULL;
	job->rc = lr_client_open(&o, &c, &job->err);
	for (int i = 0; i < 100 && job->rc == 0; i++)
		job->rc = lr_update(c, "counter", increment, NULL, &job->err);
	lr_client_close(c);
	return NULL;
}

TEST(update_from_8_threads_loses_no_increment)
{
	lr_client *c = fixture_client("counter");
	enum { THREADS = 8 };
	pthread_t th[THREADS];
	struct counter_job jobs[THREADS];
	for (int i = 0; i < THREADS; i++) {
		jobs[i] = (struct counter_job){ .prefix = lr_client_prefix(c) };
		CHECK(pthread_create(&th[i], NULL, count_to_100, &jobs[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++)
		CHECK_OK(jobs[i].rc, &jobs[i].err);
	void *v = NULL;
	CHECK_OK(lr_shared_get(c, "counter", &v, &err), &err);
	CHECK(json_is_integer((json_t *)v));
	CHECK_INT(json_integer_value(v), ==, 800);
	json_decref(v);
	lr_client_close(c);
}

static int refuse(void *user, const void *current, void **next)
{
	(void)user;
	(void)current;
	(void)next;
	return LR_ECANCELLED;
}

TEST(update_stopped_by_its_function_writes_nothing)
{
	lr_client *c = fixture_client("refuse");
	CHECK_INT(lr_update(c, "x", refuse, NULL, &err), ==, LR_ECANCELLED);
	void *v = (void *)1;
	CHECK_OK(lr_shared_get(c, "x", &v, &err), &err);
	CHECK(v == NULL);
	CHECK_INT(lr_update(c, "bad name", increment, NULL, &err), ==, LR_EINVAL);
	fixture_put(c, LR_K_SHARED, "junk", "{oops", 0);
	CHECK_INT(lr_update(c, "junk", increment, NULL, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "not JSON");
	CHECK_INT(fixture_count(c, ""), ==, 1);
	lr_client_close(c);
}

/* ---- runners ---- */

TEST(runners_list_shows_each_live_runner_with_its_ttl_left)
{
	lr_client *c = fixture_client("runners");
	int64_t lease = fixture_lease(c, 30);
	lr_runner_rec rec = { .pid = 42, .host = "box", .concurrency = 3,
		              .ttl = 30, .version = "0.1.0" };
	lr_rfc3339_now(rec.started_at);
	char *v = lr_runner_encode(&rec);
	fixture_put(c, LR_K_RUNNERS, "alpha", v, lease);
	free(v);
	fixture_put(c, LR_K_RUNNERS, "beta", "not json", lease);

	lr_runner_info *list;
	size_t n;
	CHECK_OK(lr_runners_list(c, &list, &n, &err), &err);
	CHECK_INT(n, ==, 2);
	CHECK_STR(list[0].name, "alpha");
	CHECK_STR(list[0].host, "box");
	CHECK_INT(list[0].pid, ==, 42);
	CHECK_INT(list[0].concurrency, ==, 3);
	CHECK_INT(list[0].ttl, ==, 30);
	CHECK(list[0].ttl_left > 0 && list[0].ttl_left <= 30);
	CHECK_INT(list[0].lease, ==, lease);
	CHECK_STR(list[1].name, "beta"); /* unreadable, still listed */
	CHECK_INT(list[1].ttl, ==, 30);  /* the lease's granted TTL */
	free(list);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(open_adds_a_slash_to_the_prefix_and_refuses_an_empty_one),
	TEST_CASE(open_refuses_a_prefix_with_control_characters_or_blanks_at_its_ends),
	TEST_CASE(open_without_options_uses_the_default_prefix),
	TEST_CASE(state_names_parse_back),
	TEST_CASE(submit_stores_the_normalised_spec_and_returns_its_id),
	TEST_CASE(submit_of_an_identical_spec_succeeds_without_creating),
	TEST_CASE(submit_of_a_spec_with_optional_fields_at_their_defaults_is_the_same_spec),
	TEST_CASE(submit_of_a_different_spec_under_the_same_id_is_refused),
	TEST_CASE(submit_of_invalid_specs_stores_nothing),
	TEST_CASE(submit_json_takes_the_id_override_or_generates_one),
	TEST_CASE(status_of_a_new_task_is_pending_at_its_first_step),
	TEST_CASE(status_of_a_claimed_task_is_running_on_the_claim_holder),
	TEST_CASE(status_of_a_finished_task_comes_from_its_done_record),
	TEST_CASE(status_of_an_unknown_or_invalid_id),
	TEST_CASE(status_survives_garbage_records_and_names_them),
	TEST_CASE(list_is_oldest_first_filtered_by_state_and_limited),
	TEST_CASE(list_reads_every_page_of_a_long_list),
	TEST_CASE(cancel_of_a_pending_task_ends_it_cancelled_with_its_progress),
	TEST_CASE(cancel_of_a_claimed_task_asks_its_holder),
	TEST_CASE(cancel_of_a_finished_task_changes_nothing),
	TEST_CASE(cancel_of_an_unknown_task_is_not_found),
	TEST_CASE(purge_deletes_only_old_finished_unclaimed_tasks),
	TEST_CASE(update_from_8_threads_loses_no_increment),
	TEST_CASE(update_stopped_by_its_function_writes_nothing),
	TEST_CASE(runners_list_shows_each_live_runner_with_its_ttl_left),
);

static int setup(void)
{
	return cluster_up(1, NULL);
}

TEST_MAIN(setup, cluster_down)
