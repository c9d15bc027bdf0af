/* kubectl gpu node NAME -o html (and nodes -o html): the model drawn by html.h, as the extender's debug page is. */
#include "kgpu.h"
#include "html.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the page is made of, each in one allocation (the strings stay the cluster's). */
struct parts {
	struct html_node *nodes;
	struct html_gpu *gpus;
	struct html_holder *holders;
	char (*notes)[1024];
};

static void holder_of(const struct kg_cluster *c, const struct ledger_entry *e, struct html_holder *h)
{
	*h = (struct html_holder){ .ns = e->ns, .name = e->name, .gang = e->gang, .place = ledger_entry_is_place(e),
				   .shared = e->a.mode == CLAIM_SHARED, .mem_mib = e->a.mem_mib, .core_pct = e->a.core / 10 };
	if (!kg_ns_readable(c, e->ns))
		*h = (struct html_holder){ .name = "other", .gang = "", .shared = h->shared, .mem_mib = h->mem_mib,
					   .core_pct = h->core_pct };
	else if (!h->place && !kg_cluster_pod(c, e->ns, e->name))
		h->missing = true;
}

/* The node's issues (the ledger and the agent disagree), joined, as its note. */
static void node_note(const struct kg_cluster *c, const struct kg_node *n, char *out, size_t size)
{
	cJSON *issues = cJSON_CreateArray();
	kg_node_issues(c, n, issues);
	size_t len = 0;
	out[0] = 0;
	if (!n->gn)
		len = (size_t)snprintf(out, size, "no GpuNodeStatus (or not readable): devices unknown");
	const cJSON *it;
	cJSON_ArrayForEach(it, issues) {
		if (!cJSON_IsString(it) || len >= size)
			continue;
		int k = snprintf(out + len, size - len, "%s%s", len ? "; " : "", it->valuestring);
		len += k > 0 ? (size_t)k : 0;
	}
	cJSON_Delete(issues);
}

static void page_node(const struct kg_cluster *c, const struct kg_node *n, struct parts *p, int k, size_t *ngpu,
		      size_t *nhold)
{
	int ndev = n->gn ? n->gn->ndev : 0;
	p->nodes[k] = (struct html_node){ .name = n->name, .ngpus = ndev, .gpus = p->gpus + *ngpu };
	for (int i = 0; i < ndev; i++) {
		const struct gpu_device *d = &n->gn->dev[i];
		const struct gpu_device_info *in = &n->gn->info[i];
		struct html_gpu *g = &p->gpus[(*ngpu)++];
		*g = (struct html_gpu){ .id = d->id, .model = in->mig_profile[0] ? in->mig_profile : in->model,
					.island = d->island >= 0 ? n->gn->islands[d->island].name : "", .uuid = in->uuid,
					.memory_mib = d->memory_mib, .holders = p->holders + *nhold,
					.state = d->health != GPU_HEALTHY ? HTML_GPU_UNHEALTHY
						 : d->external ? HTML_GPU_EXTERNAL : HTML_GPU_OK };
		for (int e = 0; e < n->led.n; e++)
			for (int j = 0; j < n->led.e[e].a.ndev; j++)
				if (alloc_id(&n->led.e[e].a, j) == d->id) {
					holder_of(c, &n->led.e[e], &p->holders[(*nhold)++]);
					g->nholders++;
				}
	}
	node_note(c, n, p->notes[k], sizeof(p->notes[k]));
	p->nodes[k].note = p->notes[k][0] ? p->notes[k] : NULL;
}

int kg_html(const struct kg_cluster *c, const char *node, struct buf *out, char *err, size_t errlen)
{
	if (node && !kg_cluster_node(c, node)) {
		snprintf(err, errlen, "node %s has neither a GpuNodeStatus nor a ledger", node);
		return -1;
	}
	size_t ngpu = 0, nhold = 0;
	for (int i = 0; i < c->n; i++) {
		ngpu += c->nodes[i].gn ? (size_t)c->nodes[i].gn->ndev : 0;
		for (int e = 0; e < c->nodes[i].led.n; e++)
			nhold += c->nodes[i].led.e[e].a.ndev;
	}
	struct parts p = { malloc(((size_t)c->n + 1) * sizeof(*p.nodes)), malloc((ngpu + 1) * sizeof(*p.gpus)),
			   malloc((nhold + 1) * sizeof(*p.holders)), malloc(((size_t)c->n + 1) * sizeof(*p.notes)) };
	int rc = -1, k = 0;
	if (p.nodes && p.gpus && p.holders && p.notes) {
		ngpu = nhold = 0;
		for (int i = 0; i < c->n; i++)
			if (!node || !strcmp(c->nodes[i].name, node))
				page_node(c, &c->nodes[i], &p, k++, &ngpu, &nhold);
		/* Where it comes from, and what could not be read. */
		char source[1024];
		size_t len = (size_t)snprintf(source, sizeof(source), "the API server's ledgers and GpuNodeStatus (kubectl gpu)");
		const cJSON *it;
		cJSON_ArrayForEach(it, c->notes) {
			if (cJSON_IsString(it) && len < sizeof(source)) {
				int w = snprintf(source + len, sizeof(source) - len, "; %s", it->valuestring);
				len += w > 0 ? (size_t)w : 0;
			}
		}
		struct html_page page = { .title = node ? node : "GPUs", .source = source, .nnodes = k, .nodes = p.nodes };
		rc = html_gpu_page(&page, out);
	}
	if (rc)
		snprintf(err, errlen, "out of memory");
	free(p.nodes);
	free(p.gpus);
	free(p.holders);
	free(p.notes);
	return rc;
}
