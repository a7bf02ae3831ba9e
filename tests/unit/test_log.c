/* test_log.c - the default log sink: JSON lines with the record's fields when
 * stderr is not a terminal, aligned text when asked, levels, whole lines. */
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leaserun.h"
#include "test.h"

/* What lr_log_stderr wrote while stderr pointed at a temporary file.
 * The caller frees it. */
static char *captured;
static int saved_stderr = -1;
static FILE *capture_file;

static void capture_begin(void)
{
	capture_file = tmpfile();
	CHECK(capture_file != NULL);
	fflush(stderr);
	saved_stderr = dup(2);
	CHECK(saved_stderr >= 0);
	CHECK(dup2(fileno(capture_file), 2) == 2);
}

static char *capture_end(void)
{
	dup2(saved_stderr, 2);
	close(saved_stderr);
	saved_stderr = -1;
	off_t n = lseek(fileno(capture_file), 0, SEEK_END);
	CHECK(n >= 0);
	free(captured);
	captured = calloc(1, (size_t)n + 1);
	CHECK(captured != NULL);
	CHECK(pread(fileno(capture_file), captured, (size_t)n, 0) == n);
	fclose(capture_file);
	capture_file = NULL;
	return captured;
}

static lr_log_record record(lr_log_level level, const char *msg)
{
	lr_log_record r = { level, "host-12", "report-7", "analyse", 1, msg };
	return r;
}

static json_t *parse_line(const char *text)
{
	json_error_t je;
	json_t *v = json_loads(text, 0, &je);
	if (v == NULL)
		TEST_FAIL("not JSON: %s: %s", text, je.text);
	return v;
}

TEST(json_line_carries_time_level_runner_task_step_and_msg)
{
	lr_log_record r = record(LR_LOG_WARN, "step started");
	lr_log_stderr_config(2, LR_LOG_DEBUG);
	capture_begin();
	lr_log_stderr(NULL, &r);
	char *out = capture_end();
	CHECK_INT(strlen(out), >, 0);
	CHECK(strchr(out, '\n') == out + strlen(out) - 1); /* exactly one line */
	json_t *v = parse_line(out);
	CHECK_INT(json_object_size(v), ==, 7);
	CHECK_STR(json_string_value(json_object_get(v, "level")), "warn");
	CHECK_STR(json_string_value(json_object_get(v, "runner")), "host-12");
	CHECK_STR(json_string_value(json_object_get(v, "task")), "report-7");
	CHECK_STR(json_string_value(json_object_get(v, "step")), "analyse");
	CHECK_INT(json_integer_value(json_object_get(v, "step_index")), ==, 1);
	CHECK_STR(json_string_value(json_object_get(v, "msg")), "step started");
	const char *time = json_string_value(json_object_get(v, "time"));
	CHECK(time != NULL && strlen(time) == 24 && time[23] == 'Z');
	json_decref(v);
}

TEST(json_line_omits_absent_fields)
{
	lr_log_record r = { LR_LOG_INFO, NULL, NULL, NULL, -1, "started" };
	lr_log_stderr_config(2, LR_LOG_DEBUG);
	capture_begin();
	lr_log_stderr(NULL, &r);
	json_t *v = parse_line(capture_end());
	CHECK_INT(json_object_size(v), ==, 3);
	CHECK(json_object_get(v, "time") != NULL);
	CHECK_STR(json_string_value(json_object_get(v, "level")), "info");
	CHECK_STR(json_string_value(json_object_get(v, "msg")), "started");
	json_decref(v);
}

TEST(json_line_survives_quotes_newlines_and_invalid_utf8)
{
	lr_log_record r = record(LR_LOG_INFO, "say \"hi\"\nbye \xff\xfe end");
	lr_log_stderr_config(2, LR_LOG_DEBUG);
	capture_begin();
	lr_log_stderr(NULL, &r);
	char *out = capture_end();
	CHECK(strchr(out, '\n') == out + strlen(out) - 1);
	json_t *v = parse_line(out);
	CHECK_STR(json_string_value(json_object_get(v, "msg")),
	          "say \"hi\"\nbye \xef\xbf\xbd\xef\xbf\xbd end");
	json_decref(v);
}

TEST(text_line_has_time_aligned_level_fields_and_message)
{
	lr_log_record r = record(LR_LOG_INFO, "hello");
	lr_log_stderr_config(1, LR_LOG_DEBUG);
	capture_begin();
	lr_log_stderr(NULL, &r);
	r.level = LR_LOG_ERROR;
	r.runner = NULL;
	r.step_index = -1;
	r.step = NULL;
	lr_log_stderr(NULL, &r);
	char *out = capture_end();
	/* 2026-11-21T05:29:17.123Z, then the rest. No colour off a terminal. */
	CHECK(out[4] == '-' && out[10] == 'T' && out[23] == 'Z' && out[24] == ' ');
	CHECK(strncmp(out + 25,
	              "INFO  runner=host-12 task=report-7 step=1:analyse hello\n",
	              56) == 0);
	char *second = strchr(out, '\n') + 1;
	CHECK_STR(second + 25, "ERROR task=report-7 hello\n");
	CHECK(strchr(out, '\x1b') == NULL);
}

TEST(text_line_escapes_control_characters)
{
	lr_log_record r = record(LR_LOG_INFO, "a\nb\x1b[31mc\td");
	lr_log_stderr_config(1, LR_LOG_DEBUG);
	capture_begin();
	lr_log_stderr(NULL, &r);
	char *out = capture_end();
	CHECK_HAS(out, "a\\nb\\x1b[31mc\td\n");
	CHECK(strchr(out, '\x1b') == NULL);
}

TEST(records_below_the_minimum_level_are_dropped)
{
	lr_log_record r = record(LR_LOG_DEBUG, "noise");
	lr_log_stderr_config(2, LR_LOG_INFO);
	capture_begin();
	lr_log_stderr(NULL, &r);
	r.level = LR_LOG_INFO;
	r.msg = "kept";
	lr_log_stderr(NULL, &r);
	char *out = capture_end();
	CHECK(strstr(out, "noise") == NULL);
	CHECK_HAS(out, "\"msg\":\"kept\"");
}

TEST(auto_format_off_a_terminal_is_json)
{
	lr_log_record r = record(LR_LOG_INFO, "auto");
	lr_log_stderr_config(0, LR_LOG_INFO);
	capture_begin();
	lr_log_stderr(NULL, &r);
	json_t *v = parse_line(capture_end());
	CHECK_STR(json_string_value(json_object_get(v, "msg")), "auto");
	json_decref(v);
}

/* stderr on a pseudo-terminal: text, level in colour, no JSON. */
TEST(auto_format_on_a_terminal_is_text_with_colour)
{
	lr_log_record r = record(LR_LOG_ERROR, "on a tty");
	char name[128], buf[512] = "";
	int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	CHECK(master >= 0);
	CHECK(grantpt(master) == 0 && unlockpt(master) == 0);
	CHECK(ptsname_r(master, name, sizeof(name)) == 0);
	int slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	CHECK(slave >= 0);
	int saved = dup(2);
	CHECK(saved >= 0 && dup2(slave, 2) == 2);
	unsetenv("NO_COLOR");
	lr_log_stderr_config(0, LR_LOG_INFO);
	lr_log_stderr(NULL, &r);
	dup2(saved, 2);
	close(saved);
	ssize_t n = read(master, buf, sizeof(buf) - 1);
	close(slave);
	close(master);
	CHECK(n > 0);
	buf[n] = '\0';
	CHECK_HAS(buf, "\x1b[1;31mERROR\x1b[0m runner=host-12 task=report-7 "
	               "step=1:analyse on a tty");
	CHECK(strchr(buf, '{') == NULL);
}

#define THREADS 8
#define RECORDS 300

static void *log_many(void *arg)
{
	char msg[2048];
	/* Long lines, so that a torn write would show. */
	memset(msg, 'a' + (int)(intptr_t)arg, sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	lr_log_record r = record(LR_LOG_INFO, msg);
	for (int i = 0; i < RECORDS; i++)
		lr_log_stderr(NULL, &r);
	return NULL;
}

TEST(concurrent_records_never_interleave)
{
	pthread_t t[THREADS];
	lr_log_stderr_config(2, LR_LOG_INFO);
	capture_begin();
	for (intptr_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, log_many, (void *)i) == 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	char *out = capture_end();
	int lines = 0;
	for (char *p = out; *p != '\0'; lines++) {
		char *nl = strchr(p, '\n');
		CHECK(nl != NULL);
		*nl = '\0';
		json_t *v = parse_line(p);
		const char *msg = json_string_value(json_object_get(v, "msg"));
		CHECK(msg != NULL && strlen(msg) == 2047);
		for (int k = 0; k < 2047; k++)
			CHECK(msg[k] == msg[0]); /* one thread's record, whole */
		json_decref(v);
		p = nl + 1;
	}
	CHECK_INT(lines, ==, THREADS * RECORDS);
}

static void teardown(void)
{
	free(captured);
	lr_log_stderr_config(0, LR_LOG_INFO);
}

TEST_LIST(
	TEST_CASE(json_line_carries_time_level_runner_task_step_and_msg),
	TEST_CASE(json_line_omits_absent_fields),
	TEST_CASE(json_line_survives_quotes_newlines_and_invalid_utf8),
	TEST_CASE(text_line_has_time_aligned_level_fields_and_message),
	TEST_CASE(text_line_escapes_control_characters),
	TEST_CASE(records_below_the_minimum_level_are_dropped),
	TEST_CASE(auto_format_off_a_terminal_is_json),
	TEST_CASE(auto_format_on_a_terminal_is_text_with_colour),
	TEST_CASE(concurrent_records_never_interleave),
);

TEST_MAIN(NULL, teardown)
