/* test.h - a tiny test framework: named cases in one table per file.
 *
 * A test file defines cases with TEST(name) { ... }, lists them with
 * TEST_LIST(TEST_CASE(name), ...), and ends with TEST_MAIN(setup, teardown)
 * (either may be NULL). The program runs every case, or only the ones named
 * on its command line, or, after a first argument "-x", every case but the
 * ones named (so that a test program's cases can be split between two meson
 * tests without a new case being left out of both); a name that is no case
 * of the program is an error (exit 2). It prints "ok <name> (<ms> ms)" or
 * "FAIL <name>" (after the reason on stderr) for each, and exits 1 when any
 * case failed. A failed CHECK ends its case at once. */
#ifndef LR_TEST_H
#define LR_TEST_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct test_case {
	const char *name;
	void (*fn)(void);
};

extern jmp_buf test__jump;
extern int test__failed;

#define TEST(name) static void test_##name(void)
#define TEST_CASE(name) { #name, test_##name }

#define TEST_FAIL(...)                                                        \
	do {                                                                  \
		fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);             \
		fprintf(stderr, __VA_ARGS__);                                 \
		fputc('\n', stderr);                                          \
		longjmp(test__jump, 1);                                       \
	} while (0)

#define CHECK(cond)                                                           \
	do {                                                                  \
		if (!(cond))                                                  \
			TEST_FAIL("check failed: %s", #cond);                 \
	} while (0)

#define CHECK_INT(a, op, b)                                                   \
	do {                                                                  \
		long long test__a = (long long)(a);                           \
		long long test__b = (long long)(b);                           \
		if (!(test__a op test__b))                                    \
			TEST_FAIL("check failed: %s %s %s (%lld vs %lld)", #a, \
			          #op, #b, test__a, test__b);                 \
	} while (0)

#define CHECK_STR(a, b)                                                       \
	do {                                                                  \
		const char *test__a = (a);                                    \
		const char *test__b = (b);                                    \
		if (test__a == NULL || test__b == NULL ||                     \
		    strcmp(test__a, test__b) != 0)                            \
			TEST_FAIL("check failed: %s == %s (\"%s\" vs \"%s\")", \
			          #a, #b, test__a ? test__a : "(null)",       \
			          test__b ? test__b : "(null)");              \
	} while (0)

/* The string a contains the substring b. */
#define CHECK_HAS(a, b)                                                       \
	do {                                                                  \
		const char *test__a = (a);                                    \
		const char *test__b = (b);                                    \
		if (test__a == NULL || strstr(test__a, test__b) == NULL)      \
			TEST_FAIL("check failed: \"%s\" contains \"%s\"",      \
			          test__a ? test__a : "(null)", test__b);     \
	} while (0)

/* A call returning 0 or a negative code with an lr_err: show the message. */
#define CHECK_OK(call, errp)                                                  \
	do {                                                                  \
		int test__rc = (call);                                        \
		if (test__rc != 0)                                            \
			TEST_FAIL("%s failed (%d): %s", #call, test__rc,       \
			          (errp)->msg);                               \
	} while (0)

#define TEST_LIST(...)                                                        \
	static const struct test_case test__cases[] = { __VA_ARGS__ }

/* The framework's globals, for a program that uses the test helpers
 * without TEST_MAIN (a benchmark). */
#define TEST_GLOBALS                                                          \
	jmp_buf test__jump;                                                   \
	int test__failed

/* Milliseconds on the monotonic clock, for the time each case took. */
static inline double test__now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whether the command line (see above) asks for case `name`. */
static inline int test__wanted(const char *name, int argc, char **argv)
{
	int except = argc > 1 && strcmp(argv[1], "-x") == 0;
	int named = 0;
	for (int a = 1 + except; a < argc; a++)
		if (strcmp(argv[a], name) == 0)
			named = 1;
	return except ? !named : argc < 2 || named;
}

/* Names on the command line that are no case: said on stderr, 1. */
static inline int test__unknown_case(const struct test_case *cases, size_t n, int argc,
                                     char **argv)
{
	int except = argc > 1 && strcmp(argv[1], "-x") == 0;
	for (int a = 1 + except; a < argc; a++) {
		size_t k = 0;
		while (k < n && strcmp(argv[a], cases[k].name) != 0)
			k++;
		if (k == n) {
			fprintf(stderr, "no case named %s\n", argv[a]);
			return 1;
		}
	}
	return 0;
}

#define TEST_MAIN(setup, teardown)                                            \
	TEST_GLOBALS;                                                         \
	int main(int argc, char **argv)                                       \
	{                                                                     \
		size_t n = sizeof(test__cases) / sizeof(test__cases[0]);      \
		int (*su)(void) = (setup);                                    \
		void (*td)(void) = (teardown);                                \
		if (test__unknown_case(test__cases, n, argc, argv))           \
			return 2;                                             \
		if (su != NULL && su() != 0) {                                \
			fprintf(stderr, "FAIL setup\n");                      \
			return 1;                                             \
		}                                                             \
		for (volatile size_t i = 0; i < n; i++) {                     \
			int wanted = test__wanted(test__cases[i].name, argc, argv); \
			if (!wanted)                                          \
				continue;                                     \
			fprintf(stderr, "-- %s\n", test__cases[i].name);      \
			volatile double test__t0 = test__now_ms();            \
			if (setjmp(test__jump) == 0) {                        \
				test__cases[i].fn();                          \
				printf("ok %s (%.0f ms)\n", test__cases[i].name, \
				       test__now_ms() - test__t0);            \
			} else {                                              \
				printf("FAIL %s\n", test__cases[i].name);     \
				test__failed++;                               \
			}                                                     \
			fflush(stdout);                                       \
		}                                                             \
		if (td != NULL)                                               \
			td();                                                 \
		return test__failed ? 1 : 0;                                  \
	}

#endif
