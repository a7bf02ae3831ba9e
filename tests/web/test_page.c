/* test_page.c - the page of `leaserun web` in headless Chromium, as a
 * person sees it: changes appear without a reload, runners come and go,
 * the task table is on the screenshot, ten thousand tasks stay usable.
 * Set WEB_SCREENSHOT=FILE.png to keep the screenshot. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "records/spec.h"
#include "cdp.h"
#include "fleet.h"
#include "servers.h"
#include "test.h"

static lr_err err;

#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"

/* What every page test has: a fleet prefix, `leaserun web` on it, and a
 * browser showing the page. */
struct page {
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE];
	cdp b;
};

static void page_open(struct page *p, const char *name, bool allow_cancel)
{
	char url[128];

	fleet_init(&p->f, etcdh_endpoints(web_etcd), name);
	web_start(&p->web, &p->f, allow_cancel, p->addr);
	cdp_launch(&p->b, p->f.dir, 1400, 900);
	snprintf(url, sizeof(url), "http://%s/", p->addr);
	cdp_navigate(&p->b, url);
	/* Live once the snapshot came; a mark that a reload would erase. */
	CHECK(cdp_wait_for(&p->b, 10000, "document.getElementById('conn').dataset.state === 'live'") >= 0);
	cdp_run(&p->b, "window.loadedOnce = true");
}

static void page_close(struct page *p)
{
	/* The same document all along: nothing reloaded it. */
	CHECK(cdp_eval_bool(&p->b, "window.loadedOnce === true"));
	cdp_close(&p->b);
	proc_stop(&p->web, SIGTERM, 5000);
	CHECK_INT(p->web.status, ==, 0);
	fleet_destroy(&p->f);
}

static const char row_js[] = "document.querySelector('#tasks tr[data-id=\"%s\"]')";
/* Whether the cancel button takes room on the screen. */
static const char cancel_shown_js[] =
    "getComputedStyle(document.getElementById('detail-actions')).display !== 'none' &&"
    " document.getElementById('detail-cancel').getClientRects().length > 0";

TEST(a_task_submitted_after_the_page_loaded_appears_within_a_second)
{
	struct page p;
	page_open(&p, "appears", false);
	CHECK(cdp_eval_int(&p.b, "document.querySelectorAll('#tasks tbody tr').length") == 0);
	int64_t t0 = lr_mono_ms();
	fleet_submit(&p.f, "fresh-1", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "]}");
	long long took = cdp_wait_for(&p.b, 5000, row_js, "fresh-1");
	printf("# the row appeared %lld ms after the submit returned (%lld ms after it began)\n",
	       took, (long long)(lr_mono_ms() - t0));
	CHECK(took >= 0);
	CHECK(took <= 1000);
	char *state = cdp_eval_str(&p.b, "document.querySelector('#tasks tr[data-id=\"fresh-1\"] .badge').textContent");
	CHECK_STR(state, "pending"); /* no runner here */
	free(state);
	page_close(&p);
}

TEST(a_running_tasks_progress_moves_without_a_reload)
{
	struct page p;
	page_open(&p, "progress", false);
	fleet_start(&p.f, 0, NULL);
	fleet_submit(&p.f, "moving", "{\"id\":\"%s\",\"steps\":[" STEP("one", "sleep 1") ","
	             STEP("two", "sleep 1") "," STEP("three", "sleep 1") "]}");
	/* The page records every step text it shows, to be read at the end. */
	cdp_run(&p.b, "window.seen = []; setInterval(() => {"
	               " const c = document.querySelector('#tasks tr[data-id=\"moving\"] .c-step');"
	               " if (c && window.seen[window.seen.length - 1] !== c.textContent)"
	               "  window.seen.push(c.textContent); }, 10)");
	static const char step_js[] = "window.seen.includes('%s')";
	CHECK(cdp_wait_for(&p.b, 10000, step_js, "1/3 one") >= 0);
	CHECK(cdp_wait_for(&p.b, 5000, step_js, "2/3 two") >= 0);
	CHECK(cdp_wait_for(&p.b, 5000, step_js, "3/3 three") >= 0);
	CHECK(cdp_wait_for(&p.b, 5000,
	                   "document.querySelector('#tasks tr[data-id=\"moving\"] .badge').textContent === 'succeeded'") >= 0);
	char *width = cdp_eval_str(&p.b, "document.querySelector('#tasks tr[data-id=\"moving\"] .bar > div').style.width");
	CHECK_STR(width, "100%");
	free(width);
	page_close(&p);
}

TEST(a_killed_runner_leaves_the_runners_list)
{
	struct page p;
	page_open(&p, "killed", false);
	fleet_start(&p.f, 0, NULL);
	fleet_start(&p.f, 1, NULL);
	static const char runner_js[] = "document.querySelector('#runners tr[data-name=\"%s\"]')";
	CHECK(cdp_wait_for(&p.b, 5000, runner_js, "r0") >= 0);
	CHECK(cdp_wait_for(&p.b, 5000, runner_js, "r1") >= 0);
	kill(p.f.pids[0], SIGKILL);
	CHECK(fleet_wait(&p.f, 0, 5000) != -2);
	long long took = cdp_wait_for(&p.b, 8000, "!%s", "document.querySelector('#runners tr[data-name=\"r0\"]')");
	printf("# a SIGKILLed runner (TTL 2 s) left the list after %lld ms\n", took);
	CHECK(took >= 0);
	CHECK(cdp_eval_bool(&p.b, "!!%s", "document.querySelector('#runners tr[data-name=\"r1\"]')"));
	page_close(&p);
}

/* Count, in the screenshot, the pixels inside the task table that are
 * dark (text) and green (a "succeeded" badge); done by the page's own
 * canvas, which decodes the PNG. */
static const char analyse_js[] =
    "(async () => {"
    "  const box = document.getElementById('tasks').getBoundingClientRect();"
    "  const img = new Image();"
    "  img.src = 'data:image/png;base64,%s';"
    "  await img.decode();"
    "  const c = document.createElement('canvas');"
    "  c.width = img.width; c.height = img.height;"
    "  const g = c.getContext('2d');"
    "  g.drawImage(img, 0, 0);"
    "  const d = g.getImageData(box.x, box.y, box.width, box.height).data;"
    "  let dark = 0, green = 0;"
    "  for (let i = 0; i < d.length; i += 4) {"
    "    if (d[i] + d[i+1] + d[i+2] < 384) dark++;"
    "    if (d[i+1] > 100 && d[i] < 60 && d[i+2] < 110) green++;"
    "  }"
    "  return {w: img.width, h: img.height, dark, green, area: d.length / 4,"
    "          rows: document.querySelectorAll('#tasks tbody tr').length};"
    "})()";

TEST(locks_held_and_waited_for_appear_and_go_without_a_reload)
{
	struct page p;
	page_open(&p, "locks", false);
	CHECK(cdp_eval_bool(&p.b, "!document.getElementById('locks-none').hidden"));
	fleet_start(&p.f, 0, (const char *const[]){ "--concurrency", "2", NULL });
	fleet_submit(&p.f, "holder", "{\"id\":\"%s\",\"steps\":[" STEP("edit", "sleep 2")
	             "],\"locks\":{\"agents/support\":\"X\"}}");
	CHECK_INT(fleet_wait_state(&p.f, "holder", LR_TASK_RUNNING, 10000) >= 0, ==, 1);
	fleet_submit(&p.f, "reader", "{\"id\":\"%s\",\"steps\":[" STEP("read", "true")
	             "],\"locks\":{\"agents\":\"S\"}}");
	static const char table_has[] =
	    "document.getElementById('locks').textContent.includes('%s')";
	CHECK(cdp_wait_for(&p.b, 3000, table_has, "agents/support") >= 0);
	CHECK(cdp_wait_for(&p.b, 3000, table_has, "task holder on") >= 0);
	CHECK(cdp_wait_for(&p.b, 3000, table_has, "IX agents held by task holder") >= 0);
	/* Both done: nothing held, nothing asked for. */
	CHECK(fleet_wait_state(&p.f, "reader", LR_TASK_SUCCEEDED, 15000) >= 0);
	CHECK(cdp_wait_for(&p.b, 3000, "!document.getElementById('locks-none').hidden") >= 0);
	page_close(&p);
}

TEST(the_screenshot_shows_the_task_table)
{
	struct page p;
	page_open(&p, "shot", false);
	fleet_start(&p.f, 0, NULL);
	for (int i = 0; i < 5; i++) {
		char id[16];
		snprintf(id, sizeof(id), "shot-%d", i);
		fleet_submit(&p.f, id, "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "]}");
	}
	CHECK(cdp_wait_for(&p.b, 15000, "document.querySelectorAll('#tasks .badge.succeeded').length === 5") >= 0);
	/* And a lock held, another task waiting for it. */
	fleet_submit(&p.f, "edit-prompts", "{\"id\":\"%s\",\"steps\":[" STEP("edit", "sleep 5")
	             "],\"locks\":{\"agents/support/prompts\":\"X\"},\"limits\":{\"gpu\":4}}");
	CHECK(fleet_wait_state(&p.f, "edit-prompts", LR_TASK_RUNNING, 10000) >= 0);
	fleet_submit(&p.f, "snapshot", "{\"id\":\"%s\",\"steps\":[" STEP("copy", "true")
	             "],\"locks\":{\"agents/support\":\"S\"}}");
	CHECK(cdp_wait_for(&p.b, 5000, "document.getElementById('locks').textContent"
	                   ".includes('held by task edit-prompts')") >= 0);
	char png[400];
	const char *keep = getenv("WEB_SCREENSHOT");
	snprintf(png, sizeof(png), "%s", keep != NULL ? keep : "");
	if (png[0] == '\0')
		snprintf(png, sizeof(png), "%s/page.png", p.f.dir);
	char *b64 = cdp_screenshot(&p.b, png);
	json_t *a = cdp_eval(&p.b, analyse_js, b64);
	free(b64);
	long long w = json_integer_value(json_object_get(a, "w"));
	long long dark = json_integer_value(json_object_get(a, "dark"));
	long long green = json_integer_value(json_object_get(a, "green"));
	long long area = json_integer_value(json_object_get(a, "area"));
	printf("# screenshot %s: %lld px wide; in the task table %lld dark and %lld green "
	       "pixels of %lld\n", png, w, dark, green, area);
	CHECK_INT(w, ==, 1400);
	CHECK_INT(json_integer_value(json_object_get(a, "rows")), ==, 7);
	CHECK(dark > area / 100);  /* text is there */
	CHECK(dark < area / 2);    /* and it is not a black box */
	CHECK(green > 500);        /* five green badges */
	json_decref(a);
	page_close(&p);
}

TEST(the_detail_shows_steps_state_and_history_but_no_env_values)
{
	struct page p;
	page_open(&p, "detail", false);
	fleet_start(&p.f, 0, NULL);
	fleet_submit(&p.f, "secretive", "{\"id\":\"%s\",\"env\":{\"API_TOKEN\":\"hunter2-value\"},"
	             "\"steps\":[" STEP("fetch", "echo '{\\\"n\\\":42}' > $LEASERUN_STATE_OUT") ","
	             STEP("report", "true") "]}");
	CHECK(fleet_wait_state(&p.f, "secretive", LR_TASK_SUCCEEDED, 20000) >= 0);
	CHECK(cdp_wait_for(&p.b, 5000, row_js, "secretive") >= 0);
	cdp_run(&p.b, "%s.click()", "document.querySelector('#tasks tr[data-id=\"secretive\"]')");
	CHECK(cdp_wait_for(&p.b, 5000, "document.querySelectorAll('#detail-steps li').length === 2") >= 0);
	CHECK(cdp_wait_for(&p.b, 5000, "document.getElementById('detail-state-json').textContent.includes('42')") >= 0);
	CHECK(cdp_eval_bool(&p.b, "document.getElementById('detail-env').textContent.includes('API_TOKEN')"));
	CHECK(cdp_eval_bool(&p.b, "document.getElementById('detail-history').textContent.includes('succeeded')"));
	CHECK(cdp_eval_bool(&p.b, "!document.body.innerHTML.includes('hunter2')"));
	/* Read-only: no cancel button, on the screen and not only in the DOM
	 * (a rule of the style sheet can undo `hidden`). */
	CHECK(cdp_eval_bool(&p.b, "document.getElementById('detail-actions').hidden"));
	CHECK(!cdp_eval_bool(&p.b, "%s", cancel_shown_js));
	page_close(&p);
}

TEST(the_cancel_button_shows_only_for_a_running_task_with_allow_cancel)
{
	struct page p;
	page_open(&p, "cancelbtn", true);
	fleet_start(&p.f, 0, (const char *const[]){ "--concurrency", "2", NULL });
	fleet_submit(&p.f, "long", "{\"id\":\"%s\",\"steps\":[" STEP("wait", "sleep 30") "]}");
	fleet_submit(&p.f, "short", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "]}");
	CHECK(fleet_wait_state(&p.f, "long", LR_TASK_RUNNING, 10000) >= 0);
	CHECK(fleet_wait_state(&p.f, "short", LR_TASK_SUCCEEDED, 20000) >= 0);
	/* The rows come with the page's first load or an event after it. */
	CHECK(cdp_wait_for(&p.b, 5000, "document.querySelector('#tasks tr[data-id=\"short\"] .badge')"
	                   "?.textContent === 'succeeded'") >= 0);
	CHECK(cdp_wait_for(&p.b, 5000, "document.querySelector('#tasks tr[data-id=\"long\"] .badge')"
	                   "?.textContent === 'running'") >= 0);
	cdp_run(&p.b, "%s.click()", "document.querySelector('#tasks tr[data-id=\"short\"]')");
	CHECK(cdp_wait_for(&p.b, 5000, "document.getElementById('detail-title').textContent === 'short'") >= 0);
	CHECK(!cdp_eval_bool(&p.b, "%s", cancel_shown_js));
	cdp_run(&p.b, "%s.click()", "document.querySelector('#tasks tr[data-id=\"long\"]')");
	CHECK(cdp_wait_for(&p.b, 5000, "%s", cancel_shown_js) >= 0);
	page_close(&p);
}

/* The ids "." and ".." are valid: their detail is fetched as such, not
 * as a step up the path. */
TEST(a_task_named_dot_dot_shows_its_detail)
{
	struct page p;
	page_open(&p, "dots", false);
	fleet_submit(&p.f, "..", "{\"id\":\"%s\",\"steps\":[" STEP("only", "true") "]}");
	CHECK(cdp_wait_for(&p.b, 5000, "!!document.querySelector('#tasks tr[data-id=\"..\"]')") >= 0);
	cdp_run(&p.b, "%s.click()", "document.querySelector('#tasks tr[data-id=\"..\"]')");
	CHECK(cdp_wait_for(&p.b, 5000, "document.querySelectorAll('#detail-steps li').length === 1") >= 0);
	CHECK(cdp_eval_bool(&p.b, "document.getElementById('detail-title').textContent === '..'"));
	page_close(&p);
}

TEST(the_page_says_when_etcd_is_unreachable_and_when_it_is_back)
{
	struct page p;
	page_open(&p, "outage", false);
	CHECK_INT(etcdh_stop(web_etcd, 0), ==, 0);
	long long took = cdp_wait_for(&p.b, 10000, "document.getElementById('conn').textContent"
	                              ".startsWith('etcd unreachable, data as of ')");
	char *said = cdp_eval_str(&p.b, "document.getElementById('conn').textContent");
	printf("# \"%s\" %lld ms after the stop\n", said, took);
	free(said);
	CHECK(took >= 0);
	CHECK(cdp_eval_bool(&p.b, "document.getElementById('conn').dataset.state === 'stale'"));
	CHECK_INT(etcdh_restart(web_etcd, 0), ==, 0);
	CHECK(cdp_wait_for(&p.b, 10000, "document.getElementById('conn').dataset.state === 'live'") >= 0);
	CHECK(cdp_eval_bool(&p.b, "document.getElementById('conn').textContent === 'live'"));
	page_close(&p);
}

/* n tasks written straight into etcd, a hundred per txn (submitting them
 * one by one would take most of the test's time). */
static void put_many_tasks(fleet *f, int n)
{
	lr_etcd *etcd = lr_client_etcd(f->client);
	for (int i = 0; i < n;) {
		lr_txn *t = lr_txn_new();
		for (int k = 0; k < 100 && i < n; k++, i++) {
			char text[256], key[LR_KEY_SIZE], id[32];
			json_t *spec;
			snprintf(id, sizeof(id), "bulk-%05d", i);
			snprintf(text, sizeof(text), "{\"id\":\"%s\",\"steps\":[" STEP("only", "true") "]}", id);
			CHECK_OK(lr_spec_parse(text, strlen(text), &spec, &err), &err);
			char *value = lr_spec_encode(spec);
			json_decref(spec);
			lr_key(f->client, LR_K_TASKS, id, key);
			lr_txn_put(t, LR_THEN, key, value, strlen(value), 0);
			free(value);
		}
		lr_txn_result r;
		CHECK_OK(lr_etcd_txn(etcd, t, 0, &r, &err), &err);
		lr_txn_result_free(&r);
		lr_txn_free(t);
	}
}

TEST(ten_thousand_tasks_stay_usable_in_pages)
{
	struct page p;
	fleet_init(&p.f, etcdh_endpoints(web_etcd), "tenk");
	int64_t t0 = lr_mono_ms();
	put_many_tasks(&p.f, 10000);
	printf("# 10000 tasks written in %lld ms\n", (long long)(lr_mono_ms() - t0));
	t0 = lr_mono_ms();
	web_start(&p.web, &p.f, false, p.addr);
	printf("# leaserun web read them in %lld ms\n", (long long)(lr_mono_ms() - t0));
	cdp_launch(&p.b, p.f.dir, 1400, 900);
	char url[128];
	snprintf(url, sizeof(url), "http://%s/", p.addr);
	t0 = lr_mono_ms();
	cdp_navigate(&p.b, url);
	CHECK(cdp_wait_for(&p.b, 20000, "document.getElementById('page-info').textContent.endsWith('of 10000')") >= 0);
	printf("# the page showed them %lld ms after it was asked for\n", (long long)(lr_mono_ms() - t0));
	cdp_run(&p.b, "window.loadedOnce = true");
	CHECK_INT(cdp_eval_int(&p.b, "document.querySelectorAll('#tasks tbody tr').length"), ==, 50);
	/* Newest first; the next page; a search. */
	CHECK(cdp_eval_bool(&p.b, "%s !== null", "document.querySelector('#tasks tr[data-id=\"bulk-09999\"]')"));
	t0 = lr_mono_ms();
	cdp_run(&p.b, "document.getElementById('next').click()");
	CHECK(cdp_wait_for(&p.b, 5000, "document.getElementById('page-info').textContent.startsWith('51–100')") >= 0);
	printf("# the next page took %lld ms\n", (long long)(lr_mono_ms() - t0));
	cdp_run(&p.b, "(() => { const s = document.getElementById('search');"
	               " s.value = 'bulk-00042'; s.dispatchEvent(new Event('input')); })()");
	CHECK(cdp_wait_for(&p.b, 5000, "document.querySelectorAll('#tasks tbody tr').length === 1") >= 0);
	/* Still live: a change reaches a page of ten thousand. */
	fleet_submit(&p.f, "bulk-00042x", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "]}");
	CHECK(cdp_wait_for(&p.b, 2000, "document.querySelectorAll('#tasks tbody tr').length === 2") >= 0);
	page_close(&p);
}

TEST_LIST(TEST_CASE(a_task_submitted_after_the_page_loaded_appears_within_a_second),
          TEST_CASE(locks_held_and_waited_for_appear_and_go_without_a_reload),
          TEST_CASE(a_running_tasks_progress_moves_without_a_reload),
          TEST_CASE(a_killed_runner_leaves_the_runners_list),
          TEST_CASE(the_screenshot_shows_the_task_table),
          TEST_CASE(the_detail_shows_steps_state_and_history_but_no_env_values),
          TEST_CASE(the_cancel_button_shows_only_for_a_running_task_with_allow_cancel),
          TEST_CASE(ten_thousand_tasks_stay_usable_in_pages),
          TEST_CASE(a_task_named_dot_dot_shows_its_detail),
          TEST_CASE(the_page_says_when_etcd_is_unreachable_and_when_it_is_back));

TEST_MAIN(web_etcd_start, web_etcd_stop)
