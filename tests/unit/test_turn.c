/* test_turn.c - the spec fields priority, not_before and after: what is
 * accepted, what is refused and with which message, the normalised form,
 * and the turn/<id> record. No etcd. */
#include <stdlib.h>
#include <string.h>

#include "records/spec.h"
#include "records/turn.h"
#include "test.h"

#define ONE_STEP "\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]"

static json_t *parse_ok(const char *text)
{
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_parse(text, strlen(text), &out, &err), &err);
	return out;
}

static void parse_fails(const char *text, const char *want)
{
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK_INT(lr_spec_parse(text, strlen(text), &out, &err), ==, LR_EINVAL);
	CHECK(out == NULL);
	CHECK_HAS(err.msg, want);
}

TEST(a_spec_without_turn_fields_is_stored_without_them)
{
	json_t *s = parse_ok("{\"id\":\"t\"," ONE_STEP "}");
	CHECK(json_object_get(s, "priority") == NULL);
	CHECK(json_object_get(s, "not_before") == NULL);
	CHECK(json_object_get(s, "after") == NULL);
	char *text = lr_spec_encode(s);
	CHECK(lr_turn_of_spec_text(text, strlen(text)) == NULL); /* no turn/ record */
	free(text);
	json_decref(s);
}

TEST(turn_fields_are_kept_and_not_before_is_normalised_to_utc)
{
	json_t *s = parse_ok("{\"id\":\"t\",\"priority\":-7,\"after\":[\"x\",\"y\"],"
	                     "\"not_before\":\"2026-11-21T07:30:00+02:00\"," ONE_STEP "}");
	CHECK_INT(json_integer_value(json_object_get(s, "priority")), ==, -7);
	CHECK_STR(json_string_value(json_object_get(s, "not_before")), "2026-11-21T05:30:00.000Z");
	lr_turn t;
	lr_err err = { 0 };
	CHECK_OK(lr_turn_of_spec(s, &t, &err), &err);
	CHECK_INT(t.priority, ==, -7);
	CHECK_INT(t.n_after, ==, 2);
	CHECK_STR(t.after[1], "y");
	char *rec = lr_turn_encode(&t);
	CHECK_STR(rec, "{\"after\":[\"x\",\"y\"],\"not_before\":\"2026-11-21T05:30:00.000Z\","
	               "\"priority\":-7}");
	lr_turn back;
	CHECK_OK(lr_turn_decode(rec, strlen(rec), &back, &err), &err);
	CHECK_INT(back.not_before_ms, ==, t.not_before_ms);
	CHECK_INT(back.n_after, ==, 2);
	lr_turn_clear(&back);
	lr_turn_clear(&t);
	free(rec);
	json_decref(s);
}

TEST(priority_must_be_an_integer_from_minus_100_to_100)
{
	parse_fails("{\"priority\":101," ONE_STEP "}", "priority: 101 is out of range -100..100");
	parse_fails("{\"priority\":-101," ONE_STEP "}", "priority: -101 is out of range");
	parse_fails("{\"priority\":1.5," ONE_STEP "}", "priority: expected an integer, got 1.5");
	parse_fails("{\"priority\":\"high\"," ONE_STEP "}", "priority: expected an integer");
	json_decref(parse_ok("{\"priority\":100," ONE_STEP "}"));
	json_decref(parse_ok("{\"priority\":-100," ONE_STEP "}"));
}

TEST(not_before_must_be_an_rfc3339_time)
{
	parse_fails("{\"not_before\":\"tomorrow\"," ONE_STEP "}",
	            "not_before: \"tomorrow\" is not an RFC 3339 time");
	parse_fails("{\"not_before\":\"2026-02-30T00:00:00Z\"," ONE_STEP "}", "not_before:");
	parse_fails("{\"not_before\":1700000000," ONE_STEP "}",
	            "not_before: expected a string, got 1700000000");
	parse_fails("{\"not_before\":\"\"," ONE_STEP "}", "not_before: must not be empty");
}

TEST(after_lists_at_most_64_distinct_task_ids_other_than_its_own)
{
	parse_fails("{\"after\":\"a\"," ONE_STEP "}", "after: expected an array of task ids");
	parse_fails("{\"after\":[\"a\",\"b c\"]," ONE_STEP "}", "after[1]: \"b c\" is not a task id");
	parse_fails("{\"after\":[\"a\",7]," ONE_STEP "}", "after[1]: expected a string, got 7");
	parse_fails("{\"after\":[\"a\",\"a\"]," ONE_STEP "}", "after[1]: \"a\" is listed twice");
	parse_fails("{\"id\":\"me\",\"after\":[\"me\"]," ONE_STEP "}",
	            "after[0]: a task cannot wait for itself");
	char spec[4096];
	size_t n = (size_t)snprintf(spec, sizeof(spec), "{\"after\":[");
	for (int i = 0; i < 65; i++)
		n += (size_t)snprintf(spec + n, sizeof(spec) - n, "%s\"t%d\"", i ? "," : "", i);
	snprintf(spec + n, sizeof(spec) - n, "]," ONE_STEP "}");
	parse_fails(spec, "after: 65 tasks, at most 64");
	json_decref(parse_ok("{\"after\":[]," ONE_STEP "}"));
}

TEST(a_turn_record_from_elsewhere_is_checked_like_the_spec)
{
	static const char *const bad[] = {
		"", "[]", "{\"priority\":1000}", "{\"after\":[1]}", "{\"not_before\":\"x\"}",
		"{\"color\":1}", "{\"priority\":1,\"priority\":2}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lr_turn t;
		lr_err err = { 0 };
		CHECK_INT(lr_turn_decode(bad[i], strlen(bad[i]), &t, &err), ==, LR_EINVAL);
		CHECK_HAS(err.msg, "turn record");
		CHECK(t.after == NULL);
	}
	lr_turn t;
	lr_err err = { 0 };
	CHECK_OK(lr_turn_decode("{}", 2, &t, &err), &err);
	CHECK(!lr_turn_any(&t));
}

TEST_LIST(
	TEST_CASE(a_spec_without_turn_fields_is_stored_without_them),
	TEST_CASE(turn_fields_are_kept_and_not_before_is_normalised_to_utc),
	TEST_CASE(priority_must_be_an_integer_from_minus_100_to_100),
	TEST_CASE(not_before_must_be_an_rfc3339_time),
	TEST_CASE(after_lists_at_most_64_distinct_task_ids_other_than_its_own),
	TEST_CASE(a_turn_record_from_elsewhere_is_checked_like_the_spec),
);
TEST_MAIN(NULL, NULL)
