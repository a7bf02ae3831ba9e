/* fuzz_spec.c - libFuzzer target: task specs, as submitted and as read back
 * from tasks/<id>.
 *
 * Besides "no crash, no leak, no undefined behaviour" it checks what callers
 * rely on: a rejected spec has an LR_EINVAL message that is valid UTF-8
 * (it is stored in done/<id> and logged as JSON); an accepted spec is in
 * normal form, so storing it and reading it back gives the same bytes, and
 * its accessors give values within the documented limits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "records/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond)                                                         \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "fuzz_spec: %s:%d: %s\n", __FILE__,   \
			        __LINE__, #cond);                             \
			abort();                                              \
		}                                                             \
	} while (0)

/* A refusal is LR_EINVAL (or out of memory) with a message fit for a log
 * line and a JSON string. */
static void check_refusal(int rc, const lr_err *err)
{
	REQUIRE(rc == LR_EINVAL || rc == LR_ENOMEM);
	REQUIRE(err->code == rc);
	REQUIRE(err->msg[0] != '\0');
	json_t *s = json_string(err->msg);
	REQUIRE(s != NULL); /* valid UTF-8 */
	json_decref(s);
}

static void check_limits(const json_t *spec)
{
	REQUIRE(lr_id_valid(lr_spec_id(spec)));
	size_t n = lr_spec_steps(spec);
	REQUIRE(n >= 1 && n <= LR_MAX_STEPS);
	for (size_t i = 0; i < n; i++) {
		REQUIRE(lr_spec_step_name(spec, i) != NULL);
		REQUIRE(lr_spec_step_name(spec, i)[0] != '\0');
		const json_t *step = lr_spec_step(spec, i);
		const char *run = json_string_value(json_object_get(step, "run"));
		REQUIRE(run != NULL && run[0] != '\0');
		int64_t t = json_integer_value(json_object_get(step, "timeout_s"));
		REQUIRE(t >= 0 && t <= LR_STEP_TIMEOUT_MAX_S);
	}
	REQUIRE(lr_spec_max_attempts(spec) >= 1 &&
	        lr_spec_max_attempts(spec) <= LR_MAX_ATTEMPTS);
	REQUIRE(lr_spec_backoff_ms(spec) >= 0);
	REQUIRE(json_is_object(lr_spec_env(spec)));
	REQUIRE(lr_spec_state(spec) != NULL);
}

/* Stored and read back, an accepted spec is the same spec, byte for byte. */
static void check_round_trip(const json_t *spec)
{
	char *text = lr_spec_encode(spec);
	REQUIRE(text != NULL);
	REQUIRE(strlen(text) <= LR_SPEC_MAX_BYTES);
	json_t *again = NULL;
	lr_err err = { 0 };
	int rc = lr_spec_from_record(text, strlen(text), lr_spec_id(spec), &again, &err);
	if (rc != 0)
		fprintf(stderr, "fuzz_spec: stored form refused: %s\n", err.msg);
	REQUIRE(rc == 0);
	char *text2 = lr_spec_encode(again);
	REQUIRE(text2 != NULL && strcmp(text, text2) == 0);
	free(text2);
	json_decref(again);
	free(text);
}

static void one(int rc, json_t *spec, const lr_err *err)
{
	if (rc != 0) {
		check_refusal(rc, err);
		return;
	}
	check_limits(spec);
	check_round_trip(spec);
	json_decref(spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	json_t *spec = NULL;
	lr_err err = { 0 };

	/* As submitted, with and without an id given apart. */
	int rc = lr_spec_parse_with_id(text, size, "fuzz-id", &spec, &err);
	one(rc, spec, &err);
	spec = NULL;
	memset(&err, 0, sizeof(err));
	rc = lr_spec_parse(text, size, &spec, &err);
	one(rc, spec, &err);

	/* As read back from tasks/fuzz-id, where anyone may have written. */
	spec = NULL;
	memset(&err, 0, sizeof(err));
	rc = lr_spec_from_record(text, size, "fuzz-id", &spec, &err);
	one(rc, spec, &err);

	/* The key is no safer than the value: its id is the input's first
	 * line here (a C string, as keys reach the parser). */
	char key_id[256];
	const char *nl = memchr(text, '\n', size);
	size_t kl = nl != NULL ? (size_t)(nl - text) : size;
	if (kl >= sizeof(key_id))
		kl = sizeof(key_id) - 1;
	memcpy(key_id, text, kl);
	key_id[kl] = '\0';
	spec = NULL;
	memset(&err, 0, sizeof(err));
	rc = lr_spec_from_record(text, size, key_id, &spec, &err);
	one(rc, spec, &err);
	return 0;
}
