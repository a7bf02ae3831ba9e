/* test_submit_input.c - the pure parts of bulk submit: specs read from a
 * stream (JSON Lines or one whole spec) with their line numbers, bounded
 * memory for oversized lines, read errors as items; and how outcomes rank
 * for the exit status. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/spec_reader.h"
#include "client/submit.h"
#include "records/spec.h"
#include "test.h"

/* A reader over text (len bytes) in a memory file. */
struct mem_input {
	int fd;
	lr_spec_reader r;
};

static void open_mem(struct mem_input *m, const char *text, size_t len,
                     lr_spec_format format)
{
	m->fd = memfd_create("spec-input", MFD_CLOEXEC);
	CHECK(m->fd >= 0);
	for (size_t done = 0; done < len;) {
		ssize_t n = write(m->fd, text + done, len - done);
		CHECK(n > 0);
		done += (size_t)n;
	}
	CHECK(lseek(m->fd, 0, SEEK_SET) == 0);
	CHECK_INT(lr_spec_reader_init(&m->r, m->fd, "in.jsonl", format), ==, 0);
}

static void close_mem(struct mem_input *m)
{
	lr_spec_reader_free(&m->r);
	close(m->fd);
}

/* The next item must be text `want` from origin `origin`. */
static void expect_text(struct mem_input *m, const char *origin, const char *want)
{
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&m->r, &item), ==, 1);
	CHECK(item.error == NULL);
	CHECK_STR(item.origin, origin);
	CHECK_INT(item.len, ==, strlen(want));
	CHECK(memcmp(item.text, want, item.len) == 0);
}

/* The next item must be an error containing `want`. */
static void expect_error(struct mem_input *m, const char *origin, const char *want)
{
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&m->r, &item), ==, 1);
	CHECK(item.error != NULL);
	CHECK_STR(item.origin, origin);
	CHECK_HAS(item.error, want);
}

static void expect_end(struct mem_input *m)
{
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&m->r, &item), ==, 0);
	CHECK_INT(lr_spec_reader_next(&m->r, &item), ==, 0);
}

TEST(jsonl_gives_one_item_a_line_named_by_its_line_number)
{
	static const char in[] = "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n";
	struct mem_input m;
	open_mem(&m, in, strlen(in), LR_SPEC_LINES);
	expect_text(&m, "in.jsonl:1", "{\"a\":1}");
	expect_text(&m, "in.jsonl:2", "{\"b\":2}");
	expect_text(&m, "in.jsonl:3", "{\"c\":3}");
	expect_end(&m);
	close_mem(&m);
}

TEST(jsonl_skips_blank_lines_but_counts_them)
{
	static const char in[] = "\n{\"a\":1}\n  \t\r\n\n{\"b\":2}\n\n";
	struct mem_input m;
	open_mem(&m, in, strlen(in), LR_SPEC_LINES);
	expect_text(&m, "in.jsonl:2", "{\"a\":1}");
	expect_text(&m, "in.jsonl:5", "{\"b\":2}");
	expect_end(&m);
	close_mem(&m);
}

/* A line of NUL bytes is no blank line: it is handed on, to be refused
 * as the invalid spec it is. */
TEST(jsonl_line_of_nul_bytes_is_an_item_not_a_blank)
{
	static const char in[] = "\0\0\n{\"a\":1}\n";
	struct mem_input m;
	open_mem(&m, in, sizeof(in) - 1, LR_SPEC_LINES);
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&m.r, &item), ==, 1);
	CHECK_STR(item.origin, "in.jsonl:1");
	CHECK_INT(item.len, ==, 2);
	expect_text(&m, "in.jsonl:2", "{\"a\":1}");
	expect_end(&m);
	close_mem(&m);
}

TEST(jsonl_reads_a_last_line_without_newline_and_keeps_a_carriage_return)
{
	static const char in[] = "{\"a\":1}\r\n{\"b\":2}";
	struct mem_input m;
	open_mem(&m, in, strlen(in), LR_SPEC_LINES);
	/* JSON allows the \r as whitespace: the spec parser takes it. */
	expect_text(&m, "in.jsonl:1", "{\"a\":1}\r");
	expect_text(&m, "in.jsonl:2", "{\"b\":2}");
	expect_end(&m);
	close_mem(&m);
}

TEST(jsonl_of_nothing_or_only_blank_lines_has_no_item)
{
	struct mem_input m;
	open_mem(&m, "", 0, LR_SPEC_LINES);
	expect_end(&m);
	close_mem(&m);
	open_mem(&m, "\n\n \n", 4, LR_SPEC_LINES);
	expect_end(&m);
	close_mem(&m);
}

/* Lines longer than the reader's chunk, and lines that straddle chunks,
 * come back whole and exact. */
TEST(jsonl_lines_across_read_chunks_come_back_exact)
{
	size_t n_lines = 3000, cap = 400 * 1024;
	char *in = malloc(cap);
	size_t len = 0;
	CHECK(in != NULL);
	for (size_t i = 0; i < n_lines; i++)
		len += (size_t)snprintf(in + len, cap - len, "{\"n\":%zu,\"pad\":\"%0*d\"}\n",
		                        i, (int)(i % 97), 0);
	size_t big = 200 * 1024; /* one line over three chunks */
	memset(in + len, 'x', big);
	len += big;
	in[len++] = '\n';
	struct mem_input m;
	open_mem(&m, in, len, LR_SPEC_LINES);
	for (size_t i = 0; i < n_lines; i++) {
		char want[256], origin[32];
		snprintf(want, sizeof(want), "{\"n\":%zu,\"pad\":\"%0*d\"}", i,
		         (int)(i % 97), 0);
		snprintf(origin, sizeof(origin), "in.jsonl:%zu", i + 1);
		expect_text(&m, origin, want);
	}
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&m.r, &item), ==, 1);
	CHECK_INT(item.len, ==, big);
	CHECK(item.text[0] == 'x' && item.text[big - 1] == 'x');
	expect_end(&m);
	close_mem(&m);
	free(in);
}

/* A line over 1 MiB is reported by its size, never held whole, and the
 * lines after it are read as usual. A line of exactly 1 MiB is a spec. */
TEST(jsonl_line_over_1_mib_is_rejected_by_size_without_being_held)
{
	size_t over = (size_t)LR_SPEC_MAX_BYTES * 3 + 5;
	size_t exact = LR_SPEC_MAX_BYTES;
	size_t len = over + 1 + exact + 1 + 8;
	char *in = malloc(len);
	CHECK(in != NULL);
	memset(in, 'o', over);
	in[over] = '\n';
	memset(in + over + 1, 'e', exact);
	in[over + 1 + exact] = '\n';
	memcpy(in + over + exact + 2, "{\"z\":1}\n", 8);
	struct mem_input m;
	open_mem(&m, in, len, LR_SPEC_LINES);
	char want[80];
	snprintf(want, sizeof(want), "spec is %zu bytes, over the 1 MiB limit", over);
	expect_error(&m, "in.jsonl:1", want);
	CHECK_INT(m.r.cap, <=, LR_SPEC_MAX_BYTES);
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&m.r, &item), ==, 1);
	CHECK(item.error == NULL);
	CHECK_STR(item.origin, "in.jsonl:2");
	CHECK_INT(item.len, ==, exact);
	expect_text(&m, "in.jsonl:3", "{\"z\":1}");
	expect_end(&m);
	CHECK_INT(m.r.cap, <=, LR_SPEC_MAX_BYTES);
	close_mem(&m);
	free(in);
}

TEST(whole_stream_is_one_spec_newlines_and_all)
{
	static const char in[] = "{\n  \"a\": 1\n}\n\n";
	struct mem_input m;
	open_mem(&m, in, strlen(in), LR_SPEC_WHOLE);
	expect_text(&m, "in.jsonl", in);
	expect_end(&m);
	close_mem(&m);
	/* An empty file is one (empty, so invalid) spec, as single submit
	 * has it. */
	open_mem(&m, "", 0, LR_SPEC_WHOLE);
	expect_text(&m, "in.jsonl", "");
	expect_end(&m);
	close_mem(&m);
}

TEST(whole_stream_over_1_mib_is_rejected_by_size)
{
	size_t len = (size_t)LR_SPEC_MAX_BYTES + 1;
	char *in = malloc(len);
	CHECK(in != NULL);
	memset(in, ' ', len);
	struct mem_input m;
	open_mem(&m, in, len, LR_SPEC_WHOLE);
	expect_error(&m, "in.jsonl", "spec is 1048577 bytes, over the 1 MiB limit");
	expect_end(&m);
	close_mem(&m);
	free(in);
}

TEST(read_failure_ends_the_stream_with_an_item_naming_it)
{
	/* Reading a directory fails with EISDIR. */
	int fd = open(".", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	lr_spec_reader r;
	CHECK_INT(lr_spec_reader_init(&r, fd, "somedir", LR_SPEC_LINES), ==, 0);
	lr_submit_item item;
	CHECK_INT(lr_spec_reader_next(&r, &item), ==, 1);
	CHECK(item.error != NULL);
	CHECK_HAS(item.error, "cannot read somedir: ");
	CHECK_STR(item.origin, "somedir:1");
	CHECK_INT(lr_spec_reader_next(&r, &item), ==, 0);
	lr_spec_reader_free(&r);
	close(fd);
}

/* A line is handed on as soon as it has arrived: the reader does not wait
 * for more of a pipe that is still open. */
TEST(jsonl_from_a_pipe_gives_each_line_as_it_arrives)
{
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	lr_spec_reader r;
	CHECK_INT(lr_spec_reader_init(&r, p[0], "<stdin>", LR_SPEC_LINES), ==, 0);
	lr_submit_item item;
	static const char first[] = "{\"a\":1}\n{\"b\"", rest[] = ":2}\n";
	CHECK(write(p[1], first, strlen(first)) == (ssize_t)strlen(first));
	CHECK_INT(lr_spec_reader_next(&r, &item), ==, 1);
	CHECK_STR(item.origin, "<stdin>:1");
	CHECK(write(p[1], rest, strlen(rest)) == (ssize_t)strlen(rest));
	CHECK_INT(lr_spec_reader_next(&r, &item), ==, 1);
	CHECK_STR(item.origin, "<stdin>:2");
	CHECK_INT(item.len, ==, 7);
	close(p[1]);
	CHECK_INT(lr_spec_reader_next(&r, &item), ==, 0);
	lr_spec_reader_free(&r);
	close(p[0]);
}

/* The exit status of a bulk submit is its worst outcome: an etcd or
 * runtime error, then an invalid spec, then a taken id, then success. */
TEST(outcomes_rank_etcd_errors_then_invalid_then_taken_id_then_ok)
{
	static const int order[] = { LR_OK, LR_EEXIST, LR_EINVAL, LR_EUNAVAILABLE };
	size_t n = sizeof(order) / sizeof(order[0]);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			int want = order[i > j ? i : j];
			CHECK_INT(lr_submit_worse(order[i], order[j]), ==, want);
		}
	int runtime[] = { LR_ETIMEDOUT, LR_EAMBIGUOUS, LR_EPERM, LR_ECANCELLED,
		          LR_ETOOLARGE, LR_ENOMEM, LR_ESYS };
	for (size_t i = 0; i < sizeof(runtime) / sizeof(runtime[0]); i++) {
		CHECK_INT(lr_submit_worse(LR_EINVAL, runtime[i]), ==, runtime[i]);
		CHECK_INT(lr_submit_worse(runtime[i], LR_EEXIST), ==, runtime[i]);
	}
	/* Among errors of one rank the first one met stays. */
	CHECK_INT(lr_submit_worse(LR_ETIMEDOUT, LR_EPERM), ==, LR_ETIMEDOUT);
	CHECK_INT(lr_submit_worse(LR_EPERM, LR_ETIMEDOUT), ==, LR_EPERM);
}

/* Spec "b" of n steps whose runs are runs[k] bytes of 'x'. New string. */
static char *steps_of_runs(const size_t *runs, int n)
{
	size_t size = 64;
	for (int k = 0; k < n; k++)
		size += runs[k] + 48;
	char *s = malloc(size);
	CHECK(s != NULL);
	size_t at = (size_t)snprintf(s, size, "{\"id\":\"b\",\"steps\":[");
	for (int k = 0; k < n; k++) {
		at += (size_t)snprintf(s + at, size - at, "%s{\"name\":\"s%d\",\"run\":\"",
		                       k > 0 ? "," : "", k);
		memset(s + at, 'x', runs[k]);
		at += runs[k];
		at += (size_t)snprintf(s + at, size - at, "\"}");
	}
	snprintf(s + at, size - at, "]}");
	return s;
}

/* A start time added to a valid spec (submit --in) is checked as stored:
 * one past the year 9999, or a spec the addition takes over 1 MiB, is an
 * invalid spec, and nothing is made to store. */
TEST(a_start_time_added_to_a_spec_is_validated_with_it)
{
	static const char spec[] = "{\"id\":\"a\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}";
	char id[LR_ID_SIZE];
	char *value = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_submit_prepare_at(spec, strlen(spec), NULL, 1795000000000LL, id, &value,
	                              NULL, &err), &err);
	CHECK_STR(id, "a");
	CHECK_HAS(value, "\"not_before\":\"2026-11-18T");
	free(value);
	value = NULL;
	int rc = lr_submit_prepare_at(spec, strlen(spec), NULL, 300000000000000LL, id, &value,
	                              NULL, &err);
	CHECK_INT(rc, ==, LR_EINVAL);
	CHECK(value == NULL);
	CHECK_HAS(err.msg, "not_before");
	/* Its stored form 10 bytes under 1 MiB, over it with the start time:
	 * the stored form is the run strings' lengths plus a fixed part (in
	 * STEPS steps, a run having a limit of its own). */
	enum { STEPS = 11 };
	size_t runs[STEPS];
	for (int k = 0; k < STEPS; k++)
		runs[k] = 1;
	char *small = steps_of_runs(runs, STEPS);
	err = (lr_err){ 0 };
	CHECK_OK(lr_submit_prepare_at(small, strlen(small), NULL, 0, id, &value, NULL, &err), &err);
	free(small);
	size_t left = LR_SPEC_MAX_BYTES - 10 - (strlen(value) - STEPS);
	free(value);
	value = NULL;
	for (int k = 0; k < STEPS; k++) {
		runs[k] = left < 100000 ? left : 100000;
		left -= runs[k];
	}
	CHECK_INT(left, ==, 0);
	char *big = steps_of_runs(runs, STEPS);
	CHECK_OK(lr_submit_prepare_at(big, strlen(big), NULL, 0, id, &value, NULL, &err), &err);
	CHECK_INT(strlen(value), ==, LR_SPEC_MAX_BYTES - 10);
	free(value);
	value = NULL;
	rc = lr_submit_prepare_at(big, strlen(big), NULL, 1795000000000LL, id, &value, NULL, &err);
	CHECK_INT(rc, ==, LR_EINVAL);
	CHECK(value == NULL);
	free(big);
}

TEST_LIST(
	TEST_CASE(a_start_time_added_to_a_spec_is_validated_with_it),
	TEST_CASE(jsonl_gives_one_item_a_line_named_by_its_line_number),
	TEST_CASE(jsonl_skips_blank_lines_but_counts_them),
	TEST_CASE(jsonl_line_of_nul_bytes_is_an_item_not_a_blank),
	TEST_CASE(jsonl_reads_a_last_line_without_newline_and_keeps_a_carriage_return),
	TEST_CASE(jsonl_of_nothing_or_only_blank_lines_has_no_item),
	TEST_CASE(jsonl_lines_across_read_chunks_come_back_exact),
	TEST_CASE(jsonl_line_over_1_mib_is_rejected_by_size_without_being_held),
	TEST_CASE(whole_stream_is_one_spec_newlines_and_all),
	TEST_CASE(whole_stream_over_1_mib_is_rejected_by_size),
	TEST_CASE(read_failure_ends_the_stream_with_an_item_naming_it),
	TEST_CASE(jsonl_from_a_pipe_gives_each_line_as_it_arrives),
	TEST_CASE(outcomes_rank_etcd_errors_then_invalid_then_taken_id_then_ok),
);

TEST_MAIN(NULL, NULL)
