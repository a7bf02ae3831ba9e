/* fuzz_records.c - libFuzzer target: every record a runner or the command
 * reads back from etcd (claims/, checkpoints/, done/, runners/, cancel/).
 * Each input is given to every decoder.
 *
 * Besides "no crash, no leak, no undefined behaviour" it checks what callers
 * rely on: a refused record has an LR_EINVAL message that names the record
 * and is valid UTF-8; an accepted one holds values within the documented
 * ranges, encodes again, and decodes from that encoding to the same
 * values. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "records/record.h"
#include "records/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(cond)                                                         \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "fuzz_records: %s:%d: %s\n", __FILE__, \
			        __LINE__, #cond);                             \
			abort();                                              \
		}                                                             \
	} while (0)

static void check_refusal(int rc, const lr_err *err, const char *record)
{
	REQUIRE(rc == LR_EINVAL || rc == LR_ENOMEM);
	REQUIRE(err->code == rc);
	if (rc == LR_EINVAL)
		REQUIRE(strncmp(err->msg, record, strlen(record)) == 0);
	json_t *s = json_string(err->msg);
	REQUIRE(s != NULL); /* valid UTF-8 */
	json_decref(s);
}

static bool str_ok(const char *s, size_t size)
{
	return strnlen(s, size) < size;
}

static void claim(const char *v, size_t n)
{
	lr_claim_rec a, b;
	lr_err err = { 0 };
	int rc = lr_claim_decode(v, n, &a, &err);
	if (rc != 0) {
		check_refusal(rc, &err, "claim record");
		return;
	}
	REQUIRE(a.lease > 0 && a.runner[0] != '\0');
	REQUIRE(str_ok(a.runner, sizeof(a.runner)) &&
	        str_ok(a.claimed_at, sizeof(a.claimed_at)));
	char *text = lr_claim_encode(&a);
	REQUIRE(text != NULL);
	REQUIRE(lr_claim_decode(text, strlen(text), &b, &err) == 0);
	REQUIRE(a.lease == b.lease && strcmp(a.runner, b.runner) == 0 &&
	        strcmp(a.claimed_at, b.claimed_at) == 0);
	free(text);
}

static void checkpoint(const char *v, size_t n)
{
	lr_checkpoint_rec a, b;
	lr_err err = { 0 };
	int rc = lr_checkpoint_decode(v, n, &a, &err);
	if (rc != 0) {
		check_refusal(rc, &err, "checkpoint record");
		return;
	}
	REQUIRE(a.next_step >= 0 && a.next_step <= LR_MAX_STEPS);
	REQUIRE(a.attempt >= 0 && a.attempt <= INT32_MAX);
	REQUIRE(a.fence >= 0 && a.state != NULL && a.runner[0] != '\0');
	char *text = lr_checkpoint_encode(&a);
	REQUIRE(text != NULL);
	REQUIRE(lr_checkpoint_decode(text, strlen(text), &b, &err) == 0);
	REQUIRE(a.next_step == b.next_step && a.attempt == b.attempt &&
	        a.fence == b.fence && strcmp(a.runner, b.runner) == 0 &&
	        strcmp(a.updated_at, b.updated_at) == 0 &&
	        json_equal(a.state, b.state));
	free(text);
	lr_checkpoint_rec_clear(&a);
	lr_checkpoint_rec_clear(&b);
}

static void done(const char *v, size_t n)
{
	lr_done_rec a, b;
	lr_err err = { 0 };
	int rc = lr_done_decode(v, n, &a, &err);
	if (rc != 0) {
		check_refusal(rc, &err, "done record");
		return;
	}
	REQUIRE(strcmp(a.status, "succeeded") == 0 || strcmp(a.status, "failed") == 0 ||
	        strcmp(a.status, "cancelled") == 0);
	REQUIRE(a.attempts >= 0 && a.attempts <= INT32_MAX && a.state != NULL);
	char *text = lr_done_encode(&a);
	REQUIRE(text != NULL);
	REQUIRE(lr_done_decode(text, strlen(text), &b, &err) == 0);
	REQUIRE(strcmp(a.status, b.status) == 0 && a.attempts == b.attempts &&
	        strcmp(a.finished_at, b.finished_at) == 0 &&
	        json_equal(a.state, b.state));
	REQUIRE((a.error == NULL) == (b.error == NULL));
	REQUIRE(a.error == NULL || strcmp(a.error, b.error) == 0);
	free(text);
	lr_done_rec_clear(&a);
	lr_done_rec_clear(&b);
}

static void runner(const char *v, size_t n)
{
	lr_runner_rec a, b;
	lr_err err = { 0 };
	int rc = lr_runner_decode(v, n, &a, &err);
	if (rc != 0) {
		check_refusal(rc, &err, "runner record");
		return;
	}
	REQUIRE(a.pid > 0 && a.concurrency > 0 && a.ttl > 0);
	char *text = lr_runner_encode(&a);
	REQUIRE(text != NULL);
	REQUIRE(lr_runner_decode(text, strlen(text), &b, &err) == 0);
	REQUIRE(a.pid == b.pid && a.concurrency == b.concurrency && a.ttl == b.ttl &&
	        strcmp(a.host, b.host) == 0 && strcmp(a.started_at, b.started_at) == 0 &&
	        strcmp(a.version, b.version) == 0);
	free(text);
}

static void cancel(const char *v, size_t n)
{
	lr_cancel_rec a, b;
	lr_err err = { 0 };
	int rc = lr_cancel_decode(v, n, &a, &err);
	if (rc != 0) {
		check_refusal(rc, &err, "cancel record");
		return;
	}
	char *text = lr_cancel_encode(a.requested_at);
	REQUIRE(text != NULL);
	REQUIRE(lr_cancel_decode(text, strlen(text), &b, &err) == 0);
	REQUIRE(strcmp(a.requested_at, b.requested_at) == 0);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *v = (const char *)data;
	claim(v, size);
	checkpoint(v, size);
	done(v, size);
	runner(v, size);
	cancel(v, size);
	return 0;
}
