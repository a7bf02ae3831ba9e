/* test_example.c - examples/agent.c killed mid-act resumes from its last
 * intermediate checkpoint on another runner. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd_harness.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;
static char dir[256];

static pid_t agent(const char *name, const char *arg1, const char *arg2, const char *arg3)
{
	char log[320];
	snprintf(log, sizeof(log), "%s/%s.log", dir, name);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		setenv("LEASERUN_ENDPOINTS", etcdh_endpoints(cluster), 1);
		setenv("LEASERUN_PREFIX", "/agent-example/", 1);
		setenv("AGENT_NAME", name, 1);
		setenv("AGENT_ACTION_MS", "200", 1);
		const char *bin = getenv("AGENT_BIN");
		execl(bin, bin, arg1, arg2, arg3, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The number of finished actions in the stored checkpoint, and its runner. */
static size_t checkpointed(lr_client *c, const char *id, char *runner, size_t size)
{
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_CHECKPOINTS, id, key);
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	size_t n = 0;
	if (r.n == 1) {
		json_t *v = json_loadb(r.kvs[0].value, r.kvs[0].value_len, 0, NULL);
		n = json_array_size(json_object_get(json_object_get(v, "state"), "done"));
		snprintf(runner, size, "%s", json_string_value(json_object_get(v, "runner")));
		json_decref(v);
	}
	lr_range_result_free(&r);
	return n;
}

static bool log_has(const char *name, const char *text)
{
	char path[320], line[1024];
	snprintf(path, sizeof(path), "%s/%s.log", dir, name);
	FILE *f = fopen(path, "r");
	bool found = false;
	while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
		found = strstr(line, text) != NULL;
	if (f != NULL)
		fclose(f);
	return found;
}

TEST(agent_killed_mid_act_resumes_from_its_last_checkpoint_elsewhere)
{
	lr_client_opts o = { .endpoints = etcdh_endpoints(cluster), .prefix = "/agent-example/" };
	lr_client *c;
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	pid_t a = agent("ada", "run", NULL, NULL);
	lr_sleep_ms(500); /* ada registers first and takes the task */
	pid_t sub = agent("submitter", "submit", "write the report", "12");
	CHECK(waitpid(sub, NULL, 0) == sub);
	char id[LR_ID_SIZE] = "";
	char path[320];
	snprintf(path, sizeof(path), "%s/submitter.log", dir);
	FILE *f = fopen(path, "r");
	CHECK(f != NULL && fgets(id, sizeof(id), f) != NULL);
	fclose(f);
	id[strcspn(id, "\n")] = '\0';

	char runner[64] = "";
	int64_t end = lr_mono_ms() + 15000;
	while (checkpointed(c, id, runner, sizeof(runner)) < 4 && lr_mono_ms() < end)
		lr_sleep_ms(20);
	CHECK_STR(runner, "ada");
	pid_t b = agent("bob", "run", NULL, NULL);
	lr_sleep_ms(300);
	size_t at_kill = checkpointed(c, id, runner, sizeof(runner));
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	printf("# ada killed after %zu of 12 actions\n", at_kill);

	lr_task_status st;
	end = lr_mono_ms() + 30000;
	for (;;) {
		CHECK_OK(lr_task_get(c, id, &st, &err), &err);
		if (st.state >= LR_TASK_SUCCEEDED || lr_mono_ms() > end)
			break;
		lr_task_status_clear(&st);
		lr_sleep_ms(50);
	}
	CHECK_INT(st.state, ==, LR_TASK_SUCCEEDED);
	lr_task_status_clear(&st);

	/* bob went on from the checkpoint, and every action is there once. */
	char msg[64];
	snprintf(msg, sizeof(msg), "resuming after %zu finished actions", at_kill);
	bool resumed = false;
	for (size_t k = at_kill; k <= at_kill + 1 && !resumed; k++) {
		snprintf(msg, sizeof(msg), "resuming after %zu finished actions", k);
		resumed = log_has("bob", msg);
	}
	CHECK(resumed);
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_DONE, id, key);
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	CHECK_INT(r.n, ==, 1);
	json_t *done = json_loadb(r.kvs[0].value, r.kvs[0].value_len, 0, NULL);
	json_t *state = json_object_get(done, "state");
	CHECK_INT(json_array_size(json_object_get(state, "done")), ==, 12);
	CHECK_HAS(json_string_value(json_object_get(state, "report")), "12 actions done");
	CHECK_HAS(json_string_value(json_object_get(state, "report")), "bob");
	json_decref(done);
	lr_range_result_free(&r);
	kill(b, SIGTERM);
	CHECK(waitpid(b, NULL, 0) == b);
	lr_client_close(c);
}

static int setup(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/agent-example-XXXXXX", tmp ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL)
		return -1;
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void)
{
	etcdh_destroy(cluster);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

TEST_LIST(TEST_CASE(agent_killed_mid_act_resumes_from_its_last_checkpoint_elsewhere));
TEST_MAIN(setup, teardown)
