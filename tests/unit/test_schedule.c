/* test_schedule.c - "not_before", "priority" and "after" in task specs:
 * validation naming the field, the normalised form (absent stays absent),
 * and the queue record runners read instead of the spec. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "records/schedule.h"
#include "records/spec.h"
#include "test.h"

static lr_err err;

#define STEPS "\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]"

static json_t *parsed(const char *text)
{
	json_t *norm = NULL;
	CHECK_OK(lr_spec_parse(text, strlen(text), &norm, &err), &err);
	return norm;
}

static void refused(const char *text, const char *why)
{
	json_t *norm = NULL;
	int rc = lr_spec_parse(text, strlen(text), &norm, &err);
	if (rc != LR_EINVAL || strstr(err.msg, why) == NULL)
		TEST_FAIL("%s: rc %d, message \"%s\", expected \"%s\"", text, rc, err.msg, why);
	CHECK(norm == NULL);
}

TEST(a_spec_without_the_fields_is_stored_as_before)
{
	json_t *norm = parsed("{\"id\":\"t\"," STEPS "}");
	CHECK(json_object_get(norm, "priority") == NULL);
	CHECK(json_object_get(norm, "not_before") == NULL);
	CHECK(json_object_get(norm, "after") == NULL);
	char *text = lr_spec_encode(norm);
	lr_sched sc;
	CHECK(!lr_sched_from_text(text, strlen(text), &sc));
	CHECK(lr_sched_record(norm, NULL) == NULL);
	free(text);
	json_decref(norm);
}

TEST(the_fields_are_normalised_and_read_back)
{
	json_t *norm = parsed("{\"id\":\"t\"," STEPS ",\"priority\":-7,"
	                      "\"not_before\":\"2026-11-23T10:00:00.25+02:00\","
	                      "\"after\":[\"a-1\",\"b.2\"]}");
	CHECK_STR(json_string_value(json_object_get(norm, "not_before")),
	          "2026-11-23T08:00:00.250Z");
	char *text = lr_spec_encode(norm);
	lr_sched sc;
	CHECK(lr_sched_from_text(text, strlen(text), &sc));
	CHECK_INT(sc.priority, ==, -7);
	CHECK(sc.not_before_ms > 0);
	CHECK_INT(sc.n_after, ==, 2);
	CHECK_STR(sc.after[1], "b.2");
	lr_sched_clear(&sc);
	char *rec = lr_sched_record(norm, NULL);
	CHECK_STR(rec, "{\"after\":[\"a-1\",\"b.2\"],\"not_before\":\"2026-11-23T08:00:00.250Z\","
	               "\"priority\":-7}");
	free(rec);
	free(text);
	json_decref(norm);
}

/* A time before 1970 is valid RFC 3339, and long due. */
TEST(a_start_time_before_1970_is_taken_as_due)
{
	static const char *const times[] = { "1969-01-01T00:00:00Z", "1970-01-01T00:00:00Z",
		                             "0001-01-01T00:00:00Z" };
	for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
		char spec[200];
		snprintf(spec, sizeof(spec), "{" STEPS ",\"not_before\":\"%s\"}", times[i]);
		json_t *norm = parsed(spec);
		CHECK_STR(json_string_value(json_object_get(norm, "not_before")),
		          "1970-01-01T00:00:00.001Z");
		json_decref(norm);
	}
}

TEST(bad_fields_are_refused_naming_them)
{
	refused("{" STEPS ",\"priority\":101}", "priority");
	refused("{" STEPS ",\"priority\":-101}", "priority");
	refused("{" STEPS ",\"priority\":1.5}", "priority");
	refused("{" STEPS ",\"priority\":\"high\"}", "priority");
	refused("{" STEPS ",\"not_before\":\"2026-02-30T00:00:00Z\"}", "not_before");
	refused("{" STEPS ",\"not_before\":12}", "not_before");
	/* A leap second or an offset past the last day RFC 3339 writes. */
	refused("{" STEPS ",\"not_before\":\"9999-12-31T23:59:60Z\"}",
	        "is after 9999-12-31T23:59:59.999Z");
	refused("{" STEPS ",\"not_before\":\"9999-12-31T23:00:00-05:00\"}",
	        "is after 9999-12-31T23:59:59.999Z");
	json_decref(parsed("{" STEPS ",\"not_before\":\"9999-12-31T23:59:59.999Z\"}"));
	refused("{" STEPS ",\"after\":{}}", "after: expected an array");
	refused("{" STEPS ",\"after\":[5]}", "after[0]");
	refused("{" STEPS ",\"after\":[\"a b\"]}", "after[0]: \"a b\" is not a task id");
	refused("{" STEPS ",\"after\":[\"x\",\"x\"]}", "after[1]: x is named twice");
	refused("{\"id\":\"me\"," STEPS ",\"after\":[\"me\"]}", "after[0]: a task cannot wait");
	char big[4096] = "{" STEPS ",\"after\":[";
	for (int i = 0; i < 65; i++)
		snprintf(big + strlen(big), sizeof(big) - strlen(big), "%s\"t%d\"", i ? "," : "", i);
	strcat(big, "]}");
	refused(big, "after: 65 ids, at most 64");
}

TEST_LIST(TEST_CASE(a_spec_without_the_fields_is_stored_as_before),
          TEST_CASE(the_fields_are_normalised_and_read_back),
          TEST_CASE(a_start_time_before_1970_is_taken_as_due),
          TEST_CASE(bad_fields_are_refused_naming_them));
TEST_MAIN(NULL, NULL)
