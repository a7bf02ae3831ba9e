/* test_submit_many.c - submitting many tasks at once against a real etcd:
 * `leaserun submit` with several files and JSON Lines (ids in input order,
 * each spec its own outcome, the worst one as exit status, bounded memory,
 * a killed submit run again, a prefix it cannot use refused) and
 * lr_submit_many in the C API. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli_run.h"
#include "records/spec.h"
#include "test.h"

/* A spec line whose id is <prefix><n> (6 digits) and whose env pads it to
 * about `size` bytes; no id when prefix is NULL. */
static void spec_line(char *buf, size_t cap, const char *prefix, int n,
                      size_t size)
{
	char id[64] = "";
	if (prefix != NULL)
		snprintf(id, sizeof(id), "\"id\":\"%s%06d\",", prefix, n);
	int len = snprintf(buf, cap, "{%s\"steps\":[{\"name\":\"s\",\"run\":"
	                   "\"echo %d\"}],\"env\":{\"PAD\":\"", id, n);
	size_t pad = size > (size_t)len + 4 ? size - (size_t)len - 4 : 1;
	CHECK((size_t)len + pad + 4 < cap);
	memset(buf + len, 'p', pad);
	snprintf(buf + len + pad, cap - (size_t)len - pad, "\"}}");
}

/* A JSON Lines file in the temporary directory with n specs (ids
 * <prefix>000000 ...); its path. */
static const char *jsonl_file(const char *name, const char *prefix, int n,
                              size_t size)
{
	static char path[128];
	char line[4096];
	snprintf(path, sizeof(path), "%s/%s", cli_tmpdir, name);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	for (int i = 0; i < n; i++) {
		spec_line(line, sizeof(line), prefix, i, size);
		fprintf(f, "%s\n", line);
	}
	CHECK(fclose(f) == 0);
	return path;
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s != '\0'; s++)
		n += *s == '\n';
	return n;
}

/* Line k (0-based) of s, into buf. */
static const char *line_of(const char *s, int k, char *buf, size_t cap)
{
	for (; k > 0 && s != NULL; k--) {
		s = strchr(s, '\n');
		if (s != NULL)
			s++;
	}
	CHECK(s != NULL);
	size_t n = strcspn(s, "\n");
	CHECK(n < cap);
	memcpy(buf, s, n);
	buf[n] = '\0';
	return buf;
}

/* The stored value of task id must be the canonical form of spec. */
static void check_stored(lr_client *c, const char *id, const char *spec)
{
	json_t *norm = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_spec_parse(spec, strlen(spec), &norm, &err), &err);
	char *want = lr_spec_encode(norm);
	char *got = fixture_get(c, LR_K_TASKS, id);
	CHECK_STR(got, want);
	free(got);
	free(want);
	json_decref(norm);
}

#define SPEC_X "{\"id\":\"%s\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}"
#define SPEC_Y "{\"id\":\"%s\",\"steps\":[{\"name\":\"y\",\"run\":\"false\"}]}"

/* ---- the command ---------------------------------------------------------- */

TEST(submit_of_several_files_prints_each_id_in_input_order)
{
	lr_client *c = fixture_client("many_files");
	cli_use_client(c);
	char a[128], b[128], z[128];
	snprintf(a, sizeof(a), "%s", cli_write_file("a.json", "{\"id\":\"a\",\"steps\":"
	         "[{\"name\":\"x\",\"run\":\"true\"}]}"));
	snprintf(b, sizeof(b), "%s", cli_write_file("b.json", "{\"steps\":"
	         "[{\"name\":\"x\",\"run\":\"true\"}]}\n"));
	snprintf(z, sizeof(z), "%s", cli_write_file("z.json", "{\"id\":\"z\",\"steps\":"
	         "[{\"name\":\"x\",\"run\":\"true\"}]}"));
	proc_result r = RUN("submit", z, a, b, a);
	CHECK_INT(r.status, ==, 0);
	CHECK_INT(count_lines(r.out), ==, 4);
	char line[256];
	CHECK_STR(line_of(r.out, 0, line, sizeof(line)), "z");
	CHECK_STR(line_of(r.out, 1, line, sizeof(line)), "a");
	CHECK(strlen(line_of(r.out, 2, line, sizeof(line))) > 10); /* generated */
	CHECK_STR(line_of(r.out, 3, line, sizeof(line)), "a");
	CHECK_STR(r.err, "");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 3);
	lr_client_close(c);
}

TEST(submit_jsonl_stores_the_valid_lines_and_names_each_rejected_one)
{
	lr_client *c = fixture_client("many_mixed");
	cli_use_client(c);
	const char input[] =
	    "{\"id\":\"m1\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}\n"
	    "{\"id\":\"m2\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}],\"retries\":3}\n"
	    "{\"id\":\"m3\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}\n"
	    "{\"id\":\"m4\",\"steps\":[{\"name\":\"x\" \"run\":\"true\"}]}\n"
	    "\n"
	    "{\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}\n"
	    "{\"id\":\"m/7\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}\n"
	    "{\"id\":\"m8\",\"steps\":[{\"name\":\"x\",\"run\":5}]}";
	proc_result r = RUN_STDIN(input, "submit", "--jsonl");
	CHECK_INT(r.status, ==, 2);
	char line[256];
	CHECK_INT(count_lines(r.out), ==, 3);
	CHECK_STR(line_of(r.out, 0, line, sizeof(line)), "m1");
	CHECK_STR(line_of(r.out, 1, line, sizeof(line)), "m3");
	CHECK_HAS(r.err, "leaserun: <stdin>:2: invalid spec: unknown field \"retries\"");
	CHECK_HAS(r.err, "leaserun: <stdin>:4: invalid spec: line 1, column");
	CHECK_HAS(r.err, "leaserun: <stdin>:7: invalid spec: id");
	CHECK_HAS(r.err, "leaserun: <stdin>:8: invalid spec: steps[0].run");
	CHECK_INT(count_lines(r.err), ==, 4);
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 3);
	CHECK(fixture_get(c, LR_K_TASKS, "m2") == NULL);
	lr_client_close(c);
}

/* The first spec of an id in the input wins, as if the later ones were
 * submitted afterwards, however many creates are in flight. */
TEST(submit_jsonl_duplicates_behave_like_resubmits_in_input_order)
{
	lr_client *c = fixture_client("many_dups");
	cli_use_client(c);
	size_t cap = 200 * 128;
	char *input = malloc(cap), x[128], y[128];
	size_t len = 0;
	CHECK(input != NULL);
	snprintf(x, sizeof(x), SPEC_X, "dup");
	snprintf(y, sizeof(y), SPEC_Y, "dup");
	for (int i = 0; i < 120; i++) {
		char other[128];
		snprintf(other, sizeof(other), SPEC_X, "other");
		const char *spec = i % 3 == 0 ? x : i % 3 == 1 ? y : other;
		len += (size_t)snprintf(input + len, cap - len, "%s\n", spec);
	}
	proc_result r = RUN_STDIN(input, "submit", "--jsonl", "--in-flight", "32");
	CHECK_INT(r.status, ==, 3);
	CHECK_INT(count_lines(r.out), ==, 80);
	char line[256];
	for (int k = 0; k < 80; k++)
		CHECK_STR(line_of(r.out, k, line, sizeof(line)), k % 2 == 0 ? "dup" : "other");
	CHECK_INT(count_lines(r.err), ==, 40);
	CHECK_HAS(r.err, "leaserun: <stdin>:2: task dup already exists with a different spec");
	proc_result_free(&r);
	check_stored(c, "dup", x);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 2);
	free(input);
	lr_client_close(c);
}

TEST(submit_exit_status_is_the_worst_outcome)
{
	lr_client *c = fixture_client("many_worst");
	cli_use_client(c);
	char x[128], y[128], input[512];
	snprintf(x, sizeof(x), SPEC_X, "w");
	snprintf(y, sizeof(y), SPEC_Y, "w");
	snprintf(input, sizeof(input), "%s\n%s\n", x, x);
	proc_result r = RUN_STDIN(input, "submit", "--jsonl");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	/* A taken id alone: 3. */
	snprintf(input, sizeof(input), "%s\n%s\n", x, y);
	r = RUN_STDIN(input, "submit", "--jsonl");
	CHECK_INT(r.status, ==, 3);
	CHECK_STR(r.out, "w\n");
	proc_result_free(&r);
	/* An invalid spec beats a taken id, whichever comes first. */
	snprintf(input, sizeof(input), "%s\n{}\n", y);
	r = RUN_STDIN(input, "submit", "--jsonl");
	CHECK_INT(r.status, ==, 2);
	proc_result_free(&r);
	snprintf(input, sizeof(input), "{}\n%s\n", y);
	r = RUN_STDIN(input, "submit", "--jsonl");
	CHECK_INT(r.status, ==, 2);
	proc_result_free(&r);
	/* An unreadable file among others is an invalid input: 2, and the
	 * readable ones are stored. */
	char missing[128], ok[128];
	snprintf(missing, sizeof(missing), "%s/missing.json", cli_tmpdir);
	snprintf(x, sizeof(x), SPEC_X, "w2");
	snprintf(ok, sizeof(ok), "%s", cli_write_file("w2.json", x));
	r = RUN("submit", missing, ok);
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "cannot read");
	CHECK_HAS(r.err, missing);
	CHECK_STR(r.out, "w2\n");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 2);
	lr_client_close(c);
}

TEST(submit_refuses_an_id_for_several_specs_and_a_bad_in_flight)
{
	lr_client *c = fixture_client("many_usage");
	cli_use_client(c);
	char x[128];
	snprintf(x, sizeof(x), SPEC_X, "u");
	const char *path = cli_write_file("u.json", x);
	proc_result r = RUN_STDIN(x, "submit", "--jsonl", "--id", "given");
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "--id");
	proc_result_free(&r);
	r = RUN("submit", path, path, "--id", "given");
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "--id");
	proc_result_free(&r);
	r = RUN("submit", path, path, "--in-flight", "0");
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "--in-flight");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	/* --in-flight 1 sends one create at a time, in order. */
	r = RUN("submit", path, path, "--in-flight", "1");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "u\nu\n");
	proc_result_free(&r);
	lr_client_close(c);
}

/* A spec with "after" is a barrier both ways: it waits for every create
 * before it and nothing after it is sent until it is done. So a name that
 * comes later in the input is never found (exit 4 for that spec alone),
 * and one that came earlier always is, however many creates are in
 * flight. Many rounds in one input, as each is a race without it. */
TEST(submit_after_finds_earlier_specs_and_never_later_ones)
{
	lr_client *c = fixture_client("many_after");
	cli_use_client(c);
	enum { ROUNDS = 60 };
	size_t cap = ROUNDS * 4 * 160;
	char *input = malloc(cap);
	size_t len = 0;
	CHECK(input != NULL);
	for (int i = 0; i < ROUNDS; i++)
		len += (size_t)snprintf(input + len, cap - len,
		    "{\"id\":\"fc%d\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],"
		    "\"after\":[\"fd%d\"]}\n"
		    "{\"id\":\"fd%d\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}\n"
		    "{\"id\":\"bd%d\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}\n"
		    "{\"id\":\"bc%d\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],"
		    "\"after\":[\"bd%d\"]}\n", i, i, i, i, i, i);
	CHECK(len < cap);
	proc_result r = RUN_STDIN(input, "submit", "--jsonl", "--in-flight", "32");
	CHECK_INT(r.status, ==, 4);
	CHECK_INT(count_lines(r.out), ==, 3 * ROUNDS);
	CHECK_INT(count_lines(r.err), ==, ROUNDS);
	char line[256], want[256];
	for (int i = 0; i < ROUNDS; i++) {
		snprintf(want, sizeof(want), "fd%d", i);
		CHECK_STR(line_of(r.out, 3 * i, line, sizeof(line)), want);
		snprintf(want, sizeof(want), "bc%d", i);
		CHECK_STR(line_of(r.out, 3 * i + 2, line, sizeof(line)), want);
		snprintf(want, sizeof(want), "leaserun: <stdin>:%d: submit fc%d: "
		         "after: no such task fd%d\n", 4 * i + 1, i, i);
		CHECK_HAS(r.err, want);
	}
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 3 * ROUNDS);
	CHECK(fixture_get(c, LR_K_TASKS, "fc0") == NULL);
	free(input);
	lr_client_close(c);
}

/* A prefix with a control character or a blank at either end, from the
 * flag or the environment, is refused before anything is sent: exit 2,
 * the prefix shown escaped, and the store's revision unchanged. */
TEST(submit_refuses_a_prefix_with_control_characters_or_outer_blanks)
{
	lr_client *c = fixture_client("many_bad_prefix");
	cli_use_client(c);
	char x[128], bad[320];
	snprintf(x, sizeof(x), SPEC_X, "bp");
	const char *path = cli_write_file("bp.json", x);
	int64_t rev = fixture_revision(c);

	snprintf(bad, sizeof(bad), "%s ", lr_client_prefix(c));
	proc_result r = RUN("submit", "--prefix", bad, path, path);
	CHECK_INT(r.status, ==, 2);
	CHECK_STR(r.out, "");
	CHECK_HAS(r.err, "must not start or end with a blank");
	proc_result_free(&r);

	snprintf(cli_env_prefix, sizeof(cli_env_prefix), "%s\n", lr_client_prefix(c));
	r = RUN_STDIN(x, "submit", "--jsonl");
	CHECK_INT(r.status, ==, 2);
	CHECK_STR(r.out, "");
	CHECK_HAS(r.err, "\\x0a\": must not contain control characters");
	proc_result_free(&r);
	cli_use_client(c);

	CHECK_INT(fixture_revision(c), ==, rev);
	lr_client_close(c);
}

TEST(submit_jsonl_rejects_a_line_over_1_mib_and_stores_the_rest)
{
	lr_client *c = fixture_client("many_huge");
	cli_use_client(c);
	char x[128], z[128];
	snprintf(x, sizeof(x), SPEC_X, "before");
	snprintf(z, sizeof(z), SPEC_X, "after");
	size_t big = (size_t)LR_SPEC_MAX_BYTES + LR_SPEC_MAX_BYTES / 2;
	char *input = malloc(big + 512);
	CHECK(input != NULL);
	int n = snprintf(input, 512, "%s\n{\"steps\":[{\"name\":\"a\",\"run\":\"", x);
	memset(input + n, 'h', big);
	snprintf(input + n + big, 512, "\"}]}\n%s\n", z);
	const char *path = cli_write_file("huge.jsonl", input);
	proc_result r = RUN("submit", "--jsonl", path);
	CHECK_INT(r.status, ==, 2);
	CHECK_STR(r.out, "before\nafter\n");
	CHECK_HAS(r.err, "huge.jsonl:2: invalid spec: spec is");
	CHECK_HAS(r.err, "over the 1 MiB limit");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 2);
	free(input);
	lr_client_close(c);
}

/* AddressSanitizer keeps freed memory in a quarantine of up to 256 MiB,
 * which would hide what the input costs: the runs measured go without it.
 * (Without the sanitizer the variable means nothing.) The previous value
 * goes to saved, "" when it was unset. */
static void without_asan_quarantine(char *saved, size_t cap)
{
	const char *was = getenv("ASAN_OPTIONS");
	char opts[1200];
	snprintf(saved, cap, "%s", was != NULL ? was : "");
	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0:"
	         "thread_local_quarantine_size_kb=0", saved, saved[0] ? ":" : "");
	CHECK(setenv("ASAN_OPTIONS", opts, 1) == 0);
}

/* 25,000 lines of 800 bytes (20 MB) take no more memory than 1,000: the
 * input is streamed, never read whole. */
TEST(submit_of_20_mb_of_lines_stores_them_all_in_bounded_memory)
{
	lr_client *c = fixture_client("many_100k");
	cli_use_client(c);
	char asan_options[1024];
	without_asan_quarantine(asan_options, sizeof(asan_options));
	const char *small = jsonl_file("small.jsonl", "s", 1000, 800);
	const char *small_args[] = { "submit", "--jsonl", small, NULL };
	proc_result r = cli_run_long(small_args, 120000);
	CHECK_INT(r.status, ==, 0);
	long small_kb = r.max_rss_kb;
	proc_result_free(&r);

	const char *big = jsonl_file("big.jsonl", "b", 25000, 800);
	const char *big_args[] = { "submit", "--jsonl", big, NULL };
	r = cli_run_long(big_args, 400000);
	CHECK_INT(r.status, ==, 0);
	CHECK_INT(count_lines(r.out), ==, 25000);
	char line[64];
	CHECK_STR(line_of(r.out, 0, line, sizeof(line)), "b000000");
	CHECK_STR(line_of(r.out, 24999, line, sizeof(line)), "b024999");
	fprintf(stderr, "   peak RSS: %ld KiB for 1,000 lines, %ld KiB for 25,000 "
	        "lines (%d ms)\n", small_kb, r.max_rss_kb, r.took_ms);
	CHECK_INT(r.max_rss_kb, <, small_kb + 8 * 1024);
	proc_result_free(&r);
	if (asan_options[0] != '\0')
		setenv("ASAN_OPTIONS", asan_options, 1);
	else
		unsetenv("ASAN_OPTIONS");
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 26000);
	lr_client_close(c);
}

/* A submit killed midway leaves some tasks stored; the same submit run
 * again stores the rest and accepts the stored ones as identical. */
TEST(submit_killed_midway_and_run_again_stores_every_task_once)
{
	lr_client *c = fixture_client("many_killed");
	cli_use_client(c);
	int n = 20000;
	const char *path = jsonl_file("killed.jsonl", "k", n, 150);
	char log[160];
	snprintf(log, sizeof(log), "%s/killed.log", cli_tmpdir);
	const char *args[] = { "submit", "--jsonl", path, NULL };
	proc_bg p;
	cli_start(&p, log, args);
	int64_t stored = 0, deadline = lr_mono_ms() + 60000;
	while (stored < 500 && lr_mono_ms() < deadline && proc_alive(&p)) {
		lr_sleep_ms(5);
		stored = fixture_count(c, LR_K_TASKS);
	}
	CHECK_INT(proc_stop(&p, SIGKILL, 5000), ==, 128 + SIGKILL);
	stored = fixture_count(c, LR_K_TASKS);
	fprintf(stderr, "   killed with %lld of %d tasks stored\n", (long long)stored, n);
	CHECK_INT(stored, >=, 500);
	CHECK_INT(stored, <, n);

	proc_result r = cli_run_long(args, 300000);
	CHECK_INT(r.status, ==, 0);
	CHECK_INT(count_lines(r.out), ==, n);
	CHECK_STR(r.err, "");
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, n);
	char id[32], line[256], spec[4096];
	for (int i = 0; i < n; i += 97) {
		snprintf(id, sizeof(id), "k%06d", i);
		CHECK_STR(line_of(r.out, i, line, sizeof(line)), id);
		spec_line(spec, sizeof(spec), "k", i, 150);
		check_stored(c, id, spec);
	}
	proc_result_free(&r);
	lr_client_close(c);
}

/* ---- the C API ----------------------------------------------------------- */

/* An input from an array of items, and the outcomes it got. */
struct api_run {
	const lr_submit_item *items;
	size_t n, at;
	size_t stop_at;    /* return stop_code when at reaches it (0: never) */
	int stop_code;
	lr_submit_outcome got[64];
	char ids[64][LR_ID_SIZE];
	char origins[64][64];
	size_t n_got;
};

static int api_input(void *user, lr_submit_item *item, lr_err *err)
{
	struct api_run *a = user;
	if (a->stop_at != 0 && a->at == a->stop_at) {
		snprintf(err->msg, sizeof(err->msg), "the input broke");
		return a->stop_code;
	}
	if (a->at == a->n)
		return 0;
	*item = a->items[a->at++];
	return 1;
}

static void api_outcome(void *user, const lr_submit_outcome *o)
{
	struct api_run *a = user;
	CHECK(a->n_got < 64);
	a->got[a->n_got] = *o;
	snprintf(a->ids[a->n_got], LR_ID_SIZE, "%s", o->id);
	snprintf(a->origins[a->n_got], 64, "%s", o->origin);
	a->got[a->n_got].msg = NULL; /* borrowed: gone after the call */
	a->n_got++;
}

#define ITEM(text, origin) { text, sizeof(text) - 1, origin, NULL }

TEST(submit_many_reports_each_item_in_input_order_with_its_own_outcome)
{
	lr_client *c = fixture_client("api_many");
	static const lr_submit_item items[] = {
		ITEM("{\"id\":\"p\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}", "one"),
		ITEM("{\"id\":\"q\",\"steps\":[]}", "two"),
		{ NULL, 0, "three", "cannot read three: gone" },
		ITEM("{\"id\":\"p\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}", NULL),
		ITEM("{\"id\":\"p\",\"steps\":[{\"name\":\"y\",\"run\":\"true\"}]}", "five"),
		ITEM("{\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}", "six"),
	};
	struct api_run a = { .items = items, .n = 6 };
	lr_submit_summary sum;
	lr_submit_opts opts = { .in_flight = 4 };
	lr_err err = { 0 };
	CHECK_OK(lr_submit_many(c, &opts, api_input, api_outcome, &a, &sum, &err), &err);
	CHECK_INT(a.n_got, ==, 6);
	static const int codes[] = { LR_OK, LR_EINVAL, LR_EINVAL, LR_OK, LR_EEXIST, LR_OK };
	for (size_t i = 0; i < 6; i++) {
		CHECK_INT(a.got[i].index, ==, i);
		CHECK_INT(a.got[i].code, ==, codes[i]);
	}
	CHECK_STR(a.origins[0], "one");
	CHECK_STR(a.origins[3], "");
	CHECK_STR(a.ids[0], "p");
	CHECK_INT(a.got[0].created, ==, 1);
	CHECK_STR(a.ids[1], "");
	CHECK_STR(a.ids[3], "p");
	CHECK_INT(a.got[3].created, ==, 0);
	CHECK_STR(a.ids[4], "p");
	CHECK(strlen(a.ids[5]) > 10);
	CHECK_INT(a.got[5].created, ==, 1);
	CHECK_INT(sum.items, ==, 6);
	CHECK_INT(sum.created, ==, 2);
	CHECK_INT(sum.identical, ==, 1);
	CHECK_INT(sum.invalid, ==, 2);
	CHECK_INT(sum.conflicting, ==, 1);
	CHECK_INT(sum.failed, ==, 0);
	CHECK_INT(sum.worst, ==, LR_EINVAL);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 2);
	lr_client_close(c);
}

TEST(submit_many_stops_when_its_input_fails_and_returns_the_input_code)
{
	lr_client *c = fixture_client("api_input_fails");
	static const lr_submit_item items[] = {
		ITEM("{\"id\":\"i1\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}", "1"),
		ITEM("{\"id\":\"i2\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}", "2"),
		ITEM("{\"id\":\"i3\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}", "3"),
	};
	struct api_run a = { .items = items, .n = 3, .stop_at = 2,
		             .stop_code = LR_ESYS };
	lr_submit_summary sum;
	lr_err err = { 0 };
	CHECK_INT(lr_submit_many(c, NULL, api_input, api_outcome, &a, &sum, &err),
	          ==, LR_ESYS);
	CHECK_HAS(err.msg, "the input broke");
	CHECK_INT(a.n_got, ==, 2);
	CHECK_INT(sum.created, ==, 2);
	CHECK_INT(sum.worst, ==, LR_ESYS);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 2);
	lr_client_close(c);
}

TEST(submit_many_refuses_bad_options_before_reading_anything)
{
	lr_client *c = fixture_client("api_opts");
	struct api_run a = { .items = NULL, .n = 0 };
	lr_submit_opts opts = { .in_flight = 257 };
	lr_submit_summary sum;
	lr_err err = { 0 };
	CHECK_INT(lr_submit_many(c, &opts, api_input, api_outcome, &a, &sum, &err),
	          ==, LR_EINVAL);
	CHECK_HAS(err.msg, "in_flight");
	opts.in_flight = -1;
	CHECK_INT(lr_submit_many(c, &opts, api_input, api_outcome, &a, &sum, &err),
	          ==, LR_EINVAL);
	CHECK_INT(lr_submit_many(c, NULL, NULL, api_outcome, &a, &sum, &err),
	          ==, LR_EINVAL);
	CHECK_INT(a.at, ==, 0);
	CHECK_INT(a.n_got, ==, 0);
	CHECK_INT(sum.worst, ==, LR_EINVAL);
	lr_client_close(c);
}

/* An input that never ends, of valid specs with distinct ids. */
struct endless {
	uint64_t taken, outcomes, failed, cancelled;
	char text[256];
};

static int endless_input(void *user, lr_submit_item *item, lr_err *err)
{
	struct endless *e = user;
	(void)err;
	int n = snprintf(e->text, sizeof(e->text),
	             "{\"id\":\"e%llu\",\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}",
	             (unsigned long long)e->taken++);
	item->text = e->text;
	item->len = (size_t)n;
	return 1;
}

static void endless_outcome(void *user, const lr_submit_outcome *o)
{
	struct endless *e = user;
	e->outcomes++;
	if (o->code == LR_ECANCELLED)
		e->cancelled++;
	else if (o->code != LR_OK)
		e->failed++;
}

/* With etcd frozen, the first creates time out; the submit then stops
 * instead of waiting out a timeout for every spec of the input. */
TEST(submit_many_stops_at_the_first_etcd_error)
{
	lr_client_opts o = { .endpoints = etcdh_endpoints(cluster),
		             .prefix = test_prefix("api_frozen"),
		             .call_timeout_s = 1 };
	lr_client *c = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	struct endless e = { 0 };
	lr_submit_summary sum;
	lr_submit_opts opts = { .in_flight = 8 };
	CHECK(etcdh_pause(cluster, 0) == 0);
	int64_t t0 = lr_mono_ms();
	int rc = lr_submit_many(c, &opts, endless_input, endless_outcome, &e, &sum, &err);
	int64_t took = lr_mono_ms() - t0;
	CHECK(etcdh_resume(cluster, 0) == 0);
	fprintf(stderr, "   stopped after %lld ms: %llu taken, %llu failed, "
	        "%llu not sent: %s\n", (long long)took, (unsigned long long)e.taken,
	        (unsigned long long)e.failed, (unsigned long long)e.cancelled, err.msg);
	CHECK(rc != 0 && rc != LR_EINVAL && rc != LR_EEXIST);
	CHECK_INT(err.code, ==, rc);
	CHECK(took < 10000);
	CHECK_INT(e.outcomes, ==, e.taken);
	CHECK_INT(sum.items, ==, e.taken);
	CHECK_INT(sum.failed, ==, e.taken);
	CHECK_INT(e.failed, >=, 1);
	CHECK_INT(e.failed + e.cancelled, ==, e.taken);
	CHECK_INT(sum.worst, ==, rc);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(submit_of_several_files_prints_each_id_in_input_order),
	TEST_CASE(submit_jsonl_stores_the_valid_lines_and_names_each_rejected_one),
	TEST_CASE(submit_jsonl_duplicates_behave_like_resubmits_in_input_order),
	TEST_CASE(submit_exit_status_is_the_worst_outcome),
	TEST_CASE(submit_refuses_an_id_for_several_specs_and_a_bad_in_flight),
	TEST_CASE(submit_after_finds_earlier_specs_and_never_later_ones),
	TEST_CASE(submit_refuses_a_prefix_with_control_characters_or_outer_blanks),
	TEST_CASE(submit_jsonl_rejects_a_line_over_1_mib_and_stores_the_rest),
	TEST_CASE(submit_of_20_mb_of_lines_stores_them_all_in_bounded_memory),
	TEST_CASE(submit_killed_midway_and_run_again_stores_every_task_once),
	TEST_CASE(submit_many_reports_each_item_in_input_order_with_its_own_outcome),
	TEST_CASE(submit_many_stops_when_its_input_fails_and_returns_the_input_code),
	TEST_CASE(submit_many_refuses_bad_options_before_reading_anything),
	TEST_CASE(submit_many_stops_at_the_first_etcd_error),
);

TEST_MAIN(cli_setup, cli_teardown)
