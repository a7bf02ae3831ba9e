/* test_record.c - records stored in etcd: encoding round trips, and decoding
 * refuses garbage written by anyone else with a message, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/record.h"
#include "records/spec.h"
#include "test.h"

#define CLAIM "{\"runner\":\"r1\",\"lease\":7,\"claimed_at\":\"2026-11-21T05:29:17.123Z\"}"
#define CHECKPOINT "{\"next_step\":2,\"attempt\":1,\"state\":{\"k\":1},\"runner\":\"r1\"," \
	"\"fence\":42,\"updated_at\":\"2026-11-21T05:29:17.123Z\"}"
#define DONE "{\"status\":\"failed\",\"attempts\":3,\"error\":\"step b exited 1\"," \
	"\"state\":[1],\"finished_at\":\"2026-11-21T05:29:17.123Z\"}"
#define RUNNER "{\"pid\":4242,\"host\":\"box\",\"concurrency\":2,\"ttl\":10," \
	"\"started_at\":\"2026-11-21T05:29:17.123Z\",\"version\":\"0.1.0\"}"

/* Decoding text must fail with LR_EINVAL and a message holding want. */
#define DECODE_FAILS(decode, rec, text, want)                                 \
	do {                                                                  \
		lr_err err_ = { 0 };                                          \
		CHECK_INT(decode(text, strlen(text), rec, &err_), ==, LR_EINVAL); \
		CHECK_INT(err_.code, ==, LR_EINVAL);                          \
		CHECK_HAS(err_.msg, want);                                    \
	} while (0)

/* A string of n copies of c, malloc'd. */
static char *repeat(char c, size_t n)
{
	char *s = malloc(n + 1);
	CHECK(s != NULL);
	memset(s, c, n);
	s[n] = '\0';
	return s;
}

/* A JSON object text with one field's value replaced, e.g. with(CLAIM,
 * "lease", "-1"); the field is removed when value is NULL. */
static char *with(const char *base, const char *key, const char *value)
{
	json_t *doc = json_loads(base, 0, NULL);
	CHECK(doc != NULL);
	if (value == NULL) {
		json_object_del(doc, key);
	} else {
		json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
		CHECK(v != NULL);
		json_object_set_new(doc, key, v);
	}
	char *text = json_dumps(doc, JSON_COMPACT);
	json_decref(doc);
	CHECK(text != NULL);
	return text;
}

TEST(claim_round_trips)
{
	lr_claim_rec in = { .runner = "host-1", .lease = 7587862340919873822,
	                    .claimed_at = "2026-11-21T05:29:17.123Z" };
	lr_claim_rec out;
	lr_err err = { 0 };
	char *text = lr_claim_encode(&in);
	CHECK(text != NULL);
	CHECK_STR(text, "{\"claimed_at\":\"2026-11-21T05:29:17.123Z\","
	                "\"lease\":7587862340919873822,\"runner\":\"host-1\"}");
	CHECK_OK(lr_claim_decode(text, strlen(text), &out, &err), &err);
	CHECK_STR(out.runner, "host-1");
	CHECK_INT(out.lease, ==, in.lease);
	CHECK_STR(out.claimed_at, in.claimed_at);
	free(text);
}

TEST(checkpoint_round_trips_with_its_state)
{
	lr_checkpoint_rec in = { .next_step = 3, .attempt = 2, .runner = "r9",
	                         .fence = 123456789, .updated_at = "t" };
	lr_checkpoint_rec out = { .state = NULL };
	lr_err err = { 0 };
	in.state = json_pack("{s:[i,s], s:{s:b}}", "a", 1, "x", "b", "c", 1);
	char *text = lr_checkpoint_encode(&in);
	CHECK(text != NULL);
	CHECK_OK(lr_checkpoint_decode(text, strlen(text), &out, &err), &err);
	CHECK_INT(out.next_step, ==, 3);
	CHECK_INT(out.attempt, ==, 2);
	CHECK_INT(out.fence, ==, 123456789);
	CHECK_STR(out.runner, "r9");
	CHECK_STR(out.updated_at, "t");
	CHECK(json_equal(out.state, in.state));
	lr_checkpoint_rec_clear(&out);
	CHECK(out.state == NULL);
	lr_checkpoint_rec_clear(&in);
	free(text);
}

TEST(checkpoint_fence_0_is_the_claim_of_the_same_revision)
{
	lr_checkpoint_rec by_claim = { .fence = 0 }, fenced = { .fence = 17 };
	CHECK_INT(lr_checkpoint_fence(&by_claim, 42), ==, 42);
	CHECK_INT(lr_checkpoint_fence(&fenced, 42), ==, 17);
}

TEST(checkpoint_state_may_be_any_json_value)
{
	lr_checkpoint_rec out = { .state = NULL };
	lr_err err = { 0 };
	char *text = with(CHECKPOINT, "state", "null");
	CHECK_OK(lr_checkpoint_decode(text, strlen(text), &out, &err), &err);
	CHECK(json_is_null(out.state));
	lr_checkpoint_rec_clear(&out);
	free(text);
	text = with(CHECKPOINT, "state", "\"plain\"");
	CHECK_OK(lr_checkpoint_decode(text, strlen(text), &out, &err), &err);
	CHECK_STR(json_string_value(out.state), "plain");
	lr_checkpoint_rec_clear(&out);
	free(text);
}

/* A retry of a task no runner claimed, resumed past step 0, names no
 * runner: "" is read back as it is. */
TEST(checkpoint_runner_may_be_empty)
{
	lr_checkpoint_rec out = { .state = NULL };
	lr_err err = { 0 };
	char *text = with(CHECKPOINT, "runner", "\"\"");
	CHECK_OK(lr_checkpoint_decode(text, strlen(text), &out, &err), &err);
	CHECK_STR(out.runner, "");
	lr_checkpoint_rec_clear(&out);
	free(text);
}

TEST(done_round_trips_with_error_and_state)
{
	lr_done_rec in = { .status = "failed", .attempts = 5,
	                   .finished_at = "2026-11-21T05:29:17.123Z" };
	lr_done_rec out = { .error = NULL };
	lr_err err = { 0 };
	in.error = strdup("step analyse exited with status 3: boom");
	in.state = json_pack("{s:i}", "rows", 10);
	char *text = lr_done_encode(&in);
	CHECK(text != NULL);
	CHECK_OK(lr_done_decode(text, strlen(text), &out, &err), &err);
	CHECK_STR(out.status, "failed");
	CHECK_INT(out.attempts, ==, 5);
	CHECK_STR(out.error, in.error);
	CHECK(json_equal(out.state, in.state));
	CHECK_STR(out.finished_at, in.finished_at);
	lr_done_rec_clear(&out);
	lr_done_rec_clear(&in);
	CHECK(in.error == NULL && in.state == NULL);
	free(text);
}

/* An error quotes a step's stderr (any bytes) or a name cut short in the
 * middle of a character: the record is written all the same, each stray
 * byte as U+FFFD. */
TEST(done_with_an_error_that_is_not_utf8_is_written_with_replacements)
{
	lr_done_rec in = { .status = "failed", .attempts = 1, .finished_at = "t" };
	lr_done_rec out = { .error = NULL };
	lr_err err = { 0 };
	in.error = strdup("step s exited with status 3; stderr: \377 boom \xC3");
	char *text = lr_done_encode(&in);
	CHECK(text != NULL);
	CHECK_OK(lr_done_decode(text, strlen(text), &out, &err), &err);
	CHECK_STR(out.error, "step s exited with status 3; stderr: \xEF\xBF\xBD boom \xEF\xBF\xBD");
	lr_done_rec_clear(&out);
	lr_done_rec_clear(&in);
	free(text);
}

TEST(done_without_error_or_state_encodes_them_as_null)
{
	lr_done_rec in = { .status = "cancelled", .attempts = 0, .finished_at = "t" };
	lr_done_rec out = { .error = NULL };
	lr_err err = { 0 };
	char *text = lr_done_encode(&in);
	CHECK_STR(text, "{\"attempts\":0,\"error\":null,\"finished_at\":\"t\","
	                "\"state\":null,\"status\":\"cancelled\"}");
	CHECK_OK(lr_done_decode(text, strlen(text), &out, &err), &err);
	CHECK(out.error == NULL);
	CHECK(json_is_null(out.state));
	lr_done_rec_clear(&out);
	free(text);
}

TEST(runner_round_trips)
{
	lr_runner_rec in = { .pid = 4242, .host = "box.example", .concurrency = 8,
	                     .ttl = 10, .started_at = "s", .version = "0.1.0" };
	lr_runner_rec out;
	lr_err err = { 0 };
	char *text = lr_runner_encode(&in);
	CHECK(text != NULL);
	CHECK_OK(lr_runner_decode(text, strlen(text), &out, &err), &err);
	CHECK_INT(out.pid, ==, 4242);
	CHECK_STR(out.host, "box.example");
	CHECK_INT(out.concurrency, ==, 8);
	CHECK_INT(out.ttl, ==, 10);
	CHECK_STR(out.started_at, "s");
	CHECK_STR(out.version, "0.1.0");
	free(text);
}

TEST(cancel_round_trips)
{
	lr_cancel_rec out;
	lr_err err = { 0 };
	char *text = lr_cancel_encode("2026-11-21T05:29:17.123Z");
	CHECK_STR(text, "{\"requested_at\":\"2026-11-21T05:29:17.123Z\"}");
	CHECK_OK(lr_cancel_decode(text, strlen(text), &out, &err), &err);
	CHECK_STR(out.requested_at, "2026-11-21T05:29:17.123Z");
	free(text);
}

TEST(decoders_reject_text_that_is_not_json)
{
	lr_claim_rec c;
	lr_checkpoint_rec k;
	lr_done_rec d;
	lr_runner_rec r;
	lr_cancel_rec x;
	DECODE_FAILS(lr_claim_decode, &c, "not json", "claim record: line 1, column ");
	DECODE_FAILS(lr_checkpoint_decode, &k, "{\"next_step\":", "checkpoint record: line 1");
	DECODE_FAILS(lr_done_decode, &d, "", "done record: empty");
	DECODE_FAILS(lr_runner_decode, &r, "\x80\x81", "runner record: ");
	DECODE_FAILS(lr_cancel_decode, &x, "{}}", "cancel record: line 1");
}

TEST(decoders_reject_values_that_are_not_objects)
{
	lr_claim_rec c;
	lr_done_rec d;
	DECODE_FAILS(lr_claim_decode, &c, "[]", "claim record: expected a JSON object, got an array");
	DECODE_FAILS(lr_done_decode, &d, "\"done\"", "done record: expected a JSON object, got \"done\"");
	DECODE_FAILS(lr_done_decode, &d, "7", "done record: expected a JSON object, got 7");
}

TEST(decoders_reject_wrong_types_naming_the_field)
{
	lr_claim_rec c;
	lr_checkpoint_rec k;
	lr_done_rec d;
	lr_runner_rec r;
	char *t;

	t = with(CLAIM, "lease", "\"7\"");
	DECODE_FAILS(lr_claim_decode, &c, t, "claim record: lease: expected a positive integer, got \"7\"");
	free(t);
	t = with(CLAIM, "runner", "5");
	DECODE_FAILS(lr_claim_decode, &c, t, "claim record: runner: expected a string, got 5");
	free(t);
	t = with(CHECKPOINT, "next_step", "1.5");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "checkpoint record: next_step: expected a non-negative integer, got 1.5");
	free(t);
	t = with(CHECKPOINT, "attempt", "true");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "checkpoint record: attempt: expected a non-negative integer, got true");
	free(t);
	t = with(CHECKPOINT, "fence", "null");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "checkpoint record: fence: expected a non-negative integer, got null");
	free(t);
	t = with(DONE, "error", "{}");
	DECODE_FAILS(lr_done_decode, &d, t, "done record: error: expected a string, got an object");
	free(t);
	t = with(DONE, "attempts", "[3]");
	DECODE_FAILS(lr_done_decode, &d, t, "done record: attempts: expected a non-negative integer, got an array");
	free(t);
	t = with(RUNNER, "ttl", "\"10s\"");
	DECODE_FAILS(lr_runner_decode, &r, t, "runner record: ttl: expected a positive integer, got \"10s\"");
	free(t);
	t = with(RUNNER, "host", "[]");
	DECODE_FAILS(lr_runner_decode, &r, t, "runner record: host: expected a string, got an array");
	free(t);
}

TEST(decoders_reject_negative_and_zero_where_impossible)
{
	lr_claim_rec c;
	lr_checkpoint_rec k;
	lr_done_rec d;
	lr_runner_rec r;
	char *t;

	t = with(CLAIM, "lease", "0");
	DECODE_FAILS(lr_claim_decode, &c, t, "claim record: lease: 0 is out of range (at least 1)");
	free(t);
	t = with(CLAIM, "lease", "-3");
	DECODE_FAILS(lr_claim_decode, &c, t, "lease: -3 is out of range");
	free(t);
	t = with(CHECKPOINT, "next_step", "-1");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "checkpoint record: next_step: -1 is out of range 0..1000");
	free(t);
	t = with(CHECKPOINT, "attempt", "-1");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "checkpoint record: attempt: -1 is out of range 0..2147483647");
	free(t);
	t = with(CHECKPOINT, "fence", "-9223372036854775808");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "checkpoint record: fence: -9223372036854775808 is out of range (at least 0)");
	free(t);
	t = with(DONE, "attempts", "-2");
	DECODE_FAILS(lr_done_decode, &d, t, "done record: attempts: -2 is out of range");
	free(t);
	t = with(RUNNER, "pid", "0");
	DECODE_FAILS(lr_runner_decode, &r, t, "runner record: pid: 0 is out of range");
	free(t);
	t = with(RUNNER, "concurrency", "-1");
	DECODE_FAILS(lr_runner_decode, &r, t, "runner record: concurrency: -1 is out of range");
	free(t);
}

TEST(checkpoint_rejects_counters_too_large_to_be_real)
{
	lr_checkpoint_rec k;
	char *t = with(CHECKPOINT, "next_step", "1001");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "next_step: 1001 is out of range 0..1000");
	free(t);
	/* The runner computes attempt + 1: INT64_MAX would overflow it. */
	t = with(CHECKPOINT, "attempt", "9223372036854775807");
	DECODE_FAILS(lr_checkpoint_decode, &k, t, "attempt: 9223372036854775807 is out of range");
	free(t);
}

TEST(decoders_reject_missing_fields_naming_them)
{
	const char *claim_fields[] = { "runner", "lease", "claimed_at" };
	const char *checkpoint_fields[] = { "next_step", "attempt", "state", "runner", "fence", "updated_at" };
	const char *done_fields[] = { "status", "attempts", "error", "state", "finished_at" };
	const char *runner_fields[] = { "pid", "host", "concurrency", "ttl", "started_at", "version" };
	char want[64];
	lr_claim_rec c;
	lr_checkpoint_rec k;
	lr_done_rec d;
	lr_runner_rec r;
	lr_cancel_rec x;

	for (size_t i = 0; i < 3; i++) {
		char *t = with(CLAIM, claim_fields[i], NULL);
		snprintf(want, sizeof(want), "claim record: %s: missing", claim_fields[i]);
		DECODE_FAILS(lr_claim_decode, &c, t, want);
		free(t);
	}
	for (size_t i = 0; i < 6; i++) {
		char *t = with(CHECKPOINT, checkpoint_fields[i], NULL);
		snprintf(want, sizeof(want), "checkpoint record: %s: missing", checkpoint_fields[i]);
		DECODE_FAILS(lr_checkpoint_decode, &k, t, want);
		free(t);
	}
	for (size_t i = 0; i < 5; i++) {
		char *t = with(DONE, done_fields[i], NULL);
		snprintf(want, sizeof(want), "done record: %s: missing", done_fields[i]);
		DECODE_FAILS(lr_done_decode, &d, t, want);
		free(t);
	}
	for (size_t i = 0; i < 6; i++) {
		char *t = with(RUNNER, runner_fields[i], NULL);
		snprintf(want, sizeof(want), "runner record: %s: missing", runner_fields[i]);
		DECODE_FAILS(lr_runner_decode, &r, t, want);
		free(t);
	}
	DECODE_FAILS(lr_cancel_decode, &x, "{}", "cancel record: requested_at: missing");
}

TEST(decoders_reject_strings_too_long_for_their_buffers)
{
	lr_claim_rec c;
	lr_runner_rec r;
	lr_done_rec d;
	lr_err err = { 0 };
	char *s = repeat('r', 256);
	char *value = malloc(300);
	CHECK(value != NULL);

	snprintf(value, 300, "\"%s\"", s);
	char *t = with(CLAIM, "runner", value);
	DECODE_FAILS(lr_claim_decode, &c, t, "claim record: runner: 256 bytes, over the limit of 255");
	free(t);
	/* One byte less fits exactly. */
	value[256] = '"';
	value[257] = '\0';
	t = with(CLAIM, "runner", value);
	CHECK_OK(lr_claim_decode(t, strlen(t), &c, &err), &err);
	CHECK_INT(strlen(c.runner), ==, 255);
	free(t);

	t = with(CLAIM, "claimed_at", "\"2026-11-21T05:29:17.123456789+00:00-extra\"");
	DECODE_FAILS(lr_claim_decode, &c, t, "claim record: claimed_at: 41 bytes, over the limit of 39");
	free(t);
	t = with(RUNNER, "version", "\"0123456789abcdef0123456789abcdef\"");
	DECODE_FAILS(lr_runner_decode, &r, t, "runner record: version: 32 bytes, over the limit of 31");
	free(t);
	t = with(DONE, "status", "\"succeededsucceeded\"");
	DECODE_FAILS(lr_done_decode, &d, t, "done record: status: 18 bytes, over the limit of 15");
	free(t);
	free(value);
	free(s);
}

TEST(done_rejects_an_unknown_status)
{
	lr_done_rec d;
	char *t = with(DONE, "status", "\"running\"");
	DECODE_FAILS(lr_done_decode, &d, t, "done record: status: \"running\" is not one of succeeded, failed, cancelled");
	free(t);
	t = with(DONE, "status", "\"\"");
	DECODE_FAILS(lr_done_decode, &d, t, "done record: status: must not be empty");
	free(t);
}

TEST(decoders_ignore_unknown_fields)
{
	lr_claim_rec c;
	lr_err err = { 0 };
	char *t = with(CLAIM, "priority", "{\"from\":\"a newer runner\"}");
	CHECK_OK(lr_claim_decode(t, strlen(t), &c, &err), &err);
	CHECK_INT(c.lease, ==, 7);
	free(t);
}

TEST(decoders_reject_duplicate_keys)
{
	lr_claim_rec c;
	DECODE_FAILS(lr_claim_decode, &c,
	             "{\"runner\":\"a\",\"lease\":1,\"lease\":2,\"claimed_at\":\"t\"}",
	             "duplicate");
}

TEST(decoders_read_only_len_bytes)
{
	/* Values from etcd are not NUL-terminated. */
	const char buf[] = CLAIM "{{{garbage";
	lr_claim_rec c;
	lr_err err = { 0 };
	CHECK_OK(lr_claim_decode(buf, strlen(CLAIM), &c, &err), &err);
	CHECK_STR(c.runner, "r1");
}

TEST(decoders_reject_values_over_2_mib_before_parsing)
{
	size_t n = LR_RECORD_MAX_BYTES + 1;
	char *big = repeat(' ', n);
	lr_checkpoint_rec k;
	lr_err err = { 0 };
	CHECK_INT(lr_checkpoint_decode(big, n, &k, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "checkpoint record: 2097153 bytes, over the limit of 2097152");
	free(big);
}

TEST(checkpoint_rejects_state_over_512_kib)
{
	char *s = repeat('s', LR_STATE_MAX_BYTES);
	lr_checkpoint_rec k = { .next_step = 0, .attempt = 1, .runner = "r", .updated_at = "t" };
	lr_err err = { 0 };
	k.state = json_string(s);
	char *text = lr_checkpoint_encode(&k);
	CHECK(text != NULL);
	lr_checkpoint_rec_clear(&k);
	CHECK_INT(lr_checkpoint_decode(text, strlen(text), &k, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "checkpoint record: state: 524290 bytes encoded, over the 512 KiB limit (524288 bytes)");
	free(text);
	free(s);
}

TEST(done_rejects_state_over_512_kib)
{
	char *s = repeat('s', LR_STATE_MAX_BYTES);
	lr_done_rec d = { .status = "succeeded", .finished_at = "t" };
	lr_err err = { 0 };
	d.state = json_string(s);
	char *text = lr_done_encode(&d);
	CHECK(text != NULL);
	lr_done_rec_clear(&d);
	CHECK_INT(lr_done_decode(text, strlen(text), &d, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "done record: state: 524290 bytes encoded");
	free(text);
	free(s);
}

TEST(failed_decode_leaves_the_output_untouched)
{
	lr_claim_rec c = { .runner = "before", .lease = 99 };
	lr_done_rec d = { .status = "before", .error = NULL, .state = NULL };
	char *t = with(CLAIM, "claimed_at", "1");
	CHECK_INT(lr_claim_decode(t, strlen(t), &c, NULL), ==, LR_EINVAL);
	CHECK_STR(c.runner, "before");
	CHECK_INT(c.lease, ==, 99);
	free(t);
	t = with(DONE, "finished_at", NULL);
	CHECK_INT(lr_done_decode(t, strlen(t), &d, NULL), ==, LR_EINVAL);
	CHECK_STR(d.status, "before");
	CHECK(d.error == NULL && d.state == NULL);
	free(t);
}

TEST(decoders_work_without_an_error_struct)
{
	lr_runner_rec r;
	lr_cancel_rec x;
	CHECK_INT(lr_runner_decode("x", 1, &r, NULL), ==, LR_EINVAL);
	CHECK_INT(lr_cancel_decode(NULL, 0, &x, NULL), ==, LR_EINVAL);
}

TEST(encoders_refuse_strings_that_are_not_utf8)
{
	lr_claim_rec c = { .runner = "\xff\xfe", .lease = 1, .claimed_at = "t" };
	CHECK(lr_claim_encode(&c) == NULL);
}

/* What the encoders wrote when every record was a jansson document: the
 * bytes must not change, whichever way they are made now. */
static char *reference(json_t *doc)
{
	char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(doc);
	return text;
}

TEST(claim_checkpoint_and_done_records_are_the_bytes_a_sorted_compact_document_gives)
{
	const char *names[] = { "r1", "", "box-1.a:b_c", "with\"quote", "back\\slash",
		                "tab\there", "\xc3\xbcn\xc3\xaf", "del\x7f", "sp ace/slash" };
	const char *states[] = { NULL, "{}", "{\"k\":1,\"a\":[1,2,{\"z\":null,\"b\":\"x\"}]}",
		                 "\"str \\\"q\\\" \\u00fc\"", "3.5", "true", "[]", "null",
		                 /* longer than the room first guessed for a state */
		                 "{\"long\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		                 "\",\"more\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19]}" };
	size_t n_names = sizeof(names) / sizeof(names[0]);
	size_t n_states = sizeof(states) / sizeof(states[0]);
	for (size_t i = 0; i < n_names; i++) {
		for (size_t j = 0; j < n_states; j++) {
			json_t *state = states[j] != NULL
			                ? json_loads(states[j], JSON_DECODE_ANY, NULL) : NULL;
			CHECK(states[j] == NULL || state != NULL);
			lr_checkpoint_rec c = { .next_step = (int64_t)j, .attempt = 3,
				                .state = state, .fence = 9007199254740993LL };
			snprintf(c.runner, sizeof(c.runner), "%s", names[i]);
			snprintf(c.updated_at, sizeof(c.updated_at), "%s",
			         i % 2 ? "2026-11-21T05:29:17.123Z" : names[i]);
			char *got = lr_checkpoint_encode(&c);
			char *want = reference(json_pack("{s:I, s:I, s:O?, s:s, s:I, s:s}",
			                                 "next_step", (json_int_t)c.next_step,
			                                 "attempt", (json_int_t)c.attempt, "state",
			                                 state, "runner", c.runner, "fence",
			                                 (json_int_t)c.fence, "updated_at",
			                                 c.updated_at));
			CHECK(got != NULL && want != NULL);
			CHECK_STR(got, want);
			free(got);
			free(want);

			const char *error = j % 3 == 0 ? NULL : names[i];
			lr_done_rec d = { .attempts = (int64_t)i, .error = (char *)error,
				          .state = state };
			snprintf(d.status, sizeof(d.status), "%s", j % 2 ? "failed" : "succeeded");
			snprintf(d.finished_at, sizeof(d.finished_at), "%s",
			         i % 2 ? "2026-11-21T05:29:17.123Z" : names[i]);
			got = lr_done_encode(&d);
			want = reference(json_pack("{s:s, s:I, s:o?, s:O?, s:s}", "status", d.status,
			                           "attempts", (json_int_t)d.attempts, "error",
			                           error != NULL ? json_string(error) : NULL,
			                           "state", state, "finished_at", d.finished_at));
			CHECK(got != NULL && want != NULL);
			CHECK_STR(got, want);
			free(got);
			free(want);
			json_decref(state);
		}
		lr_claim_rec c = { .lease = 5007618015513154674LL };
		snprintf(c.runner, sizeof(c.runner), "%s", names[i]);
		snprintf(c.claimed_at, sizeof(c.claimed_at), "%s", names[(i + 1) % n_names]);
		char *got = lr_claim_encode(&c);
		char *want = reference(json_pack("{s:s, s:I, s:s}", "runner", c.runner, "lease",
		                                 (json_int_t)c.lease, "claimed_at", c.claimed_at));
		CHECK(got != NULL && want != NULL);
		CHECK_STR(got, want);
		free(got);
		free(want);
	}
}

TEST_LIST(
	TEST_CASE(claim_checkpoint_and_done_records_are_the_bytes_a_sorted_compact_document_gives),
	TEST_CASE(claim_round_trips),
	TEST_CASE(checkpoint_round_trips_with_its_state),
	TEST_CASE(checkpoint_fence_0_is_the_claim_of_the_same_revision),
	TEST_CASE(checkpoint_state_may_be_any_json_value),
	TEST_CASE(checkpoint_runner_may_be_empty),
	TEST_CASE(done_round_trips_with_error_and_state),
	TEST_CASE(done_with_an_error_that_is_not_utf8_is_written_with_replacements),
	TEST_CASE(done_without_error_or_state_encodes_them_as_null),
	TEST_CASE(runner_round_trips),
	TEST_CASE(cancel_round_trips),
	TEST_CASE(decoders_reject_text_that_is_not_json),
	TEST_CASE(decoders_reject_values_that_are_not_objects),
	TEST_CASE(decoders_reject_wrong_types_naming_the_field),
	TEST_CASE(decoders_reject_negative_and_zero_where_impossible),
	TEST_CASE(checkpoint_rejects_counters_too_large_to_be_real),
	TEST_CASE(decoders_reject_missing_fields_naming_them),
	TEST_CASE(decoders_reject_strings_too_long_for_their_buffers),
	TEST_CASE(done_rejects_an_unknown_status),
	TEST_CASE(decoders_ignore_unknown_fields),
	TEST_CASE(decoders_reject_duplicate_keys),
	TEST_CASE(decoders_read_only_len_bytes),
	TEST_CASE(decoders_reject_values_over_2_mib_before_parsing),
	TEST_CASE(checkpoint_rejects_state_over_512_kib),
	TEST_CASE(done_rejects_state_over_512_kib),
	TEST_CASE(failed_decode_leaves_the_output_untouched),
	TEST_CASE(decoders_work_without_an_error_struct),
	TEST_CASE(encoders_refuse_strings_that_are_not_utf8),
);

TEST_MAIN(NULL, NULL)
