/* test_backoff.c - retry waits grow by doubling, stop at 5 minutes, jitter
 * within [d/2, d], never overflow; the PRNG is reproducible and in range. */
#include <stdint.h>
#include <string.h>

#include "base/backoff.h"
#include "test.h"

TEST(retry_backoff_doubles_from_the_base)
{
	CHECK_INT(lr_retry_backoff_ms(1000, 1, NULL), ==, 1000);
	CHECK_INT(lr_retry_backoff_ms(1000, 2, NULL), ==, 2000);
	CHECK_INT(lr_retry_backoff_ms(1000, 3, NULL), ==, 4000);
	CHECK_INT(lr_retry_backoff_ms(1000, 4, NULL), ==, 8000);
	CHECK_INT(lr_retry_backoff_ms(250, 5, NULL), ==, 4000);
}

TEST(retry_backoff_is_capped_at_five_minutes)
{
	CHECK_INT(lr_retry_backoff_ms(1000, 9, NULL), ==, 256000);
	CHECK_INT(lr_retry_backoff_ms(1000, 10, NULL), ==, 300000);
	CHECK_INT(lr_retry_backoff_ms(1000, 20, NULL), ==, 300000);
	CHECK_INT(lr_retry_backoff_ms(300000, 1, NULL), ==, 300000);
	CHECK_INT(lr_retry_backoff_ms(999999999, 1, NULL), ==, 300000);
}

TEST(retry_backoff_does_not_overflow_for_huge_k_or_base)
{
	lr_rng rng;
	lr_rng_seed(&rng, 1);
	CHECK_INT(lr_retry_backoff_ms(1, 1000, NULL), ==, 300000);
	CHECK_INT(lr_retry_backoff_ms(1000, 1000, NULL), ==, 300000);
	CHECK_INT(lr_retry_backoff_ms(1000, INT64_MAX, NULL), ==, 300000);
	CHECK_INT(lr_retry_backoff_ms(INT64_MAX, INT64_MAX, NULL), ==, 300000);
	for (int i = 0; i < 1000; i++) {
		int64_t w = lr_retry_backoff_ms(INT64_MAX, 1000, &rng);
		CHECK_INT(w, >=, 150000);
		CHECK_INT(w, <=, 300000);
	}
}

TEST(retry_backoff_without_base_is_zero_and_k_below_1_counts_as_1)
{
	lr_rng rng;
	lr_rng_seed(&rng, 2);
	CHECK_INT(lr_retry_backoff_ms(0, 5, &rng), ==, 0);
	CHECK_INT(lr_retry_backoff_ms(-10, 5, &rng), ==, 0);
	CHECK_INT(lr_retry_backoff_ms(1000, 0, NULL), ==, 1000);
	CHECK_INT(lr_retry_backoff_ms(1000, -7, NULL), ==, 1000);
}

TEST(retry_backoff_jitter_stays_between_half_and_full_wait)
{
	lr_rng rng;
	lr_rng_seed(&rng, 42);
	for (int64_t k = 1; k <= 12; k++) {
		int64_t d = lr_retry_backoff_ms(1000, k, NULL);
		int64_t lo = INT64_MAX, hi = 0;
		for (int i = 0; i < 2000; i++) {
			int64_t w = lr_retry_backoff_ms(1000, k, &rng);
			CHECK_INT(w, >=, d / 2);
			CHECK_INT(w, <=, d);
			lo = w < lo ? w : lo;
			hi = w > hi ? w : hi;
		}
		/* The jitter really spreads: both ends of the range are
		 * approached. */
		CHECK_INT(lo, <, d / 2 + d / 20);
		CHECK_INT(hi, >, d - d / 20);
	}
}

TEST(rng_with_the_same_seed_repeats_its_sequence)
{
	lr_rng a, b, c;
	lr_rng_seed(&a, 7);
	lr_rng_seed(&b, 7);
	lr_rng_seed(&c, 8);
	int differs = 0;
	for (int i = 0; i < 100; i++) {
		uint64_t x = lr_rng_next(&a);
		CHECK(x == lr_rng_next(&b));
		differs |= x != lr_rng_next(&c);
	}
	CHECK(differs);
}

TEST(rng_seed_zero_still_produces_varied_values)
{
	lr_rng rng;
	lr_rng_seed(&rng, 0);
	uint64_t first = lr_rng_next(&rng);
	CHECK(first != 0);
	CHECK(lr_rng_next(&rng) != first);
}

TEST(rng_below_stays_in_range_and_reaches_every_value)
{
	lr_rng rng;
	int seen[10] = { 0 };
	lr_rng_seed(&rng, 3);
	for (int i = 0; i < 10000; i++) {
		uint64_t v = lr_rng_below(&rng, 10);
		CHECK(v < 10);
		seen[v]++;
	}
	for (int i = 0; i < 10; i++)
		CHECK_INT(seen[i], >, 800);
	CHECK(lr_rng_below(&rng, 0) == 0);
	CHECK(lr_rng_below(&rng, 1) == 0);
	CHECK(lr_rng_below(&rng, UINT64_MAX) < UINT64_MAX);
}

TEST(rng_seeded_from_the_os_differs_between_owners)
{
	lr_rng a, b;
	lr_err err = { 0 };
	CHECK_OK(lr_rng_init(&a, &err), &err);
	CHECK_OK(lr_rng_init(&b, &err), &err);
	CHECK(lr_rng_next(&a) != lr_rng_next(&b));
}

TEST(random_bytes_fill_the_whole_buffer)
{
	unsigned char buf[4096];
	lr_err err = { 0 };
	memset(buf, 0, sizeof(buf));
	CHECK_OK(lr_random_bytes(buf, sizeof(buf), &err), &err);
	size_t zeros = 0;
	for (size_t i = 0; i < sizeof(buf); i++)
		zeros += buf[i] == 0;
	CHECK_INT(zeros, <, 64); /* about 16 expected */
	CHECK_OK(lr_random_bytes(buf, 0, &err), &err);
}

TEST(backoff_doubles_up_to_its_maximum_and_resets)
{
	lr_backoff b;
	lr_backoff_init(&b, 100, 1000);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 100);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 200);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 400);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 800);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 1000);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 1000);
	lr_backoff_reset(&b);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 100);
}

TEST(backoff_jitter_stays_between_half_and_full_wait)
{
	lr_backoff b;
	lr_rng rng;
	lr_rng_seed(&rng, 9);
	lr_backoff_init(&b, 50, 5000);
	for (int i = 0; i < 1000; i++) {
		int64_t nominal = b.cur_ms;
		int64_t w = lr_backoff_next(&b, &rng);
		CHECK_INT(w, >=, nominal / 2);
		CHECK_INT(w, <=, nominal);
	}
	CHECK_INT(b.cur_ms, ==, 5000);
}

TEST(backoff_does_not_overflow_near_int64_max)
{
	lr_backoff b;
	lr_rng rng;
	lr_rng_seed(&rng, 10);
	lr_backoff_init(&b, INT64_MAX / 3, INT64_MAX);
	for (int i = 0; i < 100; i++) {
		int64_t w = lr_backoff_next(&b, &rng);
		CHECK_INT(w, >, 0);
	}
	CHECK_INT(b.cur_ms, ==, INT64_MAX);
}

TEST(backoff_init_fixes_inconsistent_bounds)
{
	lr_backoff b;
	lr_backoff_init(&b, -5, -10);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 0);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 0);
	lr_backoff_init(&b, 500, 100);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 500);
	CHECK_INT(lr_backoff_next(&b, NULL), ==, 500);
}

TEST_LIST(
	TEST_CASE(retry_backoff_doubles_from_the_base),
	TEST_CASE(retry_backoff_is_capped_at_five_minutes),
	TEST_CASE(retry_backoff_does_not_overflow_for_huge_k_or_base),
	TEST_CASE(retry_backoff_without_base_is_zero_and_k_below_1_counts_as_1),
	TEST_CASE(retry_backoff_jitter_stays_between_half_and_full_wait),
	TEST_CASE(rng_with_the_same_seed_repeats_its_sequence),
	TEST_CASE(rng_seed_zero_still_produces_varied_values),
	TEST_CASE(rng_below_stays_in_range_and_reaches_every_value),
	TEST_CASE(rng_seeded_from_the_os_differs_between_owners),
	TEST_CASE(random_bytes_fill_the_whole_buffer),
	TEST_CASE(backoff_doubles_up_to_its_maximum_and_resets),
	TEST_CASE(backoff_jitter_stays_between_half_and_full_wait),
	TEST_CASE(backoff_does_not_overflow_near_int64_max),
	TEST_CASE(backoff_init_fixes_inconsistent_bounds),
);

TEST_MAIN(NULL, NULL)
