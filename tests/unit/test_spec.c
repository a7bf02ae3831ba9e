/* test_spec.c - the task spec rules: what is accepted, what is refused and
 * with which message, the normalised form, canonical encoding, generated ids. */
#include <stdlib.h>
#include <string.h>

#include "records/spec.h"
#include "test.h"

#define ONE_STEP "\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]"

/* A growable string for building large specs. */
struct buf {
	char *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		CHECK(b->p != NULL);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

static void buf_fill(struct buf *b, char c, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf_add(b, &c, 1);
}

/* Spec text that must be accepted; returns the normalised spec. */
static json_t *parse_ok(const char *text)
{
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_parse(text, strlen(text), &out, &err), &err);
	CHECK(out != NULL);
	return out;
}

/* Spec text that must be refused with LR_EINVAL and a message holding want. */
static void parse_fails(const char *text, const char *want)
{
	json_t *out = NULL;
	lr_err err = { 0 };
	int rc = lr_spec_parse(text, strlen(text), &out, &err);
	CHECK_INT(rc, ==, LR_EINVAL);
	CHECK_INT(err.code, ==, LR_EINVAL);
	CHECK(out == NULL);
	CHECK_HAS(err.msg, want);
}

/* Same, and the message must be exactly want. */
static void parse_fails_exactly(const char *text, const char *want)
{
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK_INT(lr_spec_parse(text, strlen(text), &out, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, want);
}

TEST(spec_minimal_gets_every_default_filled)
{
	json_t *s = parse_ok("{" ONE_STEP "}");
	CHECK(lr_id_valid(lr_spec_id(s)));
	CHECK_INT(lr_spec_steps(s), ==, 1);
	CHECK_STR(lr_spec_step_name(s, 0), "a");
	CHECK_STR(json_string_value(json_object_get(lr_spec_step(s, 0), "run")), "true");
	CHECK_INT(json_integer_value(json_object_get(lr_spec_step(s, 0), "timeout_s")), ==, 0);
	CHECK_INT(lr_spec_max_attempts(s), ==, 5);
	CHECK_INT(lr_spec_backoff_ms(s), ==, 1000);
	CHECK(json_is_object(lr_spec_env(s)));
	CHECK_INT(json_object_size(lr_spec_env(s)), ==, 0);
	CHECK(json_is_object(lr_spec_state(s)));
	CHECK_INT(json_object_size(lr_spec_state(s)), ==, 0);
	CHECK_INT(json_object_size(s), ==, 6);
	CHECK_INT(json_object_size(json_array_get(json_object_get(s, "steps"), 0)), ==, 3);
	json_decref(s);
}

TEST(spec_design_example_keeps_every_given_value)
{
	json_t *s = parse_ok(
	    "{\"id\": \"report-2026-11-21\",\n"
	    " \"steps\": [\n"
	    "   {\"name\": \"ingest\",  \"run\": \"python3 ingest.py\", \"timeout_s\": 600},\n"
	    "   {\"name\": \"analyse\", \"run\": \"python3 analyse.py\"}\n"
	    " ],\n"
	    " \"state\": {\"k\": [1, 2]},\n"
	    " \"max_attempts\": 7,\n"
	    " \"retry_backoff_ms\": 250,\n"
	    " \"env\": {\"MODEL\": \"small\"}}");
	CHECK_STR(lr_spec_id(s), "report-2026-11-21");
	CHECK_INT(lr_spec_steps(s), ==, 2);
	CHECK_STR(lr_spec_step_name(s, 1), "analyse");
	CHECK_STR(json_string_value(json_object_get(lr_spec_step(s, 0), "run")), "python3 ingest.py");
	CHECK_INT(json_integer_value(json_object_get(lr_spec_step(s, 0), "timeout_s")), ==, 600);
	CHECK_INT(json_integer_value(json_object_get(lr_spec_step(s, 1), "timeout_s")), ==, 0);
	CHECK_INT(lr_spec_max_attempts(s), ==, 7);
	CHECK_INT(lr_spec_backoff_ms(s), ==, 250);
	CHECK_STR(json_string_value(json_object_get(lr_spec_env(s), "MODEL")), "small");
	CHECK_INT(json_array_size(json_object_get(lr_spec_state(s), "k")), ==, 2);
	json_decref(s);
}

TEST(spec_accessors_out_of_range_return_nothing)
{
	json_t *s = parse_ok("{" ONE_STEP "}");
	CHECK(lr_spec_step_name(s, 1) == NULL);
	CHECK(lr_spec_step(s, 5) == NULL);
	json_decref(s);
}

TEST(spec_syntax_error_names_line_and_column)
{
	parse_fails("{\n  \"steps\": [\n    {\"name\": \"a\",, }\n  ]\n}",
	            "line 3, column 18: ");
	parse_fails("{" ONE_STEP, "line 1, column ");
	/* In the spec's own words, not the parser's flag for it. */
	parse_fails_exactly("{\"id\":\"a\\u0000b\"}",
	                    "line 1, column 16: \\u0000 is not allowed near '\"a\\u0000b\"'");
}

TEST(spec_rejects_duplicate_json_keys)
{
	parse_fails("{\"id\":\"a\",\"id\":\"b\"," ONE_STEP "}", "duplicate");
	parse_fails("{\"steps\":[{\"name\":\"a\",\"name\":\"b\",\"run\":\"x\"}]}",
	            "duplicate");
}

TEST(spec_rejects_empty_text_and_non_objects)
{
	parse_fails_exactly("", "empty, expected a JSON object");
	parse_fails_exactly(" \n\t ", "empty, expected a JSON object");
	parse_fails("[]", "expected a JSON object, got an array");
	parse_fails("\"spec\"", "expected a JSON object, got \"spec\"");
	parse_fails("null", "expected a JSON object, got null");
}

TEST(spec_rejects_unknown_field_naming_it)
{
	parse_fails("{\"retries\":3," ONE_STEP "}", "unknown field \"retries\"");
	parse_fails("{\"retries\":3," ONE_STEP "}", "known fields: id, steps, state");
}

TEST(spec_rejects_unknown_step_field_naming_the_step)
{
	parse_fails("{\"steps\":[{\"name\":\"a\",\"run\":\"x\"},"
	            "{\"name\":\"b\",\"run\":\"y\",\"timeout\":5}]}",
	            "steps[1]: unknown field \"timeout\"");
}

TEST(spec_rejects_missing_steps)
{
	parse_fails("{\"id\":\"x\"}", "steps: missing");
}

TEST(spec_rejects_empty_steps)
{
	parse_fails("{\"steps\":[]}", "steps: 0 steps, a task has 1 to 1000");
}

TEST(spec_rejects_steps_of_the_wrong_type)
{
	parse_fails_exactly("{\"steps\":{}}", "steps: expected an array, got an object");
	parse_fails_exactly("{\"steps\":[\"echo hi\"]}",
	                    "steps[0]: expected an object, got \"echo hi\"");
}

/* Spec text with n steps named s0..s<n-1>. */
static void steps_spec(struct buf *b, size_t n)
{
	char step[64];
	buf_str(b, "{\"steps\":[");
	for (size_t i = 0; i < n; i++) {
		snprintf(step, sizeof(step), "%s{\"name\":\"s%zu\",\"run\":\"true\"}",
		         i ? "," : "", i);
		buf_str(b, step);
	}
	buf_str(b, "]}");
}

TEST(spec_accepts_1000_steps)
{
	struct buf b = { 0 };
	steps_spec(&b, 1000);
	json_t *s = parse_ok(b.p);
	CHECK_INT(lr_spec_steps(s), ==, 1000);
	CHECK_STR(lr_spec_step_name(s, 999), "s999");
	json_decref(s);
	free(b.p);
}

TEST(spec_rejects_1001_steps)
{
	struct buf b = { 0 };
	steps_spec(&b, 1001);
	parse_fails(b.p, "steps: 1001 steps, a task has 1 to 1000");
	free(b.p);
}

TEST(spec_requires_non_empty_string_name_and_run)
{
	parse_fails_exactly("{\"steps\":[{\"run\":\"x\"}]}", "steps[0].name: missing");
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\"}]}", "steps[0].run: missing");
	parse_fails_exactly("{\"steps\":[{\"name\":\"\",\"run\":\"x\"}]}",
	                    "steps[0].name: must not be empty");
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":\"\"}]}",
	                    "steps[0].run: must not be empty");
	parse_fails_exactly("{\"steps\":[{\"name\":7,\"run\":\"x\"}]}",
	                    "steps[0].name: expected a string, got 7");
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":[\"sh\"]}]}",
	                    "steps[0].run: expected a string, got an array");
}

TEST(spec_rejects_duplicate_step_names)
{
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":\"x\"},"
	                    "{\"name\":\"b\",\"run\":\"x\"},"
	                    "{\"name\":\"a\",\"run\":\"y\"}]}",
	                    "steps[2].name: \"a\" is already the name of steps[0]");
}

TEST(spec_timeout_must_be_an_integer_from_0_to_a_week)
{
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":\"x\"},{\"name\":\"b\",\"run\":\"x\"},"
	                    "{\"name\":\"c\",\"run\":\"x\",\"timeout_s\":\"ten\"}]}",
	                    "steps[2].timeout_s: expected a non-negative integer, got \"ten\"");
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":-1}]}",
	                    "steps[0].timeout_s: -1 is out of range 0..604800");
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":1.5}]}",
	                    "steps[0].timeout_s: expected a non-negative integer, got 1.5");
	parse_fails_exactly("{\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":true}]}",
	                    "steps[0].timeout_s: expected a non-negative integer, got true");
	parse_fails("{\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":604801}]}",
	            "604801 is out of range 0..604800");
	json_t *s = parse_ok("{\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":604800}]}");
	CHECK_INT(json_integer_value(json_object_get(lr_spec_step(s, 0), "timeout_s")), ==, 604800);
	json_decref(s);
}

TEST(spec_max_attempts_must_be_from_1_to_1000)
{
	parse_fails_exactly("{" ONE_STEP ",\"max_attempts\":0}",
	                    "max_attempts: 0 is out of range 1..1000");
	parse_fails_exactly("{" ONE_STEP ",\"max_attempts\":1001}",
	                    "max_attempts: 1001 is out of range 1..1000");
	parse_fails_exactly("{" ONE_STEP ",\"max_attempts\":\"5\"}",
	                    "max_attempts: expected a positive integer, got \"5\"");
	parse_fails_exactly("{" ONE_STEP ",\"max_attempts\":5.0}",
	                    "max_attempts: expected a positive integer, got 5.0");
	parse_fails("{" ONE_STEP ",\"max_attempts\":99999999999999999999}", "line 1");
	json_t *s = parse_ok("{" ONE_STEP ",\"max_attempts\":1}");
	CHECK_INT(lr_spec_max_attempts(s), ==, 1);
	json_decref(s);
	s = parse_ok("{" ONE_STEP ",\"max_attempts\":1000}");
	CHECK_INT(lr_spec_max_attempts(s), ==, 1000);
	json_decref(s);
}

TEST(spec_retry_backoff_must_be_from_0_to_5_minutes)
{
	parse_fails_exactly("{" ONE_STEP ",\"retry_backoff_ms\":-1}",
	                    "retry_backoff_ms: -1 is out of range 0..300000");
	parse_fails_exactly("{" ONE_STEP ",\"retry_backoff_ms\":300001}",
	                    "retry_backoff_ms: 300001 is out of range 0..300000");
	parse_fails_exactly("{" ONE_STEP ",\"retry_backoff_ms\":null}",
	                    "retry_backoff_ms: expected a non-negative integer, got null");
	json_t *s = parse_ok("{" ONE_STEP ",\"retry_backoff_ms\":0}");
	CHECK_INT(lr_spec_backoff_ms(s), ==, 0);
	json_decref(s);
	s = parse_ok("{" ONE_STEP ",\"retry_backoff_ms\":300000}");
	CHECK_INT(lr_spec_backoff_ms(s), ==, 300000);
	json_decref(s);
}

TEST(spec_rejects_bad_ids)
{
	parse_fails_exactly("{\"id\":\"\"," ONE_STEP "}", "id: must not be empty");
	parse_fails_exactly("{\"id\":\"a/b\"," ONE_STEP "}",
	                    "id: \"a/b\" may only contain letters, digits, '.', '_', ':' and '-'");
	parse_fails("{\"id\":\"a b\"," ONE_STEP "}", "id: \"a b\" may only contain");
	parse_fails("{\"id\":\"caf\\u00e9\"," ONE_STEP "}", "may only contain");
	parse_fails_exactly("{\"id\":42," ONE_STEP "}", "id: expected a string, got 42");

	struct buf b = { 0 };
	buf_str(&b, "{" ONE_STEP ",\"id\":\"");
	buf_fill(&b, 'x', 201);
	buf_str(&b, "\"}");
	parse_fails_exactly(b.p, "id: 201 characters, over the limit of 200");
	free(b.p);
}

TEST(spec_accepts_ids_of_200_allowed_characters)
{
	struct buf b = { 0 };
	buf_str(&b, "{" ONE_STEP ",\"id\":\"Az09._:-");
	buf_fill(&b, 'x', 192);
	buf_str(&b, "\"}");
	json_t *s = parse_ok(b.p);
	CHECK_INT(strlen(lr_spec_id(s)), ==, 200);
	json_decref(s);
	free(b.p);
}

TEST(spec_env_is_an_object_of_strings_with_valid_names)
{
	parse_fails_exactly("{" ONE_STEP ",\"env\":[]}", "env: expected an object, got an array");
	parse_fails_exactly("{" ONE_STEP ",\"env\":{\"A\":1}}", "env.A: expected a string, got 1");
	parse_fails("{" ONE_STEP ",\"env\":{\"1A\":\"x\"}}", "env: \"1A\" is not a variable name");
	parse_fails("{" ONE_STEP ",\"env\":{\"A-B\":\"x\"}}", "env: \"A-B\" is not a variable name");
	parse_fails("{" ONE_STEP ",\"env\":{\"\":\"x\"}}", "env: \"\" is not a variable name");
	parse_fails("{" ONE_STEP ",\"env\":{\"A=B\":\"x\"}}", "is not a variable name");
	json_t *s = parse_ok("{" ONE_STEP ",\"env\":{\"_x\":\"\",\"PATH\":\"/bin\",\"a1\":\"v\"}}");
	CHECK_INT(json_object_size(lr_spec_env(s)), ==, 3);
	CHECK_STR(json_string_value(json_object_get(lr_spec_env(s), "PATH")), "/bin");
	json_decref(s);
}

TEST(spec_env_may_not_set_leaserun_variables)
{
	parse_fails_exactly("{" ONE_STEP ",\"env\":{\"LEASERUN_FENCE\":\"9\"}}",
	                    "env: \"LEASERUN_FENCE\" is reserved: LEASERUN_ variables are set by the runner");
	json_t *s = parse_ok("{" ONE_STEP ",\"env\":{\"LEASERUNNER\":\"ok\"}}");
	json_decref(s);
}

TEST(spec_state_may_be_any_json_value)
{
	const char *states[] = { "42", "\"text\"", "[1,{\"a\":null}]", "null", "true", "{\"n\":{\"m\":1.25}}" };
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		char text[256];
		snprintf(text, sizeof(text), "{" ONE_STEP ",\"state\":%s}", states[i]);
		json_t *s = parse_ok(text);
		json_t *want = json_loads(states[i], JSON_DECODE_ANY, NULL);
		CHECK(want != NULL);
		CHECK(json_equal(lr_spec_state(s), want));
		json_decref(want);
		json_decref(s);
	}
}

/* A spec whose state is a string of n bytes: the state encodes to n + 2. */
static void state_spec(struct buf *b, size_t n)
{
	buf_str(b, "{" ONE_STEP ",\"state\":\"");
	buf_fill(b, 's', n);
	buf_str(b, "\"}");
}

TEST(spec_rejects_state_over_512_kib_naming_state)
{
	struct buf b = { 0 };
	state_spec(&b, LR_STATE_MAX_BYTES - 1);
	parse_fails_exactly(b.p, "state: 524289 bytes encoded, over the 512 KiB limit (524288 bytes)");
	free(b.p);
}

TEST(spec_accepts_state_of_exactly_512_kib)
{
	struct buf b = { 0 };
	state_spec(&b, LR_STATE_MAX_BYTES - 2);
	json_t *s = parse_ok(b.p);
	CHECK_INT(json_string_length(lr_spec_state(s)), ==, LR_STATE_MAX_BYTES - 2);
	json_decref(s);
	free(b.p);
}

/* A state of `depth` nested arrays. */
static void deep_state_spec(struct buf *b, int depth)
{
	buf_str(b, "{" ONE_STEP ",\"state\":");
	for (int i = 0; i < depth; i++)
		buf_str(b, "[");
	for (int i = 0; i < depth; i++)
		buf_str(b, "]");
	buf_str(b, "}");
}

/* Records hold the state a level or two down, and jansson parses 2048
 * levels at most: a state nested near that would be stored and then
 * be unreadable. */
TEST(spec_rejects_state_nested_over_1000_deep)
{
	struct buf b = { 0 };
	deep_state_spec(&b, LR_STATE_MAX_DEPTH + 1);
	parse_fails_exactly(b.p, "state: arrays and objects nested over 1000 deep");
	free(b.p);
	struct buf ok = { 0 };
	deep_state_spec(&ok, LR_STATE_MAX_DEPTH);
	json_decref(parse_ok(ok.p));
	free(ok.p);
}

/* A spec of head, n bytes of 'x' and tail must fail with exactly want. */
static void filled_fails(const char *head, size_t n, const char *tail, const char *want)
{
	struct buf b = { 0 };
	buf_str(&b, head);
	buf_fill(&b, 'x', n);
	buf_str(&b, tail);
	parse_fails_exactly(b.p, want);
	free(b.p);
}

/* What a step's shell gets is bounded by what execve takes: a longer run
 * or env entry would fail each attempt with exit status 127. */
TEST(spec_bounds_step_names_runs_and_env_entries)
{
	filled_fails("{\"steps\":[{\"name\":\"", LR_STEP_NAME_MAX_BYTES + 1,
	             "\",\"run\":\"true\"}]}", "steps[0].name: 1025 bytes, over the limit of 1024");
	filled_fails("{\"steps\":[{\"name\":\"a\",\"run\":\"", LR_EXEC_STRING_MAX_BYTES + 1,
	             "\"}]}", "steps[0].run: 131072 bytes, over the limit of 131071");
	/* BIG= and the value: one byte too many. */
	filled_fails("{" ONE_STEP ",\"env\":{\"BIG\":\"", LR_EXEC_STRING_MAX_BYTES - 3, "\"}}",
	             "env.BIG: 131068 bytes, over the limit of 131067");
}

TEST(spec_rejects_text_over_1_mib_before_parsing)
{
	/* Not JSON at all: only a check before parsing can name the size. */
	size_t n = LR_SPEC_MAX_BYTES + 1;
	char *text = malloc(n);
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK(text != NULL);
	memset(text, 'x', n);
	CHECK_INT(lr_spec_parse(text, n, &out, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "spec is 1048577 bytes, over the 1 MiB limit");
	CHECK(out == NULL);
	free(text);
}

TEST(spec_rejects_spec_over_1_mib_once_defaults_are_filled)
{
	/* 1000 steps without timeout_s, padded to just under 1 MiB: filling
	 * "timeout_s":0 into each pushes the stored form over the limit. */
	struct buf b = { 0 };
	steps_spec(&b, 1000);
	b.len -= 1; /* reopen the object */
	buf_str(&b, ",\"env\":{");
	/* In entries of 100000 bytes: an entry has a limit of its own. */
	for (int k = 0; b.len + 120 < LR_SPEC_MAX_BYTES; k++) {
		size_t left = LR_SPEC_MAX_BYTES - 100 - b.len - 20;
		char name[32];
		snprintf(name, sizeof(name), "%s\"PAD%d\":\"", k > 0 ? "," : "", k);
		buf_str(&b, name);
		buf_fill(&b, 'p', left < 100000 ? left : 100000);
		buf_str(&b, "\"");
	}
	buf_str(&b, "}}");
	CHECK_INT(b.len, <=, LR_SPEC_MAX_BYTES);
	parse_fails(b.p, "once normalised, over the 1 MiB limit");
	free(b.p);
}

TEST(spec_id_given_apart_fills_a_missing_id)
{
	const char *text = "{" ONE_STEP "}";
	json_t *s = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_parse_with_id(text, strlen(text), "job-1", &s, &err), &err);
	CHECK_STR(lr_spec_id(s), "job-1");
	json_decref(s);
}

TEST(spec_id_given_apart_must_agree_with_the_spec)
{
	const char *text = "{\"id\":\"job-1\"," ONE_STEP "}";
	json_t *s = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_parse_with_id(text, strlen(text), "job-1", &s, &err), &err);
	CHECK_STR(lr_spec_id(s), "job-1");
	json_decref(s);
	s = NULL;
	CHECK_INT(lr_spec_parse_with_id(text, strlen(text), "job-2", &s, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "id: the spec says \"job-1\" but the id given is \"job-2\"");
	CHECK(s == NULL);
	CHECK_INT(lr_spec_parse_with_id(text, strlen(text), "bad id", &s, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "\"bad id\" may only contain");
	/* Bytes that are not UTF-8 are shown, escaped. */
	text = "{" ONE_STEP "}";
	CHECK_INT(lr_spec_parse_with_id(text, strlen(text), "ab\xff" "c\x01", &s, &err), ==,
	          LR_EINVAL);
	CHECK_STR(err.msg, "id: \"ab\\xffc\\x01\" may only contain letters, digits, '.', '_', "
	                   "':' and '-'");
}

TEST(spec_validate_builds_a_copy_sharing_nothing_with_its_input)
{
	json_t *in = json_loads("{\"id\":\"a\"," ONE_STEP ",\"state\":{\"x\":1},\"env\":{\"E\":\"1\"}}", 0, NULL);
	json_t *before = json_deep_copy(in);
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK(in != NULL);
	CHECK_OK(lr_spec_validate(in, NULL, &out, &err), &err);
	json_object_set_new(lr_spec_state(out), "x", json_integer(2));
	json_object_set_new(lr_spec_env(out), "E", json_string("2"));
	CHECK(json_equal(in, before));
	json_decref(out);
	json_decref(before);
	json_decref(in);
}

TEST(spec_validate_rejects_non_objects)
{
	json_t *arr = json_array();
	json_t *out = NULL;
	lr_err err = { 0 };
	CHECK_INT(lr_spec_validate(arr, NULL, &out, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "spec: expected a JSON object, got an array");
	CHECK_INT(lr_spec_validate(NULL, NULL, &out, NULL), ==, LR_EINVAL);
	json_decref(arr);
}

static char *encode_text(const char *text)
{
	json_t *s = parse_ok(text);
	char *enc = lr_spec_encode(s);
	CHECK(enc != NULL);
	json_decref(s);
	return enc;
}

TEST(spec_encoding_is_canonical_regardless_of_key_order)
{
	char *a = encode_text("{\"id\":\"t1\",\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":0}],"
	                      "\"state\":{\"b\":1,\"a\":{\"d\":2,\"c\":3}},\"env\":{\"Y\":\"1\",\"X\":\"2\"}}");
	char *b = encode_text("{ \"env\": {\"X\": \"2\", \"Y\": \"1\"},\n"
	                      "  \"state\": {\"a\": {\"c\": 3, \"d\": 2}, \"b\": 1},\n"
	                      "  \"max_attempts\": 5,\n"
	                      "  \"steps\": [{\"run\": \"x\", \"name\": \"a\"}], \"id\": \"t1\" }");
	CHECK_STR(a, b);
	CHECK_STR(a, "{\"env\":{\"X\":\"2\",\"Y\":\"1\"},\"id\":\"t1\",\"max_attempts\":5,"
	             "\"retry_backoff_ms\":1000,\"state\":{\"a\":{\"c\":3,\"d\":2},\"b\":1},"
	             "\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":0}]}");
	free(a);
	free(b);
}

TEST(spec_encoding_differs_when_the_specs_differ)
{
	char *a = encode_text("{\"id\":\"t1\"," ONE_STEP "}");
	char *b = encode_text("{\"id\":\"t1\"," ONE_STEP ",\"max_attempts\":4}");
	CHECK(strcmp(a, b) != 0);
	free(a);
	free(b);
}

TEST(spec_from_record_accepts_its_own_encoding)
{
	char *enc = encode_text("{\"id\":\"t1\"," ONE_STEP ",\"state\":[1]}");
	json_t *s = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_from_record(enc, strlen(enc), "t1", &s, &err), &err);
	char *again = lr_spec_encode(s);
	CHECK_STR(again, enc);
	free(again);
	json_decref(s);
	free(enc);
}

TEST(spec_from_record_requires_the_id_of_its_key)
{
	const char *other = "{\"id\":\"t2\"," ONE_STEP "}";
	const char *none = "{" ONE_STEP "}";
	json_t *s = NULL;
	lr_err err = { 0 };
	CHECK_INT(lr_spec_from_record(other, strlen(other), "t1", &s, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "id: \"t2\" does not match the key's id \"t1\"");
	CHECK_INT(lr_spec_from_record(none, strlen(none), "t1", &s, &err), ==, LR_EINVAL);
	CHECK_STR(err.msg, "id: missing");
	CHECK(s == NULL);
}

TEST(spec_from_record_rejects_garbage_without_crashing)
{
	const char *bad[] = { "", "garbage", "[]", "{\"id\":\"t1\"}",
	                      "{\"id\":\"t1\",\"steps\":[{\"name\":\"a\",\"run\":\"x\",\"timeout_s\":-5}]}",
	                      "{\"id\":1," ONE_STEP "}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *s = NULL;
		lr_err err = { 0 };
		CHECK_INT(lr_spec_from_record(bad[i], strlen(bad[i]), "t1", &s, &err), ==, LR_EINVAL);
		CHECK(s == NULL);
		CHECK(err.msg[0] != '\0');
	}
}

TEST(spec_parse_reads_only_len_bytes)
{
	const char text[] = "{\"id\":\"t1\"," ONE_STEP "}trailing garbage";
	size_t len = strlen(text) - strlen("trailing garbage");
	json_t *s = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_parse(text, len, &s, &err), &err);
	CHECK_STR(lr_spec_id(s), "t1");
	json_decref(s);
}

static int compare_ids(const void *a, const void *b)
{
	return strcmp((const char *)a, (const char *)b);
}

TEST(id_generate_is_unique_and_time_ordered_over_1000_calls)
{
	enum { N = 1000 };
	static char ids[N][LR_ID_GEN_BUF];
	lr_err err = { 0 };
	for (size_t i = 0; i < N; i++) {
		CHECK_OK(lr_id_generate(ids[i], sizeof(ids[i]), &err), &err);
		CHECK(lr_id_valid(ids[i]));
		CHECK_INT(strlen(ids[i]), ==, LR_ID_GEN_BUF - 1);
		/* The time part (up to the milliseconds) never goes back. */
		if (i > 0)
			CHECK(strncmp(ids[i - 1], ids[i], 19) <= 0);
	}
	qsort(ids, N, sizeof(ids[0]), compare_ids);
	for (size_t i = 1; i < N; i++)
		CHECK(strcmp(ids[i - 1], ids[i]) != 0);
}

TEST(id_generate_has_the_documented_shape)
{
	char id[LR_ID_GEN_BUF];
	lr_err err = { 0 };
	CHECK_OK(lr_id_generate(id, sizeof(id), &err), &err);
	/* YYYYMMDD-HHMMSS-mmm-xxxxxxxxxxxx */
	for (size_t i = 0; i < strlen(id); i++) {
		if (i == 8 || i == 15 || i == 19)
			CHECK(id[i] == '-');
		else if (i < 19)
			CHECK(id[i] >= '0' && id[i] <= '9');
		else
			CHECK(strchr("0123456789abcdef", id[i]) != NULL);
	}
}

TEST(id_generate_refuses_a_small_buffer)
{
	char id[LR_ID_GEN_BUF - 1];
	lr_err err = { 0 };
	CHECK_INT(lr_id_generate(id, sizeof(id), &err), ==, LR_EINVAL);
}

TEST(id_valid_follows_the_id_rule)
{
	CHECK(lr_id_valid("report-2026-11-21"));
	CHECK(lr_id_valid("a.b_c:d-e"));
	CHECK(!lr_id_valid(""));
	CHECK(!lr_id_valid("a/b"));
	CHECK(!lr_id_valid("a b"));
	CHECK(!lr_id_valid(NULL));
}

TEST(json_describe_renders_values_briefly)
{
	char buf[128];
	json_t *long_str = json_string("0123456789012345678901234567890123456789abcdef");
	lr_json_describe(long_str, buf, sizeof(buf));
	CHECK_STR(buf, "\"0123456789012345678901234567890123456789...\"");
	json_decref(long_str);
	json_t *ctl = json_string("a\nb");
	lr_json_describe(ctl, buf, sizeof(buf));
	CHECK_STR(buf, "\"a\\nb\"");
	json_decref(ctl);
	lr_json_describe(NULL, buf, sizeof(buf));
	CHECK_STR(buf, "nothing");
}

TEST_LIST(
	TEST_CASE(spec_minimal_gets_every_default_filled),
	TEST_CASE(spec_design_example_keeps_every_given_value),
	TEST_CASE(spec_accessors_out_of_range_return_nothing),
	TEST_CASE(spec_syntax_error_names_line_and_column),
	TEST_CASE(spec_rejects_duplicate_json_keys),
	TEST_CASE(spec_rejects_empty_text_and_non_objects),
	TEST_CASE(spec_rejects_unknown_field_naming_it),
	TEST_CASE(spec_rejects_unknown_step_field_naming_the_step),
	TEST_CASE(spec_rejects_missing_steps),
	TEST_CASE(spec_rejects_empty_steps),
	TEST_CASE(spec_rejects_steps_of_the_wrong_type),
	TEST_CASE(spec_accepts_1000_steps),
	TEST_CASE(spec_rejects_1001_steps),
	TEST_CASE(spec_requires_non_empty_string_name_and_run),
	TEST_CASE(spec_rejects_duplicate_step_names),
	TEST_CASE(spec_timeout_must_be_an_integer_from_0_to_a_week),
	TEST_CASE(spec_max_attempts_must_be_from_1_to_1000),
	TEST_CASE(spec_retry_backoff_must_be_from_0_to_5_minutes),
	TEST_CASE(spec_rejects_bad_ids),
	TEST_CASE(spec_accepts_ids_of_200_allowed_characters),
	TEST_CASE(spec_env_is_an_object_of_strings_with_valid_names),
	TEST_CASE(spec_env_may_not_set_leaserun_variables),
	TEST_CASE(spec_state_may_be_any_json_value),
	TEST_CASE(spec_rejects_state_over_512_kib_naming_state),
	TEST_CASE(spec_accepts_state_of_exactly_512_kib),
	TEST_CASE(spec_rejects_state_nested_over_1000_deep),
	TEST_CASE(spec_bounds_step_names_runs_and_env_entries),
	TEST_CASE(spec_rejects_text_over_1_mib_before_parsing),
	TEST_CASE(spec_rejects_spec_over_1_mib_once_defaults_are_filled),
	TEST_CASE(spec_id_given_apart_fills_a_missing_id),
	TEST_CASE(spec_id_given_apart_must_agree_with_the_spec),
	TEST_CASE(spec_validate_builds_a_copy_sharing_nothing_with_its_input),
	TEST_CASE(spec_validate_rejects_non_objects),
	TEST_CASE(spec_encoding_is_canonical_regardless_of_key_order),
	TEST_CASE(spec_encoding_differs_when_the_specs_differ),
	TEST_CASE(spec_from_record_accepts_its_own_encoding),
	TEST_CASE(spec_from_record_requires_the_id_of_its_key),
	TEST_CASE(spec_from_record_rejects_garbage_without_crashing),
	TEST_CASE(spec_parse_reads_only_len_bytes),
	TEST_CASE(id_generate_is_unique_and_time_ordered_over_1000_calls),
	TEST_CASE(id_generate_has_the_documented_shape),
	TEST_CASE(id_generate_refuses_a_small_buffer),
	TEST_CASE(id_valid_follows_the_id_rule),
	TEST_CASE(json_describe_renders_values_briefly),
);

TEST_MAIN(NULL, NULL)
