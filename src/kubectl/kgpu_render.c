/* kubectl gpu: reports as kubectl-style tables, the node grid, and YAML. */
#include "kgpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_COLS 12
#define RED "\033[31m"
#define GREEN "\033[32m"
#define YELLOW "\033[33m"
#define BOLD "\033[1m"
#define RESET "\033[0m"

/* A table: rows of cells, each with an optional colour; columns padded as kubectl pads them (3 spaces). */
struct table {
	int ncols, nrows, cap;
	char **cells;              /* nrows * ncols */
	const char **colors;
	int width[MAX_COLS];
};

static void table_row(struct table *t, const char *const *cells, const char *const *colors)
{
	if (t->nrows == t->cap) {
		int cap = t->cap ? t->cap * 2 : 16;
		char **nc = realloc(t->cells, (size_t)cap * (size_t)t->ncols * sizeof(*nc));
		if (nc)
			t->cells = nc;
		const char **ncol = realloc(t->colors, (size_t)cap * (size_t)t->ncols * sizeof(*ncol));
		if (ncol)
			t->colors = ncol;
		if (!nc || !ncol)
			return;
		t->cap = cap;
	}
	for (int i = 0; i < t->ncols; i++) {
		const char *s = cells[i] ? cells[i] : "";
		t->cells[t->nrows * t->ncols + i] = strdup(s);
		t->colors[t->nrows * t->ncols + i] = colors ? colors[i] : NULL;
		int w = (int)strlen(s);
		if (w > t->width[i])
			t->width[i] = w;
	}
	t->nrows++;
}

static int table_print(struct table *t, bool color, struct buf *out)
{
	int rc = 0;
	for (int r = 0; r < t->nrows; r++) {
		for (int i = 0; i < t->ncols; i++) {
			const char *s = t->cells[r * t->ncols + i] ? t->cells[r * t->ncols + i] : "";
			const char *col = color ? t->colors[r * t->ncols + i] : NULL;
			bool last = i == t->ncols - 1;
			int pad = last ? 0 : t->width[i] - (int)strlen(s) + 3;
			rc |= buf_printf(out, "%s%s%s%*s", col ? col : "", s, col ? RESET : "", pad, "");
		}
		rc |= buf_addc(out, '\n');
	}
	for (int k = 0; k < t->nrows * t->ncols; k++)
		free(t->cells[k]);
	free(t->cells);
	free(t->colors);
	return rc ? -1 : 0;
}

static const char *str(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static int num(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valueint : 0;
}

/* The strings of an array joined with sep. */
static void join(const cJSON *arr, const char *sep, char *out, size_t size)
{
	size_t len = 0;
	const cJSON *it;
	out[0] = 0;
	cJSON_ArrayForEach(it, arr) {
		if (!cJSON_IsString(it) || len >= size)
			continue;
		int n = snprintf(out + len, size - len, "%s%s", len ? sep : "", it->valuestring);
		len += n > 0 ? (size_t)n : 0;
	}
}

/* Lines under a table: issues (yellow, "!") and notes. */
static int footer(const cJSON *lines, const char *mark, const char *col, const struct kg_style *st, struct buf *out)
{
	const cJSON *it;
	int rc = 0;
	cJSON_ArrayForEach(it, lines)
		if (cJSON_IsString(it))
			rc |= buf_printf(out, "%s%s %s%s\n", st->color ? col : "", mark, it->valuestring,
					 st->color ? RESET : "");
	return rc;
}

static int render_nodes(const cJSON *doc, const struct kg_style *st, struct buf *out)
{
	struct table t = { .ncols = st->wide ? 12 : 8 };
	const char *head[] = { "NODE", "GPUS", "WHOLE", "SHARED", "FREE", "UNHEALTHY", "FRAG", "MODELS",
			       "EXTERNAL", "RESERVATIONS", "FGD", "ISSUES" };
	table_row(&t, head, NULL);
	const cJSON *it, *issues = cJSON_CreateArray();
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(doc, "items")) {
		char c[8][32], models[256], frag[16], fgd[32];
		const char *keys[] = { "total", "whole", "shared", "free", "unhealthy", "external", "reservations" };
		for (int k = 0; k < 7; k++)
			snprintf(c[k], sizeof(c[k]), "%d", num(it, keys[k]));
		bool agent = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "agent"));
		if (!agent)
			snprintf(c[0], sizeof(c[0]), "?");
		snprintf(frag, sizeof(frag), "%d%%", num(it, "fragmentationPercent"));
		const cJSON *g = cJSON_GetObjectItemCaseSensitive(it, "fgdGPUs");
		snprintf(fgd, sizeof(fgd), "%.2f", cJSON_IsNumber(g) ? g->valuedouble : 0);
		join(cJSON_GetObjectItemCaseSensitive(it, "models"), ",", models, sizeof(models));
		const cJSON *iss = cJSON_GetObjectItemCaseSensitive(it, "issues");
		char nissues[16];
		snprintf(nissues, sizeof(nissues), "%d", cJSON_GetArraySize(iss));
		const char *row[] = { str(it, "node"), c[0], c[1], c[2], c[3], c[4], frag, models[0] ? models : "-",
				      c[5], c[6], fgd, nissues };
		const char *col[] = { cJSON_GetArraySize(iss) ? YELLOW : NULL, NULL, NULL, NULL,
				      num(it, "free") ? GREEN : NULL, num(it, "unhealthy") ? RED : NULL,
				      NULL, NULL, NULL, NULL, NULL, cJSON_GetArraySize(iss) ? YELLOW : NULL };
		table_row(&t, row, col);
		const cJSON *line;
		cJSON_ArrayForEach(line, iss) {
			char l[800];
			snprintf(l, sizeof(l), "%s: %s", str(it, "node"), line->valuestring);
			cJSON_AddItemToArray((cJSON *)issues, cJSON_CreateString(l));
		}
	}
	int rc = table_print(&t, st->color, out);
	rc |= footer(issues, "!", YELLOW, st, out);
	rc |= footer(cJSON_GetObjectItemCaseSensitive(doc, "notes"), "note:", "", st, out);
	cJSON_Delete((cJSON *)issues);
	return rc;
}

/* A device's cell in the grid: its id and the letter of its holder ('.' free, 'X' unhealthy, '*' several shares). */
static char grid_mark(const cJSON *dev, const cJSON *letters)
{
	const cJSON *hs = cJSON_GetObjectItemCaseSensitive(dev, "holders");
	if (strcmp(str(dev, "health"), "Healthy"))
		return 'X';
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(dev, "inUseOutside")))
		return '#';
	int n = cJSON_GetArraySize(hs);
	if (!n)
		return '.';
	const char *who = str(cJSON_GetArrayItem(hs, 0), "holder");
	int k = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, letters) {
		if (!strcmp(it->valuestring, who))
			break;
		k++;
	}
	char c = k < 26 ? (char)('A' + k) : '+';
	if (n == 1 && !strcmp(str(cJSON_GetArrayItem(hs, 0), "mode"), "Shared"))
		c = k < 26 ? (char)('a' + k) : '+';
	return n > 1 ? '*' : c;
}

/* The grid: one line per island, [id mark] per device; then the legend. */
static int render_grid(const cJSON *devs, const struct kg_style *st, struct buf *out)
{
	cJSON *letters = cJSON_CreateArray(), *islands = cJSON_CreateArray();
	const cJSON *d, *h, *it;
	cJSON_ArrayForEach(d, devs) {
		cJSON_ArrayForEach(h, cJSON_GetObjectItemCaseSensitive(d, "holders")) {
			bool seen = false;
			cJSON_ArrayForEach(it, letters) seen = seen || !strcmp(it->valuestring, str(h, "holder"));
			if (!seen)
				cJSON_AddItemToArray(letters, cJSON_CreateString(str(h, "holder")));
		}
		bool seen = false;
		cJSON_ArrayForEach(it, islands) seen = seen || !strcmp(it->valuestring, str(d, "island"));
		if (!seen)
			cJSON_AddItemToArray(islands, cJSON_CreateString(str(d, "island")));
	}
	int rc = 0;
	cJSON_ArrayForEach(it, islands) {
		rc |= buf_printf(out, "  %-10s", it->valuestring[0] ? it->valuestring : "(no island)");
		cJSON_ArrayForEach(d, devs) {
			if (strcmp(str(d, "island"), it->valuestring))
				continue;
			char m = grid_mark(d, letters);
			const char *col = m == '.' ? GREEN : m == 'X' || m == '#' ? RED : BOLD;
			rc |= buf_printf(out, " [%d %s%c%s]", num(d, "id"), st->color ? col : "", m, st->color ? RESET : "");
		}
		rc |= buf_addc(out, '\n');
	}
	int k = 0;
	rc |= buf_adds(out, "  ");
	cJSON_ArrayForEach(it, letters) {
		rc |= buf_printf(out, "%c/%c %s   ", k < 26 ? 'A' + k : '+', k < 26 ? 'a' + k : '+', it->valuestring);
		k++;
	}
	rc |= buf_adds(out, ". free   X unhealthy   # used outside   * several shares   (lower case: a share)\n\n");
	cJSON_Delete(letters);
	cJSON_Delete(islands);
	return rc;
}

static void holders_text(const cJSON *dev, char *out, size_t size)
{
	size_t len = 0;
	const cJSON *h;
	out[0] = 0;
	cJSON_ArrayForEach(h, cJSON_GetObjectItemCaseSensitive(dev, "holders")) {
		if (len >= size)
			break;
		int n = !strcmp(str(h, "mode"), "Shared")
				? snprintf(out + len, size - len, "%s%s (%d MiB, %d%%)", len ? ", " : "", str(h, "holder"),
					   num(h, "memoryMiB"), num(h, "corePercent"))
				: snprintf(out + len, size - len, "%s%s", len ? ", " : "", str(h, "holder"));
		len += n > 0 ? (size_t)n : 0;
	}
	if (!out[0])
		snprintf(out, size, "-");
}

/* A node without GpuNodeStatus (or one the reader cannot read): its ledger's reservations. */
static int render_reservations(const cJSON *res, const struct kg_style *st, struct buf *out)
{
	struct table t = { .ncols = 3 };
	const char *head[] = { "HOLDER", "MODE", "GPUS" };
	table_row(&t, head, NULL);
	const cJSON *r;
	cJSON_ArrayForEach(r, res) {
		const char *row[] = { str(r, "holder"), str(r, "mode"), str(r, "devices") };
		table_row(&t, row, NULL);
	}
	return buf_adds(out, "Reservations in the ledger:\n") | table_print(&t, st->color, out);
}

static int render_node(const cJSON *doc, const struct kg_style *st, struct buf *out)
{
	const cJSON *devs = cJSON_GetObjectItemCaseSensitive(doc, "devices"), *d;
	if (!cJSON_GetArraySize(devs)) {
		/* No GpuNodeStatus (or none the reader may read): the ledger alone. */
		int rc = buf_printf(out, "%s: no devices known (see the notes)\n", str(doc, "node"));
		rc |= render_reservations(cJSON_GetObjectItemCaseSensitive(doc, "reservations"), st, out);
		rc |= footer(cJSON_GetObjectItemCaseSensitive(doc, "issues"), "!", YELLOW, st, out);
		return rc | footer(cJSON_GetObjectItemCaseSensitive(doc, "notes"), "note:", "", st, out);
	}
	int rc = buf_printf(out, "%s: %d GPUs, %d free, fragmentation %d%%\n", str(doc, "node"), num(doc, "total"),
			    num(doc, "free"), num(doc, "fragmentationPercent"));
	rc |= render_grid(devs, st, out);
	struct table t = { .ncols = st->wide ? 8 : 7 };
	const char *head[] = { "ID", "MODEL", "MEMORY", "ISLAND", "HEALTH", "USED", "HOLDERS", "UUID" };
	table_row(&t, head, NULL);
	cJSON_ArrayForEach(d, devs) {
		char id[16], mem[32], used[48], holders[1024];
		snprintf(id, sizeof(id), "%d", num(d, "id"));
		snprintf(mem, sizeof(mem), "%d MiB", num(d, "memoryMiB"));
		snprintf(used, sizeof(used), "%d%% %d MiB", num(d, "usedCorePercent"), num(d, "usedMiB"));
		if (!num(d, "usedCorePercent") && !num(d, "usedMiB"))
			snprintf(used, sizeof(used), "-");
		holders_text(d, holders, sizeof(holders));
		if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(d, "holders")) &&
		    !strcmp(str(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "holders"), 0), "mode"), "Exclusive"))
			snprintf(used, sizeof(used), "whole");
		const char *row[] = { id, str(d, "model"), mem, str(d, "island")[0] ? str(d, "island") : "-",
				      str(d, "health"), used, holders, str(d, "uuid") };
		const char *col[] = { NULL, NULL, NULL, NULL, strcmp(str(d, "health"), "Healthy") ? RED : NULL,
				      NULL, NULL, NULL };
		table_row(&t, row, col);
	}
	rc |= table_print(&t, st->color, out);
	rc |= footer(cJSON_GetObjectItemCaseSensitive(doc, "issues"), "!", YELLOW, st, out);
	rc |= footer(cJSON_GetObjectItemCaseSensitive(doc, "notes"), "note:", "", st, out);
	return rc;
}

static int render_pods(const cJSON *doc, const struct kg_style *st, struct buf *out)
{
	struct table t = { .ncols = st->wide ? 10 : 8 };
	const char *head[] = { "NAMESPACE", "POD", "PHASE", "NODE", "GPUS", "ASKS", "CLAIM", "GANG", "RESERVATION",
			       "UUIDS" };
	table_row(&t, head, NULL);
	const cJSON *p;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "items")) {
		const char *res = str(p, "reservation");
		const char *row[] = { str(p, "namespace"), str(p, "name"), str(p, "phase"),
				      str(p, "node")[0] ? str(p, "node") : "-", str(p, "devices")[0] ? str(p, "devices") : "-",
				      str(p, "asks"), str(p, "claim")[0] ? str(p, "claim") : "-",
				      str(p, "gang")[0] ? str(p, "gang") : "-", res[0] ? res : "-",
				      str(p, "uuids")[0] ? str(p, "uuids") : "-" };
		const char *col[] = { NULL, NULL, strcmp(str(p, "phase"), "Pending") ? NULL : YELLOW, NULL, NULL,
				      NULL, NULL, NULL, res[0] && strcmp(res, "ok") ? RED : NULL, NULL };
		table_row(&t, row, col);
	}
	int rc = table_print(&t, st->color, out);
	rc |= footer(cJSON_GetObjectItemCaseSensitive(doc, "notes"), "note:", "", st, out);
	return rc;
}

static int render_why(const cJSON *doc, const struct kg_style *st, struct buf *out)
{
	int rc = buf_printf(out, "Pod %s/%s", str(doc, "namespace"), str(doc, "pod"));
	if (str(doc, "asks")[0])
		rc |= buf_printf(out, " asks %s%s%s", str(doc, "asks"), str(doc, "claim")[0] ? " through GpuClaim " : "",
				 str(doc, "claim"));
	rc |= buf_printf(out, "\n%sVerdict: %s%s\n", st->color ? BOLD : "", str(doc, "verdict"), st->color ? RESET : "");
	const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(doc, "reasons"), *it;
	if (cJSON_GetObjectItemCaseSensitive(doc, "nodes")) {
		const cJSON *fits = cJSON_GetObjectItemCaseSensitive(doc, "fitsNow");
		char list[512];
		join(fits, ", ", list, sizeof(list));
		rc |= buf_printf(out, "Nodes: %d, fit now: %d%s%s%s, would fit if empty: %d\n", num(doc, "nodes"),
				 cJSON_GetArraySize(fits), *list ? " (" : "", list, *list ? ")" : "", num(doc, "fitsEmpty"));
	}
	if (cJSON_GetArraySize(reasons)) {
		struct table t = { .ncols = 2 };
		const char *head[] = { "NODES", "REASON" };
		table_row(&t, head, NULL);
		cJSON_ArrayForEach(it, reasons) {
			char n[16];
			snprintf(n, sizeof(n), "%d", num(it, "nodes"));
			const char *row[] = { n, str(it, "reason") };
			table_row(&t, row, NULL);
		}
		rc |= table_print(&t, st->color, out);
	}
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(doc, "gang");
	if (g) {
		rc |= buf_printf(out, "Gang %s: %d present, %d needed, %d bound, %d places reserved", str(g, "name"),
				 num(g, "present"), num(g, "needed"), num(g, "bound"), num(g, "placesReserved"));
		const cJSON *fits = cJSON_GetObjectItemCaseSensitive(g, "fits");
		if (fits)
			rc |= buf_printf(out, "; the members left %s%s", cJSON_IsTrue(fits) ? "fit together now" : "do not fit: ",
					 str(g, "reason"));
		rc |= buf_addc(out, '\n');
	}
	if (str(doc, "schedulerMessage")[0])
		rc |= buf_printf(out, "kube-scheduler: %s\n", str(doc, "schedulerMessage"));
	rc |= footer(cJSON_GetObjectItemCaseSensitive(doc, "notes"), "note:", "", st, out);
	return rc;
}

int kg_render(const char *kind, const cJSON *report, const struct kg_style *st, struct buf *out)
{
	int rc = !strcmp(kind, "nodes") ? render_nodes(report, st, out)
		 : !strcmp(kind, "node") ? render_node(report, st, out)
		 : !strcmp(kind, "pods") ? render_pods(report, st, out)
		 : !strcmp(kind, "why")  ? render_why(report, st, out)
					 : -1;
	return rc ? -1 : 0;
}

/* ---- YAML ---- */

/* Whether a string must be quoted to stay a string in YAML. */
static bool needs_quotes(const char *s)
{
	static const char *const words[] = { "true", "false", "yes", "no", "on", "off", "null", "~", "y", "n" };
	if (!*s || strchr("-?:,[]{}#&*!|>'\"%@` ", *s) || s[strlen(s) - 1] == ' ')
		return true;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcasecmp(s, words[i]))
			return true;
	char *end;
	(void)strtod(s, &end);
	if (!*end)
		return true;
	return strstr(s, ": ") || strstr(s, " #") || strchr(s, '\n') || strchr(s, '\t');
}

static int yaml_scalar(const cJSON *v, struct buf *out)
{
	if (cJSON_IsString(v))
		return needs_quotes(v->valuestring) ? buf_add_json_str(out, v->valuestring) : buf_adds(out, v->valuestring);
	if (cJSON_IsBool(v))
		return buf_adds(out, cJSON_IsTrue(v) ? "true" : "false");
	if (cJSON_IsNumber(v))
		return v->valuedouble == (double)(long long)v->valuedouble ? buf_printf(out, "%lld", (long long)v->valuedouble)
									  : buf_printf(out, "%g", v->valuedouble);
	if (cJSON_IsArray(v))
		return buf_adds(out, "[]");
	if (cJSON_IsObject(v))
		return buf_adds(out, "{}");
	return buf_adds(out, "null");
}

static bool is_block(const cJSON *v)
{
	return (cJSON_IsArray(v) || cJSON_IsObject(v)) && v->child;
}

static int yaml_node(const cJSON *v, int indent, bool in_list, struct buf *out)
{
	int rc = 0;
	const cJSON *it;
	bool first = true;
	cJSON_ArrayForEach(it, v) {
		/* The first key of a list item goes on the "- " line. */
		if (!(in_list && first))
			rc |= buf_printf(out, "%*s", indent, "");
		first = false;
		if (cJSON_IsArray(v))
			rc |= buf_adds(out, "- ");
		else
			rc |= buf_printf(out, "%s:%s", it->string, is_block(it) ? "" : " ");
		if (!is_block(it)) {
			rc |= yaml_scalar(it, out);
			rc |= buf_addc(out, '\n');
		} else if (cJSON_IsArray(v)) {
			if (cJSON_IsArray(it))
				rc |= buf_addc(out, '\n');
			rc |= yaml_node(it, indent + 2, !cJSON_IsArray(it), out);
		} else {
			rc |= buf_addc(out, '\n');
			rc |= yaml_node(it, cJSON_IsArray(it) ? indent : indent + 2, false, out);
		}
	}
	return rc;
}

int kg_yaml(const cJSON *doc, struct buf *out)
{
	if (!is_block(doc))
		return yaml_scalar(doc, out) || buf_addc(out, '\n') ? -1 : 0;
	return yaml_node(doc, 0, false, out) ? -1 : 0;
}
