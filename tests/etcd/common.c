/* common.c - set-up shared by the etcd client tests. */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "test.h"

etcdh_cluster *cluster;

int cluster_up(int members, const char *const *extra)
{
	etcdh_opts o = { .members = members, .extra_args = extra };
	return etcdh_start(&o, &cluster);
}

void cluster_down(void)
{
	etcdh_destroy(cluster);
	cluster = NULL;
}

lr_etcd *client_open(const char *endpoint)
{
	lr_etcd_opts o = {
		.endpoints = endpoint != NULL ? endpoint : etcdh_endpoints(cluster),
		.dial_timeout_s = 5,
		.call_timeout_s = 5,
	};
	lr_etcd *c = NULL;
	lr_err err = {0};
	CHECK_OK(lr_etcd_open(&o, &c, &err), &err);
	return c;
}

const char *test_prefix(const char *name)
{
	static char buf[256];
	static int n;
	snprintf(buf, sizeof(buf), "/t/%s/%d/", name, ++n);
	return buf;
}

int wait_until(int (*cond)(void *), void *arg, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	while (!cond(arg)) {
		if (lr_mono_ms() >= end)
			return -1;
		lr_sleep_ms(10);
	}
	return 0;
}

lr_keepalive *kept_lease(lr_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted,
                         lr_lease_lost_fn lost, void *user)
{
	lr_err e = { 0 };
	lr_keepalive *k = NULL;
	int64_t g = 0, sent = 0;
	CHECK_OK(lr_keepalive_new(c, &k, &e), &e);
	CHECK_OK(lr_lease_grant(c, ttl_s, id, &g, &sent, &e), &e);
	CHECK_OK(lr_keepalive_add(k, *id, g, sent, lost, NULL, user, &e), &e);
	if (granted != NULL)
		*granted = g;
	return k;
}

long etcd_metric(int i, const char *name, const char *label)
{
	const char *ep = etcdh_endpoint(cluster, i);
	const char *colon = ep != NULL ? strrchr(ep, ':') : NULL;
	static char buf[1 << 20];
	size_t len = 0;

	if (colon == NULL)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET,
		                 .sin_port = htons((uint16_t)atoi(colon + 1)) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
		ssize_t r;
		while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
			len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	long sum = -1;
	size_t nl = strlen(name);
	for (char *line = buf; line != NULL && *line != '\0';) {
		char *end = strchr(line, '\n');
		if (end != NULL)
			*end = '\0';
		char *value = strrchr(line, ' ');
		if (strncmp(line, name, nl) == 0 && (line[nl] == ' ' || line[nl] == '{') &&
		    (label == NULL || strstr(line, label) != NULL) && value != NULL)
			sum = (sum < 0 ? 0 : sum) + atol(value + 1);
		line = end != NULL ? end + 1 : NULL;
	}
	return sum;
}

long etcd_watcher_count(int i)
{
	return etcd_metric(i, "etcd_debugging_mvcc_watcher_total", NULL);
}
