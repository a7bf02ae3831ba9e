/* test_status_watch.c - `leaserun status --watch` redraws when a task
 * changes in etcd (a watch), a cancel request included, and not
 * otherwise: no timer; it says when
 * etcd stops answering, and redraws when it is back. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "fleet.h"
#include "records/record.h"
#include "servers.h"
#include "test.h"

/* Frames written so far: each starts with the table's header. */
static int frames(const char *log)
{
	char *text = proc_slurp(log);
	int n = 0;
	for (const char *p = text; (p = strstr(p, "ID ")) != NULL; p += 3)
		if (p == text || p[-1] == '\n')
			n++;
	free(text);
	return n;
}

static int64_t wait_frames(const char *log, int n, int timeout_ms)
{
	int64_t t0 = lr_mono_ms();
	while (frames(log) < n) {
		if (lr_mono_ms() - t0 > timeout_ms)
			return -1;
		lr_sleep_ms(10);
	}
	return lr_mono_ms() - t0;
}

/* `leaserun status --watch` on f's prefix, its output in <f's dir>/watch.log
 * (its path into log), once it has drawn its first frame. */
static void start_watch(fleet *f, proc_bg *watch, char log[320])
{
	char *argv[16];
	const char *args[] = { "status", "--watch", "--endpoints", f->endpoints,
		               "--prefix", f->prefix, NULL };
	proc_cli_argv(argv, 16, args);
	snprintf(log, 320, "%s/watch.log", f->dir);
	proc_start(watch, argv, NULL, log);
	CHECK(wait_frames(log, 1, 10000) >= 0);
}

TEST(status_watch_redraws_on_a_change_and_only_then)
{
	fleet f;
	proc_bg watch;
	char log[320];
	fleet_init(&f, etcdh_endpoints(web_etcd), "watching");
	start_watch(&f, &watch, log);
	/* Nothing changes: nothing is drawn (the old --watch redrew every
	 * second). */
	lr_sleep_ms(2500);
	CHECK_INT(frames(log), ==, 1);
	fleet_submit(&f, "seen", "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	int64_t took = wait_frames(log, 2, 2000);
	printf("# redrawn %lld ms after the submit\n", (long long)took);
	CHECK(took >= 0);
	CHECK(took <= 1000);
	char *text = proc_slurp(log);
	CHECK_HAS(strstr(text, "\nID ") != NULL ? strstr(text, "\nID ") : text, "seen");
	free(text);
	CHECK_INT(proc_stop(&watch, SIGTERM, 5000), ==, 0);
	fleet_destroy(&f);
}

/* A cancel request alone (its holder still stopping the task, or dead)
 * changes what status shows: it is redrawn. */
TEST(status_watch_redraws_when_a_cancel_is_requested)
{
	fleet f;
	proc_bg watch;
	char log[320];
	lr_err err = { 0 };
	fleet_init(&f, etcdh_endpoints(web_etcd), "cancelling");
	fleet_submit(&f, "held", "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	/* Held by a runner that does nothing: a claim on a lease of its own. */
	int64_t lease = 0, granted = 0, sent = 0;
	CHECK_OK(lr_lease_grant(lr_client_etcd(f.client), 30, &lease, &granted, &sent, &err),
	         &err);
	lr_claim_rec cl = { .runner = "box-1", .lease = lease };
	lr_rfc3339_now(cl.claimed_at);
	char *v = lr_claim_encode(&cl);
	char key[LR_KEY_SIZE];
	lr_key(f.client, LR_K_CLAIMS, "held", key);
	CHECK_OK(lr_kv_put(lr_client_etcd(f.client), key, v, strlen(v), lease, NULL, NULL, &err),
	         &err);
	free(v);
	start_watch(&f, &watch, log);
	int drawn = frames(log);
	proc_result r = proc_cli(NULL, NULL, "cancel", "held", "--endpoints", f.endpoints,
	                         "--prefix", f.prefix, (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	CHECK(wait_frames(log, drawn + 1, 5000) >= 0);
	char *text = proc_slurp(log);
	CHECK_HAS(text, "running (cancel requested)"); /* not in the first frame */
	free(text);
	CHECK_INT(proc_stop(&watch, SIGTERM, 5000), ==, 0);
	CHECK_OK(lr_lease_revoke(lr_client_etcd(f.client), lease, &err), &err);
	fleet_destroy(&f);
}

/* The lines starting with "ID " (a table's header) after `from`. */
static int headers_after(const char *from)
{
	int n = 0;
	for (const char *p = from; p != NULL && (p = strstr(p, "\nID ")) != NULL; p += 4)
		n++;
	return n;
}

static const char unreachable[] = "etcd unreachable since ";

/* Where the last "etcd unreachable" line of text starts, or NULL. */
static const char *last_unreachable(const char *text)
{
	const char *last = NULL;
	for (const char *p = text; (p = strstr(p, unreachable)) != NULL; p++)
		last = p;
	return last;
}

TEST(status_watch_says_when_etcd_is_unreachable_and_redraws_when_it_is_back)
{
	fleet f;
	proc_bg watch;
	char log[320];
	fleet_init(&f, etcdh_endpoints(web_etcd), "outage");
	fleet_submit(&f, "kept", "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	start_watch(&f, &watch, log);

	CHECK_INT(etcdh_stop(web_etcd, 0), ==, 0);
	int64_t t0 = lr_mono_ms();
	char *text = NULL;
	const char *said = NULL;
	while (said == NULL && lr_mono_ms() - t0 < 10000) {
		free(text);
		lr_sleep_ms(50);
		text = proc_slurp(log);
		said = last_unreachable(text);
	}
	printf("# said %lld ms after the stop: %.*s\n", (long long)(lr_mono_ms() - t0),
	       said != NULL ? (int)strcspn(said, "\n") : 0, said != NULL ? said : "");
	CHECK(said != NULL);
	CHECK_HAS(said, etcdh_endpoints(web_etcd));
	/* The tasks read last are shown with it. */
	CHECK_HAS(said, "kept");
	free(text);

	CHECK_INT(etcdh_restart(web_etcd, 0), ==, 0);
	t0 = lr_mono_ms();
	bool redrawn = false;
	while (!redrawn && lr_mono_ms() - t0 < 10000) {
		lr_sleep_ms(50);
		text = proc_slurp(log);
		/* Its own frame's table, then one without the message. */
		redrawn = headers_after(last_unreachable(text)) >= 2;
		if (!redrawn)
			free(text);
	}
	printf("# redrawn without it %lld ms after etcd was back\n",
	       (long long)(lr_mono_ms() - t0));
	CHECK(redrawn);
	const char *after = strrchr(text, '\0');
	while (after > text && strncmp(after, "ID ", 3) != 0)
		after--;
	CHECK_HAS(after, "kept");
	free(text);
	CHECK_INT(proc_stop(&watch, SIGTERM, 5000), ==, 0);
	fleet_destroy(&f);
}

TEST_LIST(TEST_CASE(status_watch_redraws_on_a_change_and_only_then),
          TEST_CASE(status_watch_redraws_when_a_cancel_is_requested),
          TEST_CASE(status_watch_says_when_etcd_is_unreachable_and_redraws_when_it_is_back));

TEST_MAIN(web_etcd_start, web_etcd_stop)
