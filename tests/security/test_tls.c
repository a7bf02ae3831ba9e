/* test_tls.c - TLS and mutual TLS against real etcd servers that serve
 * https: the right CA connects, an unrelated CA, a name the certificate does
 * not hold and a missing or foreign client certificate fail at once with a
 * message that names the endpoint and says why, both in the library and in
 * the `leaserun` command. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "etcd_harness.h"
#include "leaserun.h"
#include "pki.h"
#include "proc.h"
#include "test.h"

static pki certs;
/* Serves https with a certificate for 127.0.0.1 and localhost. */
static etcdh_cluster *tls_cluster;
static etcdh_cluster *local_cluster; /* its certificate: DNS:localhost only */
/* Serves https with a certificate for etcd.test only, and requires client
 * certificates signed by the test CA. */
static etcdh_cluster *mtls_cluster;
/* Serves plain http. */
static etcdh_cluster *plain_cluster;

#define DIAL_S 2

/* What lr_client_open did with these TLS options. */
struct open_result {
	int rc;
	lr_err err;
	int took_ms;
};

static struct open_result try_open(const char *endpoints, const char *cacert,
                                   const char *cert, const char *key,
                                   const char *server_name)
{
	lr_client_opts o = {
		.endpoints = endpoints,
		.prefix = "/tls-test/",
		.dial_timeout_s = DIAL_S,
		.call_timeout_s = 5,
		.cacert = cacert,
		.cert = cert,
		.key = key,
		.tls_server_name = server_name,
	};
	struct open_result r = { 0 };
	lr_client *c = NULL;
	int64_t t0 = lr_mono_ms();
	r.rc = lr_client_open(&o, &c, &r.err);
	r.took_ms = (int)(lr_mono_ms() - t0);
	fprintf(stderr, "   open %s -> %d in %d ms: %s\n", endpoints, r.rc,
	        r.took_ms, r.err.msg);
	if (c != NULL) {
		/* Connected: one call must go through too. */
		lr_task_status *list = NULL;
		size_t n = 0;
		r.rc = lr_task_list(c, -1, 0, &list, &n, &r.err);
		lr_task_list_free(list, n);
		lr_client_close(c);
	}
	return r;
}

/* A refusal: LR_ETLS, the endpoint named, "TLS failed" and `why` in the
 * message, well within the dial timeout when `fast`. */
static void check_refused(struct open_result r, const char *endpoint,
                          const char *why, bool fast)
{
	CHECK_INT(r.rc, ==, LR_ETLS);
	CHECK_HAS(r.err.msg, endpoint);
	CHECK_HAS(r.err.msg, "TLS failed");
	CHECK_HAS(r.err.msg, why);
	CHECK_INT(r.took_ms, <, fast ? 1000 : DIAL_S * 1000 + 500);
}

/* ---- TLS: the server proves who it is --------------------------------- */

TEST(tls_with_the_cluster_ca_connects)
{
	struct open_result r = try_open(etcdh_endpoints(tls_cluster), certs.ca,
	                                NULL, NULL, NULL);
	CHECK_OK(r.rc, &r.err);
	/* localhost is in the certificate too. */
	char ep[64];
	snprintf(ep, sizeof(ep), "localhost:%s",
	         strrchr(etcdh_endpoint(tls_cluster, 0), ':') + 1);
	r = try_open(ep, certs.ca, NULL, NULL, NULL);
	CHECK_OK(r.rc, &r.err);
}

TEST(tls_with_an_unrelated_ca_fails_at_once_saying_the_certificate_was_not_verified)
{
	const char *ep = etcdh_endpoint(tls_cluster, 0);
	struct open_result r = try_open(ep, certs.other_ca, NULL, NULL, NULL);
	check_refused(r, ep, "certificate was not verified", true);
	CHECK_HAS(r.err.msg, "lr_client_opts.cacert");
}

TEST(tls_checks_the_server_name_and_tls_server_name_overrides_it)
{
	const char *ep = etcdh_endpoint(tls_cluster, 0);
	struct open_result r = try_open(ep, certs.ca, NULL, NULL, "wrong.example");
	check_refused(r, ep, "not valid for the name wrong.example", true);
	r = try_open(ep, certs.ca, NULL, NULL, "localhost");
	CHECK_OK(r.rc, &r.err);

	/* A certificate without the IP: the IP endpoint fails until the
	 * name in the certificate is given. */
	ep = etcdh_endpoint(mtls_cluster, 0);
	r = try_open(ep, certs.ca, certs.client, certs.client_key, NULL);
	check_refused(r, ep, "not valid for the name 127.0.0.1", true);
	CHECK_HAS(r.err.msg, "lr_client_opts.tls_server_name");
	r = try_open(ep, certs.ca, certs.client, certs.client_key, "etcd.test");
	CHECK_OK(r.rc, &r.err);
}

TEST(a_plain_client_on_a_tls_port_is_told_to_give_a_ca)
{
	const char *ep = etcdh_endpoint(tls_cluster, 0);
	struct open_result r = try_open(ep, NULL, NULL, NULL, NULL);
	CHECK_INT(r.rc, ==, LR_EUNAVAILABLE);
	CHECK_HAS(r.err.msg, ep);
	CHECK_HAS(r.err.msg, "lr_client_opts.cacert");
}

TEST(each_endpoint_is_checked_against_its_own_host)
{
	/* Not the list, nor the first endpoint's host: its own. */
	char eps[128];
	snprintf(eps, sizeof(eps), "%s,127.0.0.1:1", etcdh_endpoint(tls_cluster, 0));
	struct open_result r = try_open(eps, certs.ca, NULL, NULL, NULL);
	CHECK_OK(r.rc, &r.err);
	/* A member whose certificate holds "localhost" but not 127.0.0.1,
	 * after an endpoint written as 127.0.0.1. */
	const char *local_ep = etcdh_endpoint(local_cluster, 0);
	snprintf(eps, sizeof(eps), "127.0.0.1:1,localhost%s", strrchr(local_ep, ':'));
	r = try_open(eps, certs.ca, NULL, NULL, NULL);
	CHECK_OK(r.rc, &r.err);
	/* Written as 127.0.0.1 itself, it is refused, naming that name. */
	r = try_open(local_ep, certs.ca, NULL, NULL, NULL);
	check_refused(r, local_ep, "not valid for the name 127.0.0.1", true);
}

/* ---- mutual TLS: the client proves who it is too ---------------------- */

TEST(mtls_without_a_client_certificate_fails_saying_one_is_required)
{
	const char *ep = etcdh_endpoint(mtls_cluster, 0);
	struct open_result r = try_open(ep, certs.ca, NULL, NULL, "etcd.test");
	check_refused(r, ep, "requires a client certificate", false);
	CHECK_HAS(r.err.msg, "lr_client_opts.cert");
}

TEST(mtls_with_a_certificate_of_another_ca_fails_saying_it_was_not_accepted)
{
	const char *ep = etcdh_endpoint(mtls_cluster, 0);
	struct open_result r = try_open(ep, certs.ca, certs.rogue, certs.rogue_key,
	                                "etcd.test");
	check_refused(r, ep, "did not accept the client certificate", false);
}

/* ---- the command line ------------------------------------------------- */

/* The step shows its environment, where the runner's client certificate
 * and key must not be. */
static const char one_step[] =
    "{\"id\":\"over-tls\",\"steps\":[{\"name\":\"s\",\"run\":\"env\"}]}";

TEST(the_command_runs_a_task_over_mutual_tls)
{
	char ep[64], spec[sizeof(certs.dir) + 16];
	snprintf(ep, sizeof(ep), "LEASERUN_ENDPOINTS=%s", etcdh_endpoint(mtls_cluster, 0));
	char ca[PATH_MAX + 20], cert[PATH_MAX + 20], key[PATH_MAX + 20];
	snprintf(ca, sizeof(ca), "LEASERUN_CACERT=%s", certs.ca);
	snprintf(cert, sizeof(cert), "LEASERUN_CERT=%s", certs.client);
	snprintf(key, sizeof(key), "LEASERUN_KEY=%s", certs.client_key);
	const char *env[] = { ep, ca, cert, key, "LEASERUN_PREFIX=/cli-mtls/",
		              "ETCDCTL_CERT=/x/client.pem", "ETCDCTL_KEY=/x/client-key.pem",
		              "ETCDCTL_CACERT=/x/ca.pem", NULL };

	snprintf(spec, sizeof(spec), "%s/spec.json", certs.dir);
	FILE *f = fopen(spec, "w");
	CHECK(f != NULL);
	fputs(one_step, f);
	fclose(f);

	proc_result r = proc_cli(env, NULL, "submit", spec, "--tls-server-name", "etcd.test",
	                         (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "over-tls\n");
	proc_result_free(&r);
	r = proc_cli(env, NULL, "worker", "--exit-when-idle", "--ttl", "2",
	             "--tls-server-name=etcd.test", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	/* The credentials stay with the runner; the CA and the endpoints,
	 * no secret, reach the step. */
	const char *const dropped[] = { "LEASERUN_CERT", "LEASERUN_KEY", "ETCDCTL_CERT",
		                        "ETCDCTL_KEY", NULL };
	char line[64];
	for (int i = 0; dropped[i] != NULL; i++) {
		snprintf(line, sizeof(line), "\"msg\":\"%s=", dropped[i]);
		if (strstr(r.err, line) != NULL)
			TEST_FAIL("the step got %s", dropped[i]);
	}
	CHECK_HAS(r.err, "\"msg\":\"LEASERUN_CACERT=");
	CHECK_HAS(r.err, "\"msg\":\"ETCDCTL_CACERT=");
	CHECK_HAS(r.err, "\"msg\":\"LEASERUN_ENDPOINTS=");
	proc_result_free(&r);
	r = proc_cli(env, NULL, "status", "over-tls", "--json", "--tls-server-name",
	             "etcd.test", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "\"succeeded\"");
	proc_result_free(&r);
}

TEST(the_command_exits_1_with_the_tls_reason_and_the_endpoint)
{
	const char *tls_ep = etcdh_endpoint(tls_cluster, 0);
	const char *mtls_ep = etcdh_endpoint(mtls_cluster, 0);
	proc_result r = proc_cli(NULL, NULL, "status", "--endpoints", tls_ep, "--cacert",
	                         certs.other_ca, "--dial-timeout", "2", (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, tls_ep);
	CHECK_HAS(r.err, "TLS failed");
	CHECK_HAS(r.err, "certificate was not verified");
	/* The library names its option; the command names its flag. */
	CHECK_HAS(r.err, "the CA of --cacert");
	CHECK(strstr(r.err, "lr_client_opts") == NULL);
	CHECK(r.took_ms < 2000);
	proc_result_free(&r);

	r = proc_cli(NULL, NULL, "runners", "--endpoints", mtls_ep, "--cacert", certs.ca,
	             "--tls-server-name", "etcd.test", "--dial-timeout", "2",
	             (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, mtls_ep);
	CHECK_HAS(r.err, "TLS failed");
	CHECK_HAS(r.err, "requires a client certificate");
	CHECK(r.took_ms < 2500);
	proc_result_free(&r);

	r = proc_cli(NULL, NULL, "status", "--endpoints", tls_ep, "--cacert", certs.ca,
	             "--tls-server-name", "nobody.example", (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "not valid for the name nobody.example");
	proc_result_free(&r);
}

/* After a failed handshake, gRPC may start the next one on a thread of its
 * own while the command exits; OpenSSL's exit-time clean-up then made the
 * command crash now and then instead of exiting 1. Rare in a plain build;
 * under AddressSanitizer with full stacks for every allocation (slow
 * allocations: the thread is caught mid-handshake), most runs. The option
 * is ignored by a build without the sanitizer. */
TEST(a_tls_failure_exits_1_every_time_and_never_crashes_at_exit)
{
	enum { RUNS = 12 };
	const char *ep = etcdh_endpoint(tls_cluster, 0);
	const char *was = getenv("ASAN_OPTIONS");
	char *saved = was != NULL ? strdup(was) : NULL;
	char slow[1024];
	snprintf(slow, sizeof(slow), "%s%sfast_unwind_on_malloc=0", saved ? saved : "",
	         saved ? ":" : "");
	setenv("ASAN_OPTIONS", slow, 1);
	int crashed = 0, last = 1;
	for (int i = 0; i < RUNS; i++) {
		proc_result r = proc_cli(NULL, NULL, "status", "--endpoints", ep, "--cacert",
		                         certs.other_ca, "--dial-timeout", "2", (char *)NULL);
		if (r.status != 1) {
			crashed++;
			last = r.status;
		}
		proc_result_free(&r);
	}
	if (saved != NULL)
		setenv("ASAN_OPTIONS", saved, 1);
	else
		unsetenv("ASAN_OPTIONS");
	free(saved);
	if (crashed > 0)
		TEST_FAIL("%d of %d runs did not exit 1 (the last: %d)", crashed, RUNS, last);
}

TEST(the_command_refuses_half_a_client_certificate_and_unreadable_files)
{
	const char *ep = etcdh_endpoint(tls_cluster, 0);
	proc_result r = proc_cli(NULL, NULL, "status", "--endpoints", ep, "--cacert",
	                         certs.ca, "--cert", certs.client, (char *)NULL);
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "--key");
	proc_result_free(&r);

	char missing[sizeof(certs.dir) + 20];
	snprintf(missing, sizeof(missing), "%s/no-such-ca.pem", certs.dir);
	r = proc_cli(NULL, NULL, "status", "--endpoints", ep, "--cacert", missing,
	             (char *)NULL);
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, missing);
	proc_result_free(&r);
}

/* gRPC takes any text as a certificate and fails only at the handshake,
 * which read as "no endpoint reachable" once the dial timeout ran out. */
TEST(files_that_are_not_certificates_or_keys_exit_2_at_once_naming_them)
{
	const char *ep = etcdh_endpoint(tls_cluster, 0);
	char junk[sizeof(certs.dir) + 20];
	snprintf(junk, sizeof(junk), "%s/junk.pem", certs.dir);
	FILE *f = fopen(junk, "w");
	CHECK(f != NULL);
	fputs("not a certificate\n", f);
	fclose(f);
	const char *cases[][7] = {
		{ "--cacert", junk, NULL, NULL, NULL, NULL, "no PEM certificate" },
		{ "--cacert", certs.ca, "--cert", junk, "--key", certs.client_key,
		  "no PEM certificate" },
		{ "--cacert", certs.ca, "--cert", certs.client, "--key", junk, "no unencrypted PEM" },
		{ "--cacert", certs.ca, "--cert", certs.client, "--key", certs.server_key,
		  "not the key of the certificate" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char **c = cases[i];
		int64_t t0 = lr_mono_ms();
		proc_result r = proc_cli(NULL, NULL, "status", "--endpoints", ep, c[0], c[1],
		                         c[2], c[3], c[4], c[5], (char *)NULL);
		int64_t took = lr_mono_ms() - t0;
		if (r.status != 2 || strstr(r.err, c[6]) == NULL)
			TEST_FAIL("case %zu: exit %d, expected 2 saying \"%s\": %s", i, r.status, c[6],
			          r.err);
		CHECK(strstr(r.err, junk) != NULL || i == 3);
		CHECK(took < DIAL_S * 1000);
		proc_result_free(&r);
	}
	unlink(junk);
}

/* A name to check means TLS, never a plain connection that checks
 * nothing. */
TEST(a_tls_server_name_alone_means_tls)
{
	proc_result r = proc_cli(NULL, NULL, "status", "--endpoints",
	                         etcdh_endpoint(plain_cluster, 0), "--tls-server-name",
	                         "etcd.test", "--dial-timeout", "2", (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "TLS");
	proc_result_free(&r);
}

TEST(a_user_given_to_an_etcd_without_authentication_is_not_needed)
{
	/* As etcdctl does: etcd says authentication is not enabled, and the
	 * connection goes on without a token. */
	proc_result r = proc_cli(NULL, NULL, "runners", "--endpoints",
	                         etcdh_endpoint(tls_cluster, 0), "--cacert", certs.ca,
	                         "--user", "someone:pw", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
}

TEST_LIST(
	TEST_CASE(tls_with_the_cluster_ca_connects),
	TEST_CASE(tls_with_an_unrelated_ca_fails_at_once_saying_the_certificate_was_not_verified),
	TEST_CASE(tls_checks_the_server_name_and_tls_server_name_overrides_it),
	TEST_CASE(a_plain_client_on_a_tls_port_is_told_to_give_a_ca),
	TEST_CASE(each_endpoint_is_checked_against_its_own_host),
	TEST_CASE(mtls_without_a_client_certificate_fails_saying_one_is_required),
	TEST_CASE(mtls_with_a_certificate_of_another_ca_fails_saying_it_was_not_accepted),
	TEST_CASE(the_command_runs_a_task_over_mutual_tls),
	TEST_CASE(the_command_exits_1_with_the_tls_reason_and_the_endpoint),
	TEST_CASE(a_tls_failure_exits_1_every_time_and_never_crashes_at_exit),
	TEST_CASE(the_command_refuses_half_a_client_certificate_and_unreadable_files),
	TEST_CASE(files_that_are_not_certificates_or_keys_exit_2_at_once_naming_them),
	TEST_CASE(a_tls_server_name_alone_means_tls),
	TEST_CASE(a_user_given_to_an_etcd_without_authentication_is_not_needed),
);

static int setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (pki_make(&certs) != 0)
		return -1;
	etcdh_opts tls = { .members = 1, .tls_cert = certs.server,
		           .tls_key = certs.server_key };
	etcdh_opts mtls = { .members = 1, .tls_cert = certs.named,
		            .tls_key = certs.named_key, .client_ca = certs.ca,
		            .ctl_cert = certs.client, .ctl_key = certs.client_key };
	etcdh_opts local = { .members = 1, .tls_cert = certs.local,
		             .tls_key = certs.local_key };
	etcdh_opts plain = { .members = 1 };
	if (etcdh_start(&tls, &tls_cluster) != 0 || etcdh_start(&local, &local_cluster) != 0 ||
	    etcdh_start(&mtls, &mtls_cluster) != 0 || etcdh_start(&plain, &plain_cluster) != 0)
		return -1;
	return 0;
}

static void teardown(void)
{
	etcdh_destroy(tls_cluster);
	etcdh_destroy(local_cluster);
	etcdh_destroy(mtls_cluster);
	etcdh_destroy(plain_cluster);
	pki_remove(&certs);
}

TEST_MAIN(setup, teardown)
