/* test_chaos.c - four `leaserun worker` processes on a three-member etcd
 * cluster, for about 22 s under random SIGKILL, SIGSTOP/SIGCONT and graceful
 * restarts of runners, with the etcd leader killed and restarted once; and
 * again with etcd members paused (SIGSTOP) for seconds at a time instead,
 * the leader among them, while the runners keep their leases; and a third
 * time, shorter, with 16 workers per runner, so that every task is in some
 * runner's hands at once and their claims, commits and releases share
 * requests (group commit) whose txns succeed and fail side by side.
 * Afterwards every task has succeeded, every committed step ran to its end
 * under the claim that committed it, and etcd's history shows no claim
 * overwritten and no write outside the live claim.
 *
 * The schedule is drawn from a seed: the time, or CHAOS_SEED to replay.
 * Everything runs on the main thread (runners die with it). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "marks.h"
#include "test.h"

#define RUNNERS 4
#define TASKS 48
#define STEPS 4
#define EARLY_TASKS 16          /* submitted before the chaos; the rest during it */
#define CHAOS_MS 22000
#define FINISH_MS 90000         /* after the chaos, for every task to finish */
#define STOP_MS 10000           /* for a runner to exit after SIGTERM */

static const char *const runner_flags[] = { "--concurrency", "2", "--grace", "1", NULL };
static const char *const wide_flags[] = { "--concurrency", "16", "--grace", "1", NULL };

static etcdh_cluster *cluster;
static lr_err err;

/* ---- the seeded schedule ------------------------------------------------ */

static uint64_t rng;

static uint64_t rnd(void)
{
	/* xorshift64* */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

static int64_t rnd_between(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static uint64_t pick_seed(void)
{
	const char *s = getenv("CHAOS_SEED");
	uint64_t seed = s != NULL ? strtoull(s, NULL, 10) : (uint64_t)lr_wall_ms();
	printf("# chaos seed %" PRIu64 " (replay with CHAOS_SEED=%" PRIu64 ")\n", seed, seed);
	fflush(stdout);
	rng = seed != 0 ? seed : 1;
	return seed;
}

/* ---- runners ------------------------------------------------------------ */

enum slot_state { SLOT_UP, SLOT_PAUSED, SLOT_DOWN, SLOT_STOPPING };

struct slot {
	enum slot_state state;
	int64_t until;           /* PAUSED: resume; DOWN: restart; STOPPING: give up */
	int generation;          /* a restarted runner gets a new name */
};

struct chaos {
	fleet f;
	int64_t start;           /* of the chaos, monotonic ms */
	struct slot slot[RUNNERS];
	const char *const *flags; /* of every runner */
	int64_t chaos_ms;        /* how long the chaos lasts */
	int early;               /* tasks submitted before it */
	int kills, pauses, stops, restarts, submit_retries;
	int failures;            /* runners that exited on their own or badly */
	bool closing;            /* the final stop: no more restarts */
	int down_member;         /* the etcd member killed, -1 when all run */
	bool pause_members;      /* pause etcd members instead of killing one */
	int paused_member;       /* the etcd member paused, -1 when none */
	int member_pauses;
};

static void note(struct chaos *ch, const char *fmt, const char *name)
{
	fprintf(stderr, "  +%5lld ms ", (long long)(lr_mono_ms() - ch->start));
	fprintf(stderr, fmt, name);
	fputc('\n', stderr);
}

static void runner_failed(struct chaos *ch, int i, const char *why, int status)
{
	ch->failures++;
	fprintf(stderr, "  runner %s %s (status %d); its log: %s/%s.log, ending:\n",
	        ch->f.names[i], why, status, ch->f.dir, ch->f.names[i]);
	/* The scratch directory may not outlive the run (CI): its last lines
	 * here. */
	char path[320], lines[8][512];
	snprintf(path, sizeof(path), "%s/%s.log", ch->f.dir, ch->f.names[i]);
	FILE *fp = fopen(path, "r");
	int n = 0;
	while (fp != NULL && fgets(lines[n % 8], sizeof(lines[0]), fp) != NULL)
		n++;
	if (fp != NULL)
		fclose(fp);
	for (int k = n > 8 ? n - 8 : 0; k < n; k++)
		fprintf(stderr, "    %s", lines[k % 8]);
}

static void slot_spawn(struct chaos *ch, int i, bool wait)
{
	char name[32];
	snprintf(name, sizeof(name), "r%d.%d", i, ch->slot[i].generation++);
	if (wait)
		fleet_start_named(&ch->f, i, name, NULL, ch->flags);
	else
		fleet_spawn(&ch->f, i, name, NULL, ch->flags);
	ch->slot[i].state = SLOT_UP;
}

/* Reap runner i if it has exited: returns true with its wait status. */
static bool reaped(struct chaos *ch, int i, int *status)
{
	if (ch->f.pids[i] <= 0 || waitpid(ch->f.pids[i], status, WNOHANG) != ch->f.pids[i])
		return false;
	ch->f.pids[i] = 0;
	return true;
}

static int up_count(struct chaos *ch)
{
	int n = 0;
	for (int i = 0; i < RUNNERS; i++)
		n += ch->slot[i].state == SLOT_UP;
	return n;
}

/* One random blow at a running runner, keeping at least one serving. */
static void strike(struct chaos *ch)
{
	if (up_count(ch) < 2)
		return;
	int i;
	do
		i = (int)rnd_between(0, RUNNERS - 1);
	while (ch->slot[i].state != SLOT_UP);
	struct slot *s = &ch->slot[i];
	int64_t now = lr_mono_ms();
	int64_t what = rnd_between(0, 99);
	/* A runner that is still connecting has no SIGTERM handler yet (nor
	 * a lease or a claim): a graceful stop needs a registered runner. */
	if (what >= 75 && !fleet_registered(&ch->f, ch->f.names[i]))
		what = 0;
	if (what < 40) {
		note(ch, "SIGKILL %s", ch->f.names[i]);
		kill(ch->f.pids[i], SIGKILL);
		waitpid(ch->f.pids[i], NULL, 0);
		ch->f.pids[i] = 0;
		s->state = SLOT_DOWN;
		s->until = now + rnd_between(300, 3000);
		ch->kills++;
	} else if (what < 75) {
		note(ch, "SIGSTOP %s", ch->f.names[i]);
		kill(ch->f.pids[i], SIGSTOP);
		s->state = SLOT_PAUSED;
		s->until = now + rnd_between(500, 4000); /* TTL is 2 s: both sides */
		ch->pauses++;
	} else {
		note(ch, "SIGTERM %s", ch->f.names[i]);
		kill(ch->f.pids[i], SIGTERM);
		s->state = SLOT_STOPPING;
		s->until = now + STOP_MS;
		ch->stops++;
	}
}

/* Move every runner along its own timeline: resume, restart, reap. */
static void tend(struct chaos *ch)
{
	int64_t now = lr_mono_ms();
	for (int i = 0; i < RUNNERS; i++) {
		struct slot *s = &ch->slot[i];
		int status = 0;
		if (s->state == SLOT_PAUSED && now >= s->until) {
			note(ch, "SIGCONT %s", ch->f.names[i]);
			kill(ch->f.pids[i], SIGCONT);
			s->state = SLOT_UP;
		} else if (s->state == SLOT_DOWN && now >= s->until && !ch->closing) {
			slot_spawn(ch, i, false);
			note(ch, "started %s", ch->f.names[i]);
			ch->restarts++;
		} else if (s->state == SLOT_STOPPING && reaped(ch, i, &status)) {
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				runner_failed(ch, i, "did not exit 0 after SIGTERM", status);
			s->state = SLOT_DOWN;
			s->until = now + rnd_between(0, 1500);
		} else if (s->state == SLOT_STOPPING && now >= s->until) {
			runner_failed(ch, i, "did not exit within 10 s of SIGTERM", -1);
			kill(ch->f.pids[i], SIGKILL);
		} else if ((s->state == SLOT_UP || s->state == SLOT_PAUSED) &&
		           reaped(ch, i, &status)) {
			runner_failed(ch, i, "exited on its own", status);
			s->state = SLOT_DOWN;
			s->until = now;
		}
	}
}

/* After the chaos: every runner serving again. */
static void revive_all(struct chaos *ch)
{
	for (int i = 0; i < RUNNERS; i++) {
		struct slot *s = &ch->slot[i];
		if (s->state == SLOT_PAUSED) {
			kill(ch->f.pids[i], SIGCONT);
			s->state = SLOT_UP;
		}
		while (s->state == SLOT_STOPPING) {
			tend(ch);
			lr_sleep_ms(20);
		}
		if (s->state == SLOT_DOWN) {
			slot_spawn(ch, i, false);
			ch->restarts++;
		}
	}
}

/* Graceful stop of every runner: each must exit 0. */
static void stop_all(struct chaos *ch)
{
	ch->closing = true;
	for (int i = 0; i < RUNNERS; i++) {
		if (ch->slot[i].state == SLOT_DOWN || ch->f.pids[i] <= 0)
			continue; /* never kill(0, ...): that is our process group */
		kill(ch->f.pids[i], SIGCONT);
		kill(ch->f.pids[i], SIGTERM);
		ch->slot[i].state = SLOT_STOPPING;
		ch->slot[i].until = lr_mono_ms() + STOP_MS;
	}
	for (int i = 0; i < RUNNERS; i++)
		while (ch->slot[i].state == SLOT_STOPPING) {
			tend(ch);
			lr_sleep_ms(20);
		}
}

/* ---- etcd --------------------------------------------------------------- */

static void kill_leader(struct chaos *ch)
{
	int leader = etcdh_leader(cluster);
	if (leader < 0)
		return; /* an election is going on: try again later */
	char what[32];
	snprintf(what, sizeof(what), "%d (%s)", leader, etcdh_endpoint(cluster, leader));
	note(ch, "SIGKILL etcd leader, member %s", what);
	CHECK_INT(etcdh_kill(cluster, leader), ==, 0);
	ch->down_member = leader;
}

static void restart_member(struct chaos *ch)
{
	note(ch, "restarting etcd member %s", etcdh_endpoint(cluster, ch->down_member));
	CHECK_INT(etcdh_restart(cluster, ch->down_member), ==, 0);
	note(ch, "etcd member %s is back", etcdh_endpoint(cluster, ch->down_member));
	ch->down_member = -1;
}

/* SIGSTOP a member, the leader as often as any, for seconds: it keeps
 * its connections but answers nothing. */
static void pause_member(struct chaos *ch)
{
	int m = (int)rnd_between(0, 2);
	int leader = etcdh_leader(cluster);
	char what[64];
	snprintf(what, sizeof(what), "%d (%s)%s", m, etcdh_endpoint(cluster, m),
	         m == leader ? ", the leader" : "");
	note(ch, "SIGSTOP etcd member %s", what);
	CHECK_INT(etcdh_pause(cluster, m), ==, 0);
	ch->paused_member = m;
	ch->member_pauses++;
}

static void resume_member(struct chaos *ch)
{
	note(ch, "SIGCONT etcd member %s", etcdh_endpoint(cluster, ch->paused_member));
	CHECK_INT(etcdh_resume(cluster, ch->paused_member), ==, 0);
	ch->paused_member = -1;
}

/* ---- tasks -------------------------------------------------------------- */

static void task_id(int t, char id[16])
{
	snprintf(id, 16, "c%02d", t);
}

static int task_index(const char *id)
{
	int t = -1;
	if (sscanf(id, "c%d", &t) != 1 || t < 0 || t >= TASKS)
		return -1;
	return t;
}

/* Four steps, each leaving a start mark, a heartbeat every 50 ms and an end
 * mark: three of 0.1 to 0.4 s and one of 0.5 to 2 s, long enough to be cut short by a graceful stop
 * (grace 1 s) or by the lease loss of a runner paused past its TTL. A
 * submit whose reply is lost (the leader died) is retried: the same spec
 * again is a success. */
static void submit_task(struct chaos *ch, int t)
{
	char id[16], spec[4096], out[LR_ID_SIZE];
	task_id(t, id);
	int n = snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"max_attempts\":100,\"steps\":[", id);
	int64_t slow = rnd_between(0, STEPS - 1);
	for (int s = 0; s < STEPS; s++) {
		int64_t ms = s == slow ? rnd_between(500, 2000) : rnd_between(100, 400);
		n += snprintf(spec + n, sizeof(spec) - (size_t)n,
		              "%s{\"name\":\"s%d\",\"run\":\"" MARK_START "; i=0; while [ $i -lt %d ]; "
		              "do " MARK_HB "; sleep 0.05; i=$((i+1)); done; " MARK_END "\"}",
		              s ? "," : "", s, (int)(ms / 50));
	}
	snprintf(spec + n, sizeof(spec) - (size_t)n, "]}");
	int64_t end = lr_mono_ms() + 30000;
	while (lr_submit_text(ch->f.client, spec, strlen(spec), NULL, out, NULL, &err) != 0) {
		if (err.code == LR_EINVAL || err.code == LR_EEXIST || lr_mono_ms() > end)
			TEST_FAIL("submit %s: %s", id, err.msg);
		ch->submit_retries++;
		lr_sleep_ms(100);
	}
}

/* Number of tasks in a final state; *succeeded of them succeeded. */
static int finished(struct chaos *ch, int *succeeded)
{
	lr_task_status *list = NULL;
	size_t n = 0;
	*succeeded = 0;
	if (lr_task_list(ch->f.client, -1, 0, &list, &n, &err) != 0)
		return -1; /* etcd busy: ask again */
	int done = 0;
	for (size_t i = 0; i < n; i++) {
		done += list[i].state >= LR_TASK_SUCCEEDED;
		*succeeded += list[i].state == LR_TASK_SUCCEEDED;
		if (list[i].state == LR_TASK_FAILED || list[i].state == LR_TASK_CANCELLED)
			fprintf(stderr, "  task %s ended %s: %s\n", list[i].id,
			        lr_task_state_name(list[i].state),
			        list[i].error ? list[i].error : "");
	}
	lr_task_list_free(list, n);
	return done;
}

/* ---- the chaos ---------------------------------------------------------- */

static void run_chaos(struct chaos *ch)
{
	int64_t leader_kill_at = ch->start + rnd_between(ch->chaos_ms / 4, ch->chaos_ms / 2);
	int64_t member_back_at = 0;
	bool leader_killed = false;
	int64_t next_pause = ch->start + rnd_between(1000, 4000);
	int64_t next_strike = ch->start + rnd_between(300, 1200);
	int next_task = ch->early;
	for (;;) {
		int64_t now = lr_mono_ms();
		if (now - ch->start >= ch->chaos_ms)
			break;
		tend(ch);
		if (now >= next_strike) {
			strike(ch);
			next_strike = now + rnd_between(300, 1200);
		}
		/* The late tasks arrive over the first 80 % of the chaos. */
		if (next_task < TASKS &&
		    now >= ch->start + (int64_t)(next_task - ch->early) * (ch->chaos_ms * 8 / 10) /
		                           (TASKS - ch->early))
			submit_task(ch, next_task++);
		if (ch->pause_members && ch->paused_member < 0 && now >= next_pause) {
			pause_member(ch);
			member_back_at = now + rnd_between(2000, 6000);
		}
		if (ch->paused_member >= 0 && now >= member_back_at) {
			resume_member(ch);
			next_pause = now + rnd_between(1000, 4000);
		}
		if (!ch->pause_members && !leader_killed && now >= leader_kill_at) {
			kill_leader(ch);
			leader_killed = ch->down_member >= 0;
			member_back_at = now + rnd_between(2000, 5000);
		}
		if (ch->down_member >= 0 && now >= member_back_at)
			restart_member(ch);
		lr_sleep_ms(20);
	}
	while (next_task < TASKS)
		submit_task(ch, next_task++);
	if (ch->down_member >= 0)
		restart_member(ch);
	if (ch->paused_member >= 0)
		resume_member(ch);
	CHECK(leader_killed || ch->pause_members);
}

/* ---- the check ---------------------------------------------------------- */

/* What etcd's history says was committed: per step, the fence and runner
 * of the write that committed it. */
struct ledger {
	int commits[TASKS][STEPS];
	int64_t fence[TASKS][STEPS];
	char runner[TASKS][STEPS][64];
	size_t committed;
	size_t strays;            /* writes for a task this test never made */
	int64_t rev;              /* the revision of the last write seen */
	int rev_task;             /* its task; -2 once a second task wrote in it */
	size_t shared_revs;       /* revisions holding writes of several tasks */
};

static void on_write(void *user, const history_event *e)
{
	struct ledger *l = user;
	int t = task_index(e->task);
	if (t < 0) {
		l->strays++;
		return;
	}
	if (e->revision != l->rev) {
		l->rev = e->revision;
		l->rev_task = t;
	} else if (l->rev_task != t && l->rev_task != -2) {
		l->shared_revs++; /* one request carried several tasks' txns */
		l->rev_task = -2;
	}
	if (e->committed < 0 || e->committed >= STEPS)
		return;
	int s = (int)e->committed;
	l->commits[t][s]++;
	l->fence[t][s] = e->fence;
	snprintf(l->runner[t][s], sizeof(l->runner[t][s]), "%s", e->runner ? e->runner : "");
	l->committed++;
}

/* The marks: starts and ends of step executions, and for each step whether
 * the execution under the claim that committed it reached its end mark. */
static void tally_marks(struct chaos *ch, const struct ledger *l, size_t *starts,
                        size_t *ends, bool ran[TASKS][STEPS])
{
	mark *m = NULL;
	size_t n = 0;
	CHECK_INT(marks_read(ch->f.dir, &m, &n), ==, 0);
	*starts = *ends = 0;
	for (size_t i = 0; i < n; i++) {
		int t = task_index(m[i].task);
		int s = (int)m[i].step;
		if (t < 0 || s < 0 || s >= STEPS)
			continue;
		if (m[i].kind == MARK_KIND_START)
			(*starts)++;
		if (!m[i].end)
			continue;
		(*ends)++;
		if (m[i].fence == l->fence[t][s] && strcmp(m[i].runner, l->runner[t][s]) == 0)
			ran[t][s] = true;
	}
	free(m);
}

/* Every step of every task committed once, by a runner whose execution of
 * that step under that claim reached its end mark. */
static void check_steps_ran(const struct ledger *l, bool ran[TASKS][STEPS])
{
	for (int t = 0; t < TASKS; t++)
		for (int s = 0; s < STEPS; s++) {
			if (l->commits[t][s] != 1)
				TEST_FAIL("step %d of c%02d committed %d times", s, t, l->commits[t][s]);
			if (!ran[t][s])
				TEST_FAIL("step %d of c%02d committed by %s under fence %" PRId64
				          " without an end mark from that execution", s, t,
				          l->runner[t][s], l->fence[t][s]);
		}
}

static void chaos_run(const char *name, bool pause_members, const char *const *flags,
                      int64_t chaos_ms)
{
	pick_seed();
	static struct chaos ch;
	memset(&ch, 0, sizeof(ch));
	ch.flags = flags;
	ch.chaos_ms = chaos_ms;
	/* Many workers: every task at once, so that claims race in shared
	 * requests. */
	ch.early = flags == wide_flags ? TASKS : EARLY_TASKS;
	ch.down_member = -1;
	ch.paused_member = -1;
	ch.pause_members = pause_members;
	fleet_init(&ch.f, etcdh_endpoints(cluster), name);
	for (int i = 0; i < RUNNERS; i++)
		slot_spawn(&ch, i, true);
	for (int t = 0; t < ch.early; t++)
		submit_task(&ch, t);

	ch.start = lr_mono_ms();
	run_chaos(&ch);
	revive_all(&ch);
	int64_t calm = lr_mono_ms();
	int done = 0, succeeded = 0;
	while (done < TASKS && lr_mono_ms() - calm < FINISH_MS) {
		tend(&ch);
		lr_sleep_ms(250);
		done = finished(&ch, &succeeded);
	}
	printf("# all tasks finished %lld ms after the chaos ended\n",
	       (long long)(lr_mono_ms() - calm));
	stop_all(&ch);

	static struct ledger l;
	memset(&l, 0, sizeof(l));
	history_report rep;
	CHECK_INT(history_replay(lr_client_etcd(ch.f.client), ch.f.prefix, on_write, &l, &rep),
	          ==, 0);
	size_t starts = 0, ends = 0;
	static bool ran[TASKS][STEPS];
	memset(ran, 0, sizeof(ran));
	tally_marks(&ch, &l, &starts, &ends, ran);
	/* No two executions of one step alive at once, whatever happened to
	 * their runners: from the heartbeats. */
	mark *marks = NULL;
	size_t n_marks = 0;
	CHECK_INT(marks_read(ch.f.dir, &marks, &n_marks), ==, 0);
	char why[512];
	int64_t gap = 0;
	size_t overlaps = marks_overlaps(marks, n_marks, &gap, why, sizeof(why));
	free(marks);
	if (gap != INT64_MAX)
		printf("# closest executions of one step: the old one's last heartbeat %.1f ms "
		       "before the new one's first\n", (double)gap / 1e6);
	if (overlaps > 0)
		TEST_FAIL("%zu overlapping executions; first: %s", overlaps, why);
	printf("# kills %d, pauses %d, graceful restarts %d, restarts %d, etcd leader "
	       "kills %d, etcd member pauses %d, submit retries %d\n", ch.kills, ch.pauses,
	       ch.stops, ch.restarts, pause_members ? 0 : 1, ch.member_pauses,
	       ch.submit_retries);
	printf("# claims %zu, step executions %zu (%zu reached their end), re-executions "
	       "%zu, commits %zu, violations %zu, revisions with writes of several tasks "
	       "%zu\n", rep.claims, starts, ends,
	       starts > (size_t)TASKS * STEPS ? starts - (size_t)TASKS * STEPS : 0,
	       l.committed, rep.violations, l.shared_revs);
	if (rep.violations > 0)
		TEST_FAIL("history: %zu violations; first: %s", rep.violations, rep.first);
	CHECK_INT(ch.failures, ==, 0);
	CHECK_INT(done, ==, TASKS);
	CHECK_INT(succeeded, ==, TASKS);
	CHECK_INT(rep.finals, ==, TASKS);
	CHECK_INT(l.strays, ==, 0);
	CHECK_INT(l.committed, ==, TASKS * STEPS);
	check_steps_ran(&l, ran);
	if (ch.flags == wide_flags)
		CHECK(l.shared_revs > 0); /* group commit was at work */
	fleet_destroy(&ch.f);
}

TEST(every_task_succeeds_through_twenty_seconds_of_runner_and_leader_chaos)
{
	chaos_run("chaos", false, runner_flags, CHAOS_MS);
}

TEST(every_task_succeeds_while_etcd_members_pause_for_seconds)
{
	chaos_run("chaos-pause", true, runner_flags, CHAOS_MS);
}

TEST(every_task_succeeds_through_chaos_with_sixteen_workers_per_runner)
{
	chaos_run("chaos-wide", false, wide_flags, CHAOS_MS * 2 / 3);
}

/* Two of the three members paused: etcd has no quorum, so the lease
 * cannot be granted nor the task list read, for longer than a call's
 * deadline (5 s). A runner started then waits, and serves once etcd is
 * whole again. */
TEST(a_runner_started_while_etcd_has_no_quorum_waits_for_it)
{
	static fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "no-quorum");
	int leader = etcdh_leader(cluster);
	int live = leader >= 0 ? leader : 0; /* keep one; pause the others */
	for (int m = 0; m < 3; m++)
		if (m != live)
			CHECK_INT(etcdh_pause(cluster, m), ==, 0);
	fleet_spawn(&f, 0, "nq", NULL, runner_flags);
	lr_sleep_ms(7000);
	int status = 0;
	pid_t gone = waitpid(f.pids[0], &status, WNOHANG);
	for (int m = 0; m < 3; m++)
		if (m != live)
			CHECK_INT(etcdh_resume(cluster, m), ==, 0);
	if (gone == f.pids[0]) {
		f.pids[0] = 0;
		TEST_FAIL("the runner exited (status %d) while etcd had no quorum; its log: "
		          "%s/nq.log", status, f.dir);
	}
	for (int i = 0; i < 100 && etcdh_leader(cluster) < 0; i++)
		lr_sleep_ms(100);
	fleet_submit(&f, "after",
	             "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	CHECK(fleet_wait_state(&f, "after", LR_TASK_SUCCEEDED, 20000) >= 0);
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, STOP_MS), ==, 0);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 3 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

TEST_LIST(
	TEST_CASE(every_task_succeeds_through_twenty_seconds_of_runner_and_leader_chaos),
	TEST_CASE(every_task_succeeds_while_etcd_members_pause_for_seconds),
	TEST_CASE(every_task_succeeds_through_chaos_with_sixteen_workers_per_runner),
	TEST_CASE(a_runner_started_while_etcd_has_no_quorum_waits_for_it),
);
TEST_MAIN(setup, teardown)
