/* clock.h - time as leaserun uses it: the monotonic clock for every deadline,
 * RFC 3339 wall-clock strings for people, durations typed by people. Any thread. */
#ifndef LR_CLOCK_H
#define LR_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "leaserun.h"

/* Holds "YYYY-MM-DDTHH:MM:SS.mmmZ" with room to spare; the record structs
 * use the same size. */
#define LR_TIME_BUF 40
/* The last instant RFC 3339 can write with a 4-digit year:
 * 9999-12-31T23:59:59.999Z. */
#define LR_TIME_MAX_MS 253402300799999LL

/* CLOCK_MONOTONIC: for deadlines and intervals, never for display. */
int64_t lr_mono_ms(void);
int64_t lr_mono_us(void);

/* The CLOCK_MONOTONIC instant us microseconds from now, as the absolute
 * deadline clock_nanosleep, sem_clockwait and the like take (us >= 0). */
struct timespec lr_mono_deadline_us(int64_t us);

/* Sleep at least ms milliseconds; a signal does not cut the sleep short.
 * ms <= 0 returns at once. */
void lr_sleep_ms(int64_t ms);

/* The wall clock (CLOCK_REALTIME), in milliseconds since the epoch: only for
 * display and for ages of records written by people's clocks. */
int64_t lr_wall_ms(void);

/* "2026-11-21T05:29:17.123Z": UTC, milliseconds. */
void lr_rfc3339_now(char buf[LR_TIME_BUF]);
void lr_rfc3339_format(int64_t unix_ms, char buf[LR_TIME_BUF]);

/* Parse an RFC 3339 time: what lr_rfc3339_format writes, with or without a
 * fraction (any number of digits, kept to the millisecond), 'Z' or a numeric
 * offset "+hh:mm". Returns 0, or LR_EINVAL for anything else, including
 * impossible dates such as February 30. */
int lr_rfc3339_parse(const char *s, int64_t *unix_ms);

/* Parse a duration typed by a person: "90" (seconds), "1.5s", "250ms", "5m",
 * "2h", "7d", or a sum of such terms like "1h30m". Empty, negative, garbage
 * and values that overflow int64 milliseconds are refused with a message
 * naming the input. A fraction finer than a millisecond is dropped. */
int lr_duration_parse(const char *s, int64_t *ms, lr_err *err);

/* A compact age for status tables: "3s", "4m12s", "2h05m", "3d04h". A
 * negative age (another host's clock ahead of ours) shows as "0s". */
void lr_format_age(int64_t ms, char *buf, size_t n);

#endif
