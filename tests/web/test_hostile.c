/* test_hostile.c - hostile HTTP clients against a worker's /metrics and
 * against `leaserun web`: garbage, huge headers, and hundreds of slow
 * connections dripping a byte at a time. Meanwhile the runner must go on
 * claiming and committing; afterwards both servers answer again. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "fleet.h"
#include "httpc.h"
#include "servers.h"
#include "test.h"


#define SLOW_PER_SERVER 200
/* Tasks are submitted one every SUBMIT_EVERY_MS for ATTACK_MS while the
 * attack goes on, and must all finish before it stops. */
#define ATTACK_MS 6000
#define SUBMIT_EVERY_MS 100

struct attack {
	const char *addrs[2];
	int n_addrs;
	atomic_bool stop;
	atomic_long garbage_sent, slow_refreshed;
	pthread_t slow, junk;
};

/* Hundreds of connections, each sending one more byte of an endless
 * header now and then: every byte resets an idle timer. */
static void *slow_clients(void *arg)
{
	struct attack *a = arg;
	int fds[2][SLOW_PER_SERVER];

	for (int s = 0; s < a->n_addrs; s++)
		for (int i = 0; i < SLOW_PER_SERVER; i++)
			fds[s][i] = -1;
	while (!atomic_load(&a->stop)) {
		for (int s = 0; s < a->n_addrs; s++) {
			for (int i = 0; i < SLOW_PER_SERVER; i++) {
				int *fd = &fds[s][i];
				if (*fd < 0) {
					*fd = http_connect_within(a->addrs[s], 20);
					if (*fd >= 0)
						send(*fd, "GET /metrics HTTP/1.1\r\nX-Slow: ", 31,
						     MSG_NOSIGNAL | MSG_DONTWAIT);
					continue;
				}
				if (send(*fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
					close(*fd);
					*fd = -1;
				}
				atomic_fetch_add(&a->slow_refreshed, 1);
			}
		}
		lr_sleep_ms(200);
	}
	for (int s = 0; s < a->n_addrs; s++)
		for (int i = 0; i < SLOW_PER_SERVER; i++)
			if (fds[s][i] >= 0)
				close(fds[s][i]);
	return NULL;
}

/* Garbage and huge headers, as fast as the servers take them. */
static void *junk_clients(void *arg)
{
	struct attack *a = arg;
	size_t big = 1024 * 1024;
	char *huge = malloc(big);
	char noise[2048];

	memcpy(huge, "GET / HTTP/1.1\r\nX-Huge: ", 24);
	memset(huge + 24, 'h', big - 24);
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (char)(i * 131 % 256);
	for (long n = 0; !atomic_load(&a->stop); n++) {
		const char *addr = a->addrs[n % a->n_addrs];
		http_resp r = n % 2 == 0 ? http_raw(addr, huge, big, 300)
		                         : http_raw(addr, noise, sizeof(noise), 300);
		http_resp_free(&r);
		atomic_fetch_add(&a->garbage_sent, 1);
	}
	free(huge);
	return NULL;
}

static void attack_start(struct attack *a)
{
	CHECK(pthread_create(&a->slow, NULL, slow_clients, a) == 0);
	CHECK(pthread_create(&a->junk, NULL, junk_clients, a) == 0);
	lr_sleep_ms(500); /* the slow ones are in place */
}

static void attack_stop(struct attack *a)
{
	atomic_store(&a->stop, true);
	pthread_join(a->slow, NULL);
	pthread_join(a->junk, NULL);
	printf("# attack: %ld garbage or huge requests, %ld slow bytes\n",
	       atomic_load(&a->garbage_sent), atomic_load(&a->slow_refreshed));
}

/* Submit a two-step task every SUBMIT_EVERY_MS for ms, then wait for them
 * all; how many there were. */
static int run_tasks(fleet *f, const char *tag, int ms)
{
	int64_t end = lr_mono_ms() + ms;
	int n = 0;
	char id[32];

	for (; lr_mono_ms() < end; n++) {
		snprintf(id, sizeof(id), "%s-%03d", tag, n);
		fleet_submit(f, id, "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"},"
		                    "{\"name\":\"b\",\"run\":\"true\"}]}");
		lr_sleep_ms(SUBMIT_EVERY_MS);
	}
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "%s-%03d", tag, i);
		if (fleet_wait_state(f, id, LR_TASK_SUCCEEDED, 30000) < 0)
			TEST_FAIL("task %s did not succeed within 30 s", id);
	}
	printf("# %s: %d tasks submitted over %d ms, all done %lld ms after the last\n",
	       tag, n, ms, (long long)(lr_mono_ms() - end));
	return n;
}

/* Until the server answers a plain GET again (its idle timeout lets the
 * slow connections go). */
static void check_answers_again(const char *addr, const char *path)
{
	int64_t t0 = lr_mono_ms();
	http_resp r = { .status = -1 };
	while (r.status != 200 && lr_mono_ms() - t0 < 20000) {
		http_resp_free(&r);
		r = http_get(addr, path, NULL, 2000);
	}
	printf("# http://%s%s answered again %lld ms after the attack\n", addr, path,
	       (long long)(lr_mono_ms() - t0));
	CHECK_INT(r.status, ==, 200);
	http_resp_free(&r);
}

TEST(hostile_clients_of_both_servers_do_not_stop_the_runner)
{
	fleet f;
	proc_bg web;
	char maddr[ADDR_SIZE], waddr[ADDR_SIZE];
	const char *extra[] = { "--concurrency", "4", NULL };
	fleet_init(&f, etcdh_endpoints(web_etcd), "hostile");
	metrics_worker_start(&f, 0, extra, maddr);
	web_start(&web, &f, false, waddr);

	int calm = run_tasks(&f, "calm", 1000);
	struct attack a = { .addrs = { maddr, waddr }, .n_addrs = 2 };
	attack_start(&a);
	/* Every task finishes while the attack still goes on. */
	int under = run_tasks(&f, "attacked", ATTACK_MS);
	http_resp during = http_get(maddr, "/metrics", NULL, 2000);
	attack_stop(&a);
	printf("# a scrape during the attack: status %d (-1: refused)\n", during.status);
	http_resp_free(&during);

	check_answers_again(maddr, "/metrics");
	check_answers_again(waddr, "/");
	char *after = metrics_get(maddr);
	CHECK(metric_value(after, "leaserun_tasks_finished_total{state=\"succeeded\"}") ==
	      calm + under);
	CHECK(metric_value(after, "leaserun_lease_losses_total") == 0);
	free(after);
	CHECK(proc_alive(&web));
	proc_stop(&web, SIGTERM, 5000);
	CHECK_INT(web.status, ==, 0);
	fleet_destroy(&f);
}

TEST_LIST(TEST_CASE(hostile_clients_of_both_servers_do_not_stop_the_runner));

TEST_MAIN(web_etcd_start, web_etcd_stop)
