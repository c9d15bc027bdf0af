/* The GPU page (html.h): escaping, holder colours, the page itself. */
#include "html.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int html_escape(struct buf *out, const char *s)
{
	int rc = 0;
	const char *run = s;
	for (; s && *s; s++) {
		const char *e = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;"
			      : *s == '"' ? "&quot;" : *s == '\'' ? "&#39;" : NULL;
		if (!e)
			continue;
		rc |= buf_add(out, run, (size_t)(s - run));
		rc |= buf_adds(out, e);
		run = s + 1;
	}
	if (s)
		rc |= buf_add(out, run, (size_t)(s - run));
	return rc ? -1 : 0;
}

/* ---- holders' colours ---- */

/* What gets one colour: a gang (its places and members), else one pod. */
struct group {
	const char *ns;             /* "" for a holder the reader may not name */
	const char *key;            /* the gang, or the pod */
	bool gang;
};

static void group_of(const struct html_holder *h, struct group *g)
{
	g->ns = h->ns ? h->ns : "";
	g->gang = h->gang && h->gang[0];
	g->key = g->gang ? h->gang : h->name ? h->name : "";
}

static int group_cmp(const void *pa, const void *pb)
{
	const struct group *a = pa, *b = pb;
	int c = strcmp(a->ns, b->ns);
	if (!c)
		c = strcmp(a->key, b->key);
	return c ? c : (int)a->gang - (int)b->gang;
}

/* Every group on the page, sorted and unique: its index gives its colour. -1 when out of memory. */
static int groups_collect(const struct html_page *p, struct group **out, int *n)
{
	size_t cap = 0;
	for (int i = 0; i < p->nnodes; i++)
		for (int k = 0; k < p->nodes[i].ngpus; k++)
			cap += (size_t)p->nodes[i].gpus[k].nholders;
	struct group *g = malloc((cap + 1) * sizeof(*g));
	if (!g)
		return -1;
	size_t m = 0;
	for (int i = 0; i < p->nnodes; i++)
		for (int k = 0; k < p->nodes[i].ngpus; k++)
			for (int h = 0; h < p->nodes[i].gpus[k].nholders; h++)
				group_of(&p->nodes[i].gpus[k].holders[h], &g[m++]);
	qsort(g, m, sizeof(*g), group_cmp);
	size_t u = 0;
	for (size_t i = 0; i < m; i++)
		if (!u || group_cmp(&g[u - 1], &g[i]))
			g[u++] = g[i];
	*out = g;
	*n = (int)u;
	return 0;
}

/* Group k's colour: hues the golden angle apart, so neighbours in the legend differ most. */
static int add_color(struct buf *out, int k)
{
	double hue = fmod(k * 137.508 + 200.0, 360.0);
	return buf_printf(out, "hsl(%d,70%%,72%%)", (int)hue);
}

static int group_index(const struct group *g, int n, const struct html_holder *h)
{
	struct group want;
	group_of(h, &want);
	const struct group *f = bsearch(&want, g, (size_t)n, sizeof(*g), group_cmp);
	return f ? (int)(f - g) : 0;
}

/* ---- the page ---- */

static const char css[] =
	"body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}"
	"h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:0}"
	".source,.summary,.models,.note{margin:.2em 0;color:#555}.note{color:#a40}"
	".legend{list-style:none;padding:0;margin:.8em 0;display:flex;flex-wrap:wrap;gap:.4em 1.2em}"
	".legend li{display:flex;align-items:center;gap:.4em}.legend i{color:#777;font-style:normal}"
	".sw{display:inline-block;width:1.1em;height:1.1em;border:1px solid #888;border-radius:3px}"
	".node{border:1px solid #ccc;border-radius:6px;padding:.6em .8em;margin:.8em 0}"
	".island{display:flex;align-items:stretch;gap:.5em;margin:.4em 0}"
	".iname{width:7em;color:#555;font-size:.9em;align-self:center}"
	".gpus{display:flex;flex-wrap:wrap;gap:.4em}"
	".gpu{width:10.5em;min-height:4.2em;border:1px solid #888;border-radius:4px;padding:.25em;"
	"display:flex;flex-direction:column;gap:2px;font-size:.85em;overflow:hidden}"
	".gid{font-weight:600}.h{border-radius:3px;padding:0 .25em;overflow-wrap:anywhere}"
	".free,.sw.free{background:#fff;border-style:dashed;border-color:#4a4}"
	".unhealthy,.sw.unhealthy{background:repeating-linear-gradient(45deg,#fbd9d9 0 6px,#f0a0a0 6px 12px);"
	"border-color:#c00}"
	".external,.sw.external{background:#9a9a9a;color:#fff}"
	".shared{background:#fafafa}";

/* Free, held whole, shared, unhealthy or used outside, as data-state says. */
static const char *gpu_state(const struct html_gpu *d)
{
	if (d->state == HTML_GPU_UNHEALTHY)
		return "unhealthy";
	if (d->state == HTML_GPU_EXTERNAL)
		return "external";
	for (int i = 0; i < d->nholders; i++)
		if (!d->holders[i].shared)
			return "held";
	return d->nholders ? "shared" : "free";
}

static int holder_label(struct buf *out, const struct html_holder *h)
{
	int rc = 0;
	if (h->ns) {
		rc |= html_escape(out, h->ns);
		rc |= buf_addc(out, '/');
	}
	rc |= html_escape(out, h->name ? h->name : "");
	if (h->place)
		rc |= buf_adds(out, " (gang place)");
	else if (h->missing)
		rc |= buf_adds(out, " (no such pod)");
	if (h->shared)
		rc |= buf_printf(out, " %u MiB, %u%%", h->mem_mib, h->core_pct);
	return rc;
}

/* data-holder (the label without the share's size) and data-group: what a program compares. */
static int holder_attrs(struct buf *out, const struct html_holder *h)
{
	struct html_holder plain = *h;
	plain.shared = false;
	int rc = buf_adds(out, " data-holder=\"") | holder_label(out, &plain);
	struct group g;
	group_of(h, &g);
	rc |= buf_adds(out, "\" data-group=\"");
	if (g.ns[0])
		rc |= html_escape(out, g.ns) | buf_addc(out, '/');
	return rc | html_escape(out, g.key) | buf_addc(out, '"');
}

static int write_gpu(struct buf *out, const struct html_gpu *d, const struct group *g, int ng)
{
	const char *state = gpu_state(d);
	int rc = buf_printf(out, "<div class=\"gpu %s\" data-device=\"%d\" data-state=\"%s\"", state, d->id, state);
	if (!strcmp(state, "held")) {
		/* Held whole: the cell takes its (first) holder's colour. */
		const struct html_holder *h = d->holders;
		for (int i = 0; i < d->nholders; i++)
			if (!d->holders[i].shared) {
				h = &d->holders[i];
				break;
			}
		rc |= buf_adds(out, " style=\"background:") | add_color(out, group_index(g, ng, h)) | buf_addc(out, '"');
	}
	rc |= buf_adds(out, " title=\"") | html_escape(out, d->uuid ? d->uuid : "");
	rc |= buf_printf(out, "\"><div class=\"gid\">GPU %d</div>", d->id);
	for (int i = 0; i < d->nholders; i++) {
		const struct html_holder *h = &d->holders[i];
		rc |= buf_adds(out, "<div class=\"h\"") | holder_attrs(out, h);
		rc |= buf_adds(out, " style=\"background:") | add_color(out, group_index(g, ng, h));
		rc |= buf_adds(out, "\">") | holder_label(out, h) | buf_adds(out, "</div>");
	}
	if (d->state == HTML_GPU_UNHEALTHY)
		rc |= buf_adds(out, "<div>unhealthy</div>");
	else if (d->state == HTML_GPU_EXTERNAL)
		rc |= buf_adds(out, "<div>used outside</div>");
	else if (!d->nholders)
		rc |= buf_adds(out, "<div>free</div>");
	return rc | buf_adds(out, "</div>");
}

/* "8 × NVIDIA H100 80GB HBM3 (81559 MiB)", one per model and size, in the devices' order. */
static int write_models(struct buf *out, const struct html_node *n)
{
	int rc = buf_adds(out, "<p class=\"models\">");
	bool any = false;
	for (int i = 0; i < n->ngpus; i++) {
		const struct html_gpu *d = &n->gpus[i];
		int count = 0, seen = 0;
		for (int k = 0; k < n->ngpus; k++) {
			bool same = !strcmp(n->gpus[k].model, d->model) && n->gpus[k].memory_mib == d->memory_mib;
			count += same;
			seen += same && k < i;
		}
		if (seen)
			continue;
		rc |= buf_printf(out, "%s%d &times; ", any ? "; " : "", count);
		rc |= html_escape(out, d->model[0] ? d->model : "unknown model");
		rc |= buf_printf(out, " (%u MiB)", d->memory_mib);
		any = true;
	}
	if (!any)
		rc |= buf_adds(out, "no GPUs known");
	return rc | buf_adds(out, "</p>");
}

/* One row per island, in the order the devices name them. */
static int write_node(struct buf *out, const struct html_node *n, const struct group *g, int ng)
{
	int rc = buf_adds(out, "<section class=\"node\" data-node=\"") | html_escape(out, n->name);
	rc |= buf_adds(out, "\"><h2>") | html_escape(out, n->name) | buf_adds(out, "</h2>");
	rc |= write_models(out, n);
	for (int i = 0; i < n->ngpus; i++) {
		const char *island = n->gpus[i].island;
		bool seen = false;
		for (int k = 0; k < i && !seen; k++)
			seen = !strcmp(n->gpus[k].island, island);
		if (seen)
			continue;
		rc |= buf_adds(out, "<div class=\"island\"><div class=\"iname\">");
		rc |= html_escape(out, island[0] ? island : "(no island)");
		rc |= buf_adds(out, "</div><div class=\"gpus\">");
		for (int k = i; k < n->ngpus; k++)
			if (!strcmp(n->gpus[k].island, island))
				rc |= write_gpu(out, &n->gpus[k], g, ng);
		rc |= buf_adds(out, "</div></div>");
	}
	if (n->note)
		rc |= buf_adds(out, "<p class=\"note\">") | html_escape(out, n->note) | buf_adds(out, "</p>");
	return rc | buf_adds(out, "</section>\n");
}

static int write_summary(struct buf *out, const struct html_page *p)
{
	int c[5] = { 0 }, total = 0;    /* free, held, shared, unhealthy, external */
	static const char *const names[] = { "free", "held", "shared", "unhealthy", "external" };
	for (int i = 0; i < p->nnodes; i++)
		for (int k = 0; k < p->nodes[i].ngpus; k++) {
			const char *s = gpu_state(&p->nodes[i].gpus[k]);
			for (int j = 0; j < 5; j++)
				c[j] += !strcmp(s, names[j]);
			total++;
		}
	int rc = buf_printf(out, "<p class=\"summary\">%d node%s, %d GPUs: %d free, %d held whole, %d shared, "
				 "%d unhealthy, %d used outside", p->nnodes, p->nnodes == 1 ? "" : "s", total, c[0],
			    c[1], c[2], c[3], c[4]);
	if (p->hidden)
		rc |= buf_printf(out, "; %d node%s without GPUs not shown", p->hidden, p->hidden == 1 ? "" : "s");
	return rc | buf_adds(out, "</p>\n");
}

static int write_legend(struct buf *out, const struct group *g, int ng)
{
	int rc = buf_adds(out, "<ul class=\"legend\">"
			       "<li data-group=\"\" data-state=\"free\"><span class=\"sw free\"></span>free</li>"
			       "<li data-group=\"\" data-state=\"unhealthy\"><span class=\"sw unhealthy\"></span>unhealthy</li>"
			       "<li data-group=\"\" data-state=\"external\"><span class=\"sw external\"></span>used outside "
			       "Kubernetes</li>");
	for (int k = 0; k < ng; k++) {
		rc |= buf_adds(out, "<li data-group=\"");
		if (g[k].ns[0])
			rc |= html_escape(out, g[k].ns) | buf_addc(out, '/');
		rc |= html_escape(out, g[k].key) | buf_adds(out, "\" data-color=\"") | add_color(out, k);
		rc |= buf_adds(out, "\"><span class=\"sw\" style=\"background:") | add_color(out, k) | buf_adds(out, "\"></span>");
		if (g[k].ns[0])
			rc |= html_escape(out, g[k].ns) | buf_addc(out, '/');
		rc |= html_escape(out, g[k].key);
		rc |= buf_adds(out, g[k].gang ? " <i>gang</i></li>" : g[k].ns[0] ? " <i>pod</i></li>" : "</li>");
	}
	return rc | buf_adds(out, "</ul>\n");
}

int html_gpu_page(const struct html_page *p, struct buf *out)
{
	struct group *g;
	int ng;
	if (groups_collect(p, &g, &ng))
		return -1;
	const char *title = p->title ? p->title : "GPUs";
	int rc = buf_adds(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>");
	rc |= html_escape(out, title) | buf_printf(out, "</title><style>%s</style></head>\n<body><h1>", css);
	rc |= html_escape(out, title) | buf_adds(out, "</h1>\n");
	if (p->source)
		rc |= buf_adds(out, "<p class=\"source\">") | html_escape(out, p->source) | buf_adds(out, "</p>\n");
	rc |= write_summary(out, p);
	rc |= write_legend(out, g, ng);
	for (int i = 0; i < p->nnodes; i++)
		rc |= write_node(out, &p->nodes[i], g, ng);
	rc |= buf_adds(out, "</body></html>\n");
	free(g);
	return rc ? -1 : 0;
}
