/* output.c - tables and JSON documents of tasks and runners. Builds each
 * table in memory first so that columns fit their widest cell. Main thread. */
#include "output.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <wchar.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/utf8.h"
#include "cli.h"

#define MAX_COLS 8
#define BAR_WIDTH 10
#define GAP 2
/* On a narrow terminal the last column (the error) keeps at least this
 * much; below it the line wraps. */
#define MIN_ERROR_WIDTH 8
#define NO_COLUMN MAX_COLS
/* What a status row keeps of an id (its start and its end), a step and a
 * runner name on a narrow terminal. */
#define ID_FLOOR 16
#define STEP_FLOOR 12
#define RUNNER_FLOOR 10

struct table {
	size_t cols;
	const char *head[MAX_COLS];
	char **cells; /* rows x cols, malloc'd strings */
	size_t rows, cap;
	size_t width[MAX_COLS];
	/* On a terminal that is too narrow: a column with a floor is cut
	 * down to it before the last column is; keep_ends cuts it in the
	 * middle. */
	size_t floor[MAX_COLS];
	bool keep_ends[MAX_COLS];
};

out_style out_style_stdout(void)
{
	out_style st = { 0, 0 };
	struct winsize ws;

	if (!isatty(STDOUT_FILENO))
		return st;
	st.tty = 1;
	st.width = 100;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		st.width = ws.ws_col;
	return st;
}

/* Columns a character takes on a terminal: 2 for wide (CJK, emoji), 0
 * for combining marks, as glibc's C.UTF-8 tables say whatever the
 * process's locale; a byte that is no character shows as one. */
static int char_width(const unsigned char *s, size_t n, size_t *len)
{
	static locale_t utf8;
	static int tried;
	*len = lr_utf8_char_len(s, n);
	if (*len <= 1) {
		*len = 1;
		return 1;
	}
	if (!tried) {
		tried = 1;
		utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	}
	if (utf8 == (locale_t)0)
		return 1;
	locale_t was = uselocale(utf8);
	wchar_t wc;
	mbstate_t ps;
	memset(&ps, 0, sizeof(ps));
	int w = mbrtowc(&wc, (const char *)s, *len, &ps) == *len ? wcwidth(wc) : 1;
	uselocale(was);
	return w < 0 ? 1 : w;
}

/* Columns s takes on a terminal. */
static size_t text_width(const char *s)
{
	size_t n = strlen(s), w = 0, len;
	for (size_t i = 0; i < n; i += len)
		w += (size_t)char_width((const unsigned char *)s + i, n - i, &len);
	return w;
}

static void table_init(struct table *t, const char *const *head, size_t cols)
{
	memset(t, 0, sizeof(*t));
	t->cols = cols;
	for (size_t c = 0; c < cols; c++) {
		t->head[c] = head[c];
		t->width[c] = text_width(head[c]);
	}
}

/* Whether s starts with a bidirectional control (U+200E, U+200F,
 * U+202A..U+202E, U+2066..U+2069) or a line or paragraph separator
 * (U+2028, U+2029) in UTF-8. */
static bool bidi_control(const unsigned char *s)
{
	return s[0] == 0xE2 && ((s[1] == 0x80 && ((s[2] >= 0xA8 && s[2] <= 0xAE) ||
	                                          s[2] == 0x8E || s[2] == 0x8F)) ||
	                        (s[1] == 0x81 && s[2] >= 0xA6 && s[2] <= 0xA9));
}

/* Step errors carry the last lines of stderr, and a spec's names or a
 * step's output may hold escape sequences that would move the cursor,
 * clear the screen or set the title. */
char *out_one_line(const char *s)
{
	char *copy = strdup(s != NULL ? s : "");
	size_t o = 0;
	for (size_t i = 0; copy != NULL && copy[i] != '\0'; i++) {
		unsigned char c = (unsigned char)copy[i];
		if (c == '\n' || c == '\r' || c == '\t')
			c = ' ';
		else if (c < 0x20 || c == 0x7f)
			c = '?';
		else if (c == 0xC2 && (unsigned char)copy[i + 1] >= 0x80 &&
		         (unsigned char)copy[i + 1] <= 0x9F) {
			c = '?'; /* U+0080..U+009F */
			i++;
		} else if (bidi_control((unsigned char *)copy + i)) {
			c = '?'; /* would reorder or break the line */
			i += 2;
		}
		copy[o++] = (char)c;
	}
	if (copy != NULL)
		copy[o] = '\0';
	return copy;
}

/* Append a row; cells are copied. A row that cannot be stored (out of
 * memory) is left out rather than failing the whole display. */
static void table_add(struct table *t, char *const *cells)
{
	if (t->rows == t->cap) {
		size_t nc = t->cap ? t->cap * 2 : 16;
		char **n = realloc(t->cells, nc * t->cols * sizeof(char *));
		if (n == NULL)
			return;
		t->cells = n;
		t->cap = nc;
	}
	char **row = &t->cells[t->rows * t->cols];
	for (size_t c = 0; c < t->cols; c++) {
		row[c] = out_one_line(cells[c]);
		if (row[c] == NULL)
			row[c] = strdup("");
		size_t w = row[c] != NULL ? text_width(row[c]) : 0;
		if (w > t->width[c])
			t->width[c] = w;
	}
	t->rows++;
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->rows * t->cols; i++)
		free(t->cells[i]);
	free(t->cells);
}

/* Cut s to at most max columns, ending with "..." and on a character
 * boundary. */
static void cut(char *s, size_t max)
{
	if (text_width(s) <= max || max < 4)
		return;
	size_t n = strlen(s), at = 0, w = 0, len;
	while (at < n) {
		int cw = char_width((const unsigned char *)s + at, n - at, &len);
		if (w + (size_t)cw > max - 3)
			break;
		w += (size_t)cw;
		at += len;
	}
	memcpy(s + at, "...", 4);
}

/* Cut s to at most max columns keeping its start and its end, with "..."
 * between them on character boundaries: what tells ids apart is often at
 * the end (the random part of a generated one). */
static void cut_middle(char *s, size_t max)
{
	size_t total = text_width(s);
	if (total <= max || max < 4)
		return;
	size_t n = strlen(s), head = (max - 3) / 2, tail = max - 3 - head;
	size_t at = 0, w = 0, len, end = n;
	int cw;
	while (at < n) {
		cw = char_width((const unsigned char *)s + at, n - at, &len);
		if (w + (size_t)cw > head)
			break;
		w += (size_t)cw;
		at += len;
	}
	/* The tail: from the first character after which at most tail
	 * columns are left. */
	size_t before = 0;
	for (size_t i = 0; i < n; i += len) {
		if (total - before <= tail) {
			end = i;
			break;
		}
		before += (size_t)char_width((const unsigned char *)s + i, n - i, &len);
	}
	/* At least four columns, so at least four bytes, go: "..." fits. */
	memcpy(s + at, "...", 3);
	memmove(s + at + 3, s + end, n - end + 1);
}

/* One row. Padding is written only before a cell that has text, so that
 * no line ends in blanks. */
static void print_row(FILE *f, const struct table *t,
                      const char *const *cells)
{
	size_t pending = 0;

	for (size_t c = 0; c < t->cols; c++) {
		size_t w = text_width(cells[c]);
		if (cells[c][0] != '\0') {
			fprintf(f, "%*s%s", (int)pending, "", cells[c]);
			pending = 0;
		}
		pending += t->width[c] + GAP - w;
	}
	fputc('\n', f);
}

/* Columns the line takes before the last column. */
static size_t width_before_last(const struct table *t)
{
	size_t used = 0;
	for (size_t c = 0; c + 1 < t->cols; c++)
		used += t->width[c] + GAP;
	return used;
}

/* The widest column that may still be cut, NO_COLUMN when none. */
static size_t widest_cuttable(const struct table *t)
{
	size_t widest = NO_COLUMN;
	for (size_t c = 0; c + 1 < t->cols; c++)
		if (t->floor[c] > 0 && t->width[c] > t->floor[c] &&
		    (widest == NO_COLUMN || t->width[c] > t->width[widest]))
			widest = c;
	return widest;
}

/* Lay a table out for a terminal `width` columns wide. A row that would
 * not fit has its columns with a floor cut down to it, widest first; then
 * the last column is cut to what is left. Returns the room of the last
 * column. */
static size_t table_fit(struct table *t, size_t width)
{
	size_t last = t->cols - 1;
	size_t used = width_before_last(t);
	while (used + t->width[last] > width) {
		size_t c = widest_cuttable(t);
		if (c == NO_COLUMN)
			break;
		t->width[c]--;
		used--;
	}
	return width > used + MIN_ERROR_WIDTH ? width - used : MIN_ERROR_WIDTH;
}

/* On a terminal a row is made to fit the line (table_fit); a pipe gets
 * every cell in full, for scripts. */
static void table_print(FILE *f, struct table *t, const out_style *st)
{
	size_t last = t->cols - 1;
	bool fit = st->tty && st->width > 0;
	size_t room = fit ? table_fit(t, (size_t)st->width) : 0;

	print_row(f, t, t->head);
	for (size_t r = 0; r < t->rows; r++) {
		char **row = &t->cells[r * t->cols];
		for (size_t c = 0; fit && c < last; c++) {
			if (t->keep_ends[c])
				cut_middle(row[c], t->width[c]);
			else if (t->floor[c] > 0)
				cut(row[c], t->width[c]);
		}
		if (fit)
			cut(row[last], room);
		print_row(f, t, (const char *const *)row);
	}
}

/* "4m12s ago" for an RFC 3339 time; "-" when there is none. */
static void age_of(const char *when, int64_t now_ms, char *buf, size_t n)
{
	int64_t ms;
	char age[32];

	if (when == NULL || lr_rfc3339_parse(when, &ms) != 0) {
		snprintf(buf, n, "-");
		return;
	}
	lr_format_age(now_ms - ms, age, sizeof(age));
	snprintf(buf, n, "%s ago", age);
}

/* ---- tasks ---------------------------------------------------------------- */

/* Steps committed: every step of a task that succeeded. */
static int64_t steps_done(const lr_task_status *s)
{
	return s->state == LR_TASK_SUCCEEDED ? s->steps : s->next_step;
}

/* "2/3 analyse": the step the task is at, 1-based, as people count. A
 * new string with the whole name (names go up to 1024 bytes), NULL when
 * out of memory. */
static char *step_of(const lr_task_status *s)
{
	char *text = NULL;
	if (s->steps <= 0)
		return strdup("-");
	int64_t k = steps_done(s) < s->steps ? s->next_step + 1 : s->steps;
	if (asprintf(&text, "%" PRId64 "/%" PRId64 "%s%s", k, s->steps,
	             s->step_name != NULL ? " " : "",
	             s->step_name != NULL ? s->step_name : "") < 0)
		return NULL;
	return text;
}

static void bar_of(const lr_task_status *s, char *buf, size_t n)
{
	char bar[BAR_WIDTH + 3];
	int64_t full = s->steps > 0 ? steps_done(s) * BAR_WIDTH / s->steps : 0;

	bar[0] = '[';
	for (int i = 0; i < BAR_WIDTH; i++)
		bar[1 + i] = i < full ? '#' : '-';
	bar[BAR_WIDTH + 1] = ']';
	bar[BAR_WIDTH + 2] = '\0';
	snprintf(buf, n, "%s", s->steps > 0 ? bar : "");
}

static void attempt_of(const lr_task_status *s, char *buf, size_t n)
{
	if (s->attempt <= 0)
		snprintf(buf, n, "-");
	else if (s->max_attempts > 0)
		snprintf(buf, n, "%" PRId64 "/%" PRId64, s->attempt,
		         s->max_attempts);
	else
		snprintf(buf, n, "%" PRId64, s->attempt);
}

/* "pending (cancel requested)": a cancel request outlives the claim it
 * was made under, and a task whose holder died stays pending with it
 * until a runner claims it and ends it; without the note, it would look
 * as if the cancel had been lost. */
static const char *state_of(const lr_task_status *s)
{
	if (s->cancel_requested_at == NULL)
		return lr_task_state_name(s->state);
	return s->state == LR_TASK_RUNNING ? "running (cancel requested)"
	                                   : "pending (cancel requested)";
}

/* "1042 tasks: 4 running, 30 pending, 1 failed, 1007 succeeded", for a
 * person on a terminal: the states in the order a person acts on them,
 * those without a task left out. limited: a limit may have left tasks
 * out, and the line says so. */
static void print_totals(FILE *f, const lr_task_status *v, size_t n, bool limited)
{
	static const lr_task_state order[] = { LR_TASK_RUNNING, LR_TASK_PENDING,
		LR_TASK_FAILED, LR_TASK_CANCELLED, LR_TASK_SUCCEEDED };
	size_t count[LR_TASK_CANCELLED + 1] = { 0 };
	const char *sep = ": ";

	for (size_t i = 0; i < n; i++)
		if (v[i].state >= 0 && v[i].state <= LR_TASK_CANCELLED)
			count[v[i].state]++;
	fprintf(f, "%s%zu task%s", limited ? "the oldest " : "", n, n == 1 ? "" : "s");
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		if (count[order[i]] == 0)
			continue;
		fprintf(f, "%s%zu %s", sep, count[order[i]],
		        lr_task_state_name(order[i]));
		sep = ", ";
	}
	fputc('\n', f);
}

void out_status_table(FILE *f, const lr_task_status *v, size_t n, bool limited,
                      const out_style *st, int64_t now_ms)
{
	static const char *const head_tty[] = { "ID", "STATE", "STEP",
		"PROGRESS", "ATTEMPT", "RUNNER", "UPDATED", "ERROR" };
	static const char *const head[] = { "ID", "STATE", "STEP", "ATTEMPT",
		"RUNNER", "UPDATED", "ERROR" };
	struct table t;

	if (st->tty) {
		table_init(&t, head_tty, 8);
		/* On a narrow terminal long ids, step names and runner names
		 * give way before the error. */
		t.floor[0] = ID_FLOOR;
		t.keep_ends[0] = true;
		t.floor[2] = STEP_FLOOR;
		t.floor[5] = RUNNER_FLOOR;
	} else {
		table_init(&t, head, 7);
	}
	for (size_t i = 0; i < n; i++) {
		const lr_task_status *s = &v[i];
		char bar[BAR_WIDTH + 3], attempt[48], age[48];
		char *error = out_one_line(s->error);
		if (s->waiting != NULL && error != NULL) {
			/* what holds it back now, before an earlier attempt's error */
			char *w = NULL;
			if (asprintf(&w, "waiting: %s", s->waiting) > 0) {
				free(error);
				error = out_one_line(w);
			}
			free(w);
		}
		char *step = step_of(s);
		bar_of(s, bar, sizeof(bar));
		attempt_of(s, attempt, sizeof(attempt));
		age_of(s->updated_at, now_ms, age, sizeof(age));
		char *cells[] = { (char *)s->id,
			          (char *)state_of(s),
			          step != NULL ? step : "?", bar,
			          attempt, s->runner != NULL ? s->runner : "-", age,
			          error };
		if (!st->tty) /* no bar column */
			memmove(&cells[3], &cells[4], 4 * sizeof(char *));
		table_add(&t, cells);
		free(step);
		free(error);
	}
	if (n == 0 && st->tty)
		fputs("no tasks\n", f);
	else
		table_print(f, &t, st);
	/* A pipe gets the rows alone: scripts count and parse them. */
	if (n > 1 && st->tty)
		print_totals(f, v, n, limited);
	table_free(&t);
}

static json_t *str_or_null(const char *s)
{
	return s != NULL ? lr_json_string_lossy(s) : json_null();
}

static json_t *status_fields(const lr_task_status *s);

static json_t *status_json(const lr_task_status *s)
{
	json_t *o = status_fields(s);
	json_t *h = s->history != NULL ? json_loads(s->history, 0, NULL) : NULL;
	if (o != NULL &&
	    (json_object_set_new(o, "cancel_requested",
	                         json_boolean(s->cancel_requested_at != NULL)) != 0 ||
	     json_object_set_new(o, "cancel_requested_at",
	                         s->cancel_requested_at != NULL &&
	                                 s->cancel_requested_at[0] != '\0'
	                             ? lr_json_string_lossy(s->cancel_requested_at)
	                             : json_null()) != 0)) {
		json_decref(o);
		o = NULL;
	}
	if (o != NULL && h != NULL)
		json_object_set_new(o, "history", h);
	else
		json_decref(h);
	return o;
}

static json_t *status_fields(const lr_task_status *s)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:o, s:I, s:I, s:o, s:o, s:o, "
	                 "s:I, s:o}",
	                 "id", s->id, "state", lr_task_state_name(s->state),
	                 "next_step", (json_int_t)s->next_step, "steps",
	                 (json_int_t)s->steps, "step_name",
	                 str_or_null(s->step_name), "attempt",
	                 (json_int_t)s->attempt, "max_attempts",
	                 (json_int_t)s->max_attempts, "runner",
	                 str_or_null(s->runner), "error", str_or_null(s->error),
	                 "updated_at", str_or_null(s->updated_at),
	                 "create_revision", (json_int_t)s->create_revision,
	                 "waiting", str_or_null(s->waiting));
}

/* Print doc (stolen) indented with the flags given: 0, OUT_ENOMEM when it
 * could not be built or dumped, OUT_EWRITE when f refused it. */
static int dump_with(FILE *f, json_t *doc, size_t flags)
{
	int rc = doc != NULL ? json_dumpf(doc, f, JSON_INDENT(2) | flags) : -1;

	json_decref(doc);
	if (rc == 0)
		fputc('\n', f);
	else if (ferror(f))
		return OUT_EWRITE; /* a full disk, a closed pipe */
	return rc == 0 ? 0 : OUT_ENOMEM;
}

static int dump(FILE *f, json_t *doc)
{
	return dump_with(f, doc, 0);
}

int out_json_exit(int out, const char *what)
{
	int errnum = errno;

	if (out == OUT_EWRITE)
		return cli_output_failed(errnum);
	if (out == 0)
		return EXIT_OK;
	fprintf(stderr, "leaserun: %s: out of memory\n", what);
	return EXIT_RUNTIME;
}

void out_status_reason(FILE *f, const lr_task_status *s)
{
	char *waiting = s->waiting != NULL ? out_one_line(s->waiting) : NULL;
	char *error = s->error != NULL ? out_one_line(s->error) : NULL;
	if (waiting != NULL)
		fprintf(f, "waiting: %s\n", waiting);
	if (error != NULL)
		fprintf(f, "error: %s\n", error);
	free(waiting);
	free(error);
}

void out_status_history(FILE *f, const lr_task_status *s)
{
	json_t *h = s->history != NULL ? json_loads(s->history, 0, NULL) : NULL;
	size_t i;
	json_t *e;
	if (json_array_size(h) > 0)
		fprintf(f, "earlier outcomes (newest first):\n");
	json_array_foreach(h, i, e) {
		const char *err = json_string_value(json_object_get(e, "error"));
		const char *runner = json_string_value(json_object_get(e, "runner"));
		const char *at = json_string_value(json_object_get(e, "finished_at"));
		char *err_shown = err != NULL ? out_one_line(err) : NULL;
		char *runner_shown = runner != NULL ? out_one_line(runner) : NULL;
		fprintf(f, "  %s  %s after %lld attempt(s)%s%s%s%s\n", at != NULL ? at : "-",
		        json_string_value(json_object_get(e, "status")),
		        (long long)json_integer_value(json_object_get(e, "attempts")),
		        runner_shown != NULL ? " on " : "", runner_shown != NULL ? runner_shown : "",
		        err_shown != NULL ? ": " : "", err_shown != NULL ? err_shown : "");
		free(err_shown);
		free(runner_shown);
	}
	json_decref(h);
}

int out_status_json(FILE *f, const lr_task_status *v, size_t n, int single)
{
	if (single)
		return dump(f, n > 0 ? status_json(&v[0]) : NULL);
	json_t *arr = json_array();
	for (size_t i = 0; arr != NULL && i < n; i++) {
		if (json_array_append_new(arr, status_json(&v[i])) != 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return dump(f, arr);
}

/* ---- runners -------------------------------------------------------------- */

void out_runners_table(FILE *f, const lr_runner_info *v, size_t n,
                       const out_style *st, int64_t now_ms)
{
	static const char *const head[] = { "NAME", "HOST", "PID",
		"CONCURRENCY", "TTL LEFT", "STARTED" };
	struct table t;

	table_init(&t, head, 6);
	for (size_t i = 0; i < n; i++) {
		const lr_runner_info *r = &v[i];
		char pid[32], conc[32], ttl[64], started[48];
		snprintf(pid, sizeof(pid), "%" PRId64, r->pid);
		snprintf(conc, sizeof(conc), "%" PRId64, r->concurrency);
		if (r->ttl_left < 0)
			snprintf(ttl, sizeof(ttl), "expired");
		else
			snprintf(ttl, sizeof(ttl), "%" PRId64 "s/%" PRId64 "s",
			         r->ttl_left, r->ttl);
		age_of(r->started_at[0] ? r->started_at : NULL, now_ms, started,
		       sizeof(started));
		char *cells[] = { (char *)r->name, r->host[0] ? (char *)r->host : "-",
			          pid, conc, ttl, started };
		table_add(&t, cells);
	}
	if (n == 0 && st->tty)
		fputs("no runners\n", f);
	else
		table_print(f, &t, st);
	table_free(&t);
}

int out_runners_json(FILE *f, const lr_runner_info *v, size_t n)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr != NULL && i < n; i++) {
		const lr_runner_info *r = &v[i];
		/* Lease ids pass 2^53: readers that take JSON numbers as
		 * doubles (jq, JavaScript) round them. The hex form is exact,
		 * and the one etcdctl takes. */
		char hex[20];
		snprintf(hex, sizeof(hex), "%llx", (unsigned long long)r->lease);
		json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:o, "
		                      "s:s}",
		                      "name", r->name, "host", r->host, "pid",
		                      (json_int_t)r->pid, "concurrency",
		                      (json_int_t)r->concurrency, "ttl",
		                      (json_int_t)r->ttl, "ttl_left",
		                      (json_int_t)r->ttl_left, "lease",
		                      (json_int_t)r->lease, "lease_hex", hex, "started_at",
		                      str_or_null(r->started_at[0] ? r->started_at
		                                                   : NULL),
		                      "version", r->version);
		if (json_array_append_new(arr, o) != 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return dump(f, arr);
}

/* ---- locks ---------------------------------------------------------------- */

/* "task t-12" for "task:t-12". Cells are built whole (new strings, NULL
 * when out of memory): holders and hosts come from keys and values of
 * any length, and a cut is the table's to make, between characters. */
static char *holder_text(const char *holder)
{
	const char *colon = holder != NULL ? strchr(holder, ':') : NULL;
	char *text = NULL;

	if (colon == NULL)
		return strdup(holder != NULL ? holder : "?");
	if (asprintf(&text, "%.*s %s", (int)(colon - holder), holder, colon + 1) < 0)
		return NULL;
	return text;
}

static const char *str_of(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* "org/a", "gpu[1] of 2" or "gpu[1]": what a held entry holds. */
static char *held_text(const json_t *e)
{
	const char *lock = str_of(e, "lock"), *pool = str_of(e, "pool");
	long long slot = (long long)json_integer_value(json_object_get(e, "slot"));
	long long limit = (long long)json_integer_value(json_object_get(e, "limit"));
	char *text = NULL;
	int n;

	if (lock != NULL)
		return strdup(lock);
	if (limit > 0)
		n = asprintf(&text, "%s[%lld] of %lld", pool != NULL ? pool : "?", slot, limit);
	else
		n = asprintf(&text, "%s[%lld]", pool != NULL ? pool : "?", slot);
	return n < 0 ? NULL : text;
}

/* {"org/a":"X"} {"gpu":2}: what a waiting entry asks for. */
static char *wanted_text(const json_t *e)
{
	char *locks = json_dumps(json_object_get(e, "locks"), JSON_COMPACT | JSON_SORT_KEYS);
	char *limits = json_dumps(json_object_get(e, "limits"), JSON_COMPACT | JSON_SORT_KEYS);
	char *text = NULL;

	if (asprintf(&text, "%s%s%s", locks != NULL ? locks : "",
	             locks != NULL && limits != NULL ? " " : "", limits != NULL ? limits : "") < 0)
		text = NULL;
	free(locks);
	free(limits);
	return text;
}

void out_locks_table(FILE *f, const void *doc, const out_style *st, int64_t now_ms)
{
	static const char *const head[] = { "HELD", "MODE", "HOLDER", "ON", "SINCE",
		                            "WAITING FOR" };
	struct table t;
	table_init(&t, head, 6);
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(doc, "held"), i, e) {
		char since[48];
		char *what = held_text(e), *who = holder_text(str_of(e, "holder"));
		age_of(str_of(e, "since"), now_ms, since, sizeof(since));
		const char *on = str_of(e, "runner") != NULL ? str_of(e, "runner") : str_of(e, "host");
		char *cells[] = { what, str_of(e, "lock") != NULL ? (char *)str_of(e, "mode") : "slot",
			          who, (char *)(on != NULL ? on : "-"), since, "" };
		table_add(&t, cells);
		free(what);
		free(who);
	}
	json_array_foreach(json_object_get(doc, "waiting"), i, e) {
		char since[48];
		char *what = wanted_text(e), *who = holder_text(str_of(e, "holder"));
		age_of(str_of(e, "since"), now_ms, since, sizeof(since));
		const char *why = str_of(e, "waiting_for");
		const char *on = str_of(e, "host");
		char *cells[] = { what, "wants", who, (char *)(on != NULL ? on : "-"), since,
			          (char *)(why != NULL ? why : "(free now: being taken)") };
		table_add(&t, cells);
		free(what);
		free(who);
	}
	if (t.rows == 0 && st->tty)
		fputs("no locks or slots held or asked for\n", f);
	else if (t.rows > 0)
		table_print(f, &t, st);
	table_free(&t);
}

int out_locks_json(FILE *f, const void *doc)
{
	return dump_with(f, json_incref((json_t *)doc), JSON_SORT_KEYS);
}
