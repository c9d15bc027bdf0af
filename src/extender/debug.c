/* GET /debug/nodes: the cache's view of every node, sorted by name. */
#include "extender.h"

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

void extender_debug_nodes(void *ctx, const struct http_request *req, struct http_response *resp)
{
	struct cache *c = ctx;
	const char *only = httpd_query(req, "node");
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
