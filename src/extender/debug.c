/*
 * GET /debug/nodes: the cache's view of every node, sorted by name, as JSON,
 * or as the HTML page of html.h for a browser.
 */
#include "extender.h"
#include "html.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b)
{
	const struct cache_node *x = *(const struct cache_node *const *)a;
	const struct cache_node *y = *(const struct cache_node *const *)b;
	return strcmp(x->node->name, y->node->name);
}

static void write_device(struct buf *out, const struct gpu_node *n, int i)
{
	const struct gpu_device *d = &n->dev[i];
	const struct gpu_device_info *in = &n->info[i];
	buf_printf(out, "{\"id\":%d,\"uuid\":", d->id);
	buf_add_json_str(out, in->uuid);
	buf_printf(out, ",\"vendor\":\"%s\",\"model\":", gpu_vendor_name(d->vendor));
	buf_add_json_str(out, in->model);
	buf_adds(out, ",\"architecture\":");
	buf_add_json_str(out, in->arch);
	buf_printf(out, ",\"memoryMiB\":%u,\"health\":\"%s\",\"island\":", d->memory_mib,
		   gpu_health_name(d->health));
	buf_add_json_str(out, d->island >= 0 ? n->islands[d->island].name : "");
	if (d->mig) {
		buf_adds(out, ",\"migProfile\":");
		buf_add_json_str(out, in->mig_profile);
	}
	buf_printf(out, ",\"externallyUsed\":%s,\"exclusiveHolders\":%u,\"sharedHolders\":%u,"
			"\"usedMemoryMiB\":%u,\"usedCorePercent\":%.1f,\"freeMemoryMiB\":%u,\"freeCorePercent\":%.1f}",
		   d->external ? "true" : "false", d->exclusive, d->shared, d->used_mib,
		   d->used_core / 10.0, gpu_free_mib(d), gpu_free_core(d) / 10.0);
}

static void write_node(struct buf *out, const struct cache_node *cn)
{
	const struct gpu_node *n = cn->node;
	buf_adds(out, "{\"name\":");
	buf_add_json_str(out, n->name);
	buf_printf(out, ",\"hasNode\":%s,\"hasGpuNodeStatus\":%s,\"labels\":{",
		   cn->has_node ? "true" : "false", cn->has_gns ? "true" : "false");
	for (int i = 0; i < n->nlabels; i++) {
		if (i)
			buf_addc(out, ',');
		buf_add_json_str(out, n->labels[i].key);
		buf_addc(out, ':');
		buf_add_json_str(out, gpu_label_value(n, i));
	}
	buf_adds(out, "},\"islands\":[");
	for (int i = 0; i < n->nisland; i++) {
		buf_adds(out, i ? ",{\"name\":" : "{\"name\":");
		buf_add_json_str(out, n->islands[i].name);
		buf_printf(out, ",\"bandwidthGBps\":%g}", n->islands[i].bandwidth_gbps);
	}
	int free_whole = 0;
	buf_adds(out, "],\"devices\":[");
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		free_whole += gpu_usable(d) && !d->exclusive && !d->shared;
		if (i)
			buf_addc(out, ',');
		write_device(out, n, i);
	}
	buf_printf(out, "],\"freeDevices\":%d,\"allocations\":[", free_whole);
	const struct alloc_rec *r = cn->allocs;
	for (int i = 0; i < cn->nallocs; i++, r = alloc_rec_next(r)) {
		struct alloc one, *a = &one;
		alloc_rec_unpack(r, a);
		char ids[256];
		alloc_ids(a, ids, sizeof(ids));
		buf_adds(out, i ? ",{\"pod\":" : "{\"pod\":");
		buf_add_json_str(out, a->pod);
		buf_adds(out, ",\"uid\":");
		buf_add_json_str(out, a->uid);
		buf_printf(out, ",\"devices\":\"%s\",\"mode\":\"%s\",\"memoryMiB\":%u,\"corePercent\":%.1f,\"since\":%lld}",
			   ids, claim_mode_name(a->mode),
			   a->mem_mib, a->core / 10.0, (long long)a->since);
	}
	buf_adds(out, "]}");
}

/* ---- the HTML page ---- */

/*
 * A gang's place: its uid is the ledger's "gang-..." (ledger.h,
 * LEDGER_PLACE_PREFIX; a pod's uid is a UUID and never starts so).
 */
static bool rec_is_place(const struct alloc_rec *r)
{
	return !strncmp(alloc_rec_uid(r), "gang-", 5);
}

/* What the page is made of, each in one allocation (the strings stay the snapshot's). */
struct page_parts {
	struct html_node *nodes;
	struct html_gpu *gpus;
	struct html_holder *holders;
	char (*notes)[128];
};

/* Node cn's devices and their holders, taken from parts at *ngpu and *nhold. */
static void page_node(const struct cache_node *cn, struct page_parts *p, size_t k, size_t *ngpu, size_t *nhold)
{
	const struct gpu_node *n = cn->node;
	struct html_node *hn = &p->nodes[k];
	*hn = (struct html_node){ .name = n->name, .ngpus = n->ndev, .gpus = p->gpus + *ngpu };
	int unknown = 0;
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		const struct gpu_device_info *in = &n->info[i];
		struct html_gpu *g = &p->gpus[(*ngpu)++];
		*g = (struct html_gpu){ .id = d->id, .model = in->mig_profile[0] ? in->mig_profile : in->model,
					.island = d->island >= 0 ? n->islands[d->island].name : "", .uuid = in->uuid,
					.memory_mib = d->memory_mib, .holders = p->holders + *nhold,
					.state = d->health != GPU_HEALTHY ? HTML_GPU_UNHEALTHY
						 : d->external ? HTML_GPU_EXTERNAL : HTML_GPU_OK };
		const struct alloc_rec *r = cn->allocs;
		for (int a = 0; a < cn->nallocs; a++, r = alloc_rec_next(r))
			for (int j = 0; j < r->ndev; j++) {
				if (r->id_base + r->id_off[j] != d->id)
					continue;
				struct alloc_names x;
				alloc_rec_names(r, &x);
				p->holders[(*nhold)++] = (struct html_holder){
					.ns = x.ns, .name = x.name, .gang = x.gang, .place = rec_is_place(r),
					.shared = r->mode == CLAIM_SHARED, .mem_mib = r->mem_mib, .core_pct = r->core / 10 };
				g->nholders++;
			}
	}
	/* Reservations of devices the agent does not list (or no GpuNodeStatus at all). */
	const struct alloc_rec *r = cn->allocs;
	for (int a = 0; a < cn->nallocs; a++, r = alloc_rec_next(r))
		for (int j = 0; j < r->ndev; j++) {
			bool known = false;
			for (int i = 0; i < n->ndev && !known; i++)
				known = n->dev[i].id == r->id_base + r->id_off[j];
			unknown += !known;
		}
	if (unknown || !cn->has_gns) {
		snprintf(p->notes[k], sizeof(p->notes[k]), "%s%d reserved device%s the agent does not list",
			 cn->has_gns ? "" : "no GpuNodeStatus; ", unknown, unknown == 1 ? "" : "s");
		hn->note = p->notes[k];
	}
}

/* v's n nodes as the page; nodes with neither devices nor reservations are counted, not drawn, unless asked for. */
static int debug_html(const struct snapshot *s, const struct cache_node **v, size_t n, bool one, struct buf *out)
{
	size_t ngpu = 0, nhold = 0, k = 0;
	for (size_t i = 0; i < n; i++) {
		ngpu += (size_t)v[i]->node->ndev;
		const struct alloc_rec *r = v[i]->allocs;
		for (int a = 0; a < v[i]->nallocs; a++, r = alloc_rec_next(r))
			nhold += r->ndev;
	}
	struct page_parts p = { malloc((n + 1) * sizeof(*p.nodes)), malloc((ngpu + 1) * sizeof(*p.gpus)),
				malloc((nhold + 1) * sizeof(*p.holders)), malloc((n + 1) * sizeof(*p.notes)) };
	int rc = -1;
	if (p.nodes && p.gpus && p.holders && p.notes) {
		ngpu = nhold = 0;
		for (size_t i = 0; i < n; i++)
			if (one || v[i]->node->ndev || v[i]->nallocs)
				page_node(v[i], &p, k++, &ngpu, &nhold);
		char source[128];
		snprintf(source, sizeof(source), "gpu-extender's cache, version %llu", (unsigned long long)s->version);
		struct html_page page = { .title = "GPUs", .source = source, .nnodes = (int)k, .nodes = p.nodes,
					  .hidden = (int)(n - k) };
		rc = html_gpu_page(&page, out);
	}
	free(p.nodes);
	free(p.gpus);
	free(p.holders);
	free(p.notes);
	return rc;
}

/* ?format=html|json; else HTML when the Accept header names text/html (a browser), JSON otherwise. -1: bad format. */
static int wants_html(const struct http_request *req)
{
	const char *f = httpd_query(req, "format"), *accept = httpd_header(req, "Accept");
	if (f)
		return !strcmp(f, "html") ? 1 : !strcmp(f, "json") ? 0 : -1;
	return accept && strstr(accept, "text/html") ? 1 : 0;
}

void extender_debug_nodes(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct cache *c = ctx;
	const char *only = httpd_query(req, "node");
	int html = wants_html(req);
	if (html < 0) {
		httpd_error(resp, 400, "format must be html or json");
		return;
	}
	struct snapshot *s = cache_acquire(c);
	const struct cache_node **v = malloc((s->n + 1) * sizeof(*v));
	if (!v) {
		snapshot_release(s);
		httpd_error(resp, 500, "out of memory");
		return;
	}
	size_t n = 0;
	for (size_t i = 0; i < s->n; i++)
		if (!only || !strcmp(snapshot_node(s, i)->node->name, only))
			v[n++] = snapshot_node(s, i);
	qsort(v, n, sizeof(*v), by_name);
	struct buf *out = &resp->body;
	if (html && (n || !only)) {
		resp->content_type = "text/html; charset=utf-8";
		if (debug_html(s, v, n, only != NULL, out))
			httpd_error(resp, 500, "out of memory");
		free(v);
		snapshot_release(s);
		return;
	}
	buf_printf(out, "{\"version\":%llu,\"nodes\":[", (unsigned long long)s->version);
	for (size_t i = 0; i < n; i++) {
		if (i)
			buf_addc(out, ',');
		write_node(out, v[i]);
	}
	buf_adds(out, "]}\n");
	free(v);
	snapshot_release(s);
	if (only && !n)
		httpd_error(resp, 404, "node %s is not in the cache", only);
}
