/*
 * A node's counts with the ledger's reservations, the patch that writes them
 * into its GpuNodeStatus, and the pass that decides which nodes are due
 * (nodesum.h). No I/O here: nodesum_writer.c does the calls.
 */
#include "nodesum.h"
#include "api.h"
#include "strmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nodesum_count(const struct gpu_node *n, const struct alloc_rec *recs, int nrecs, struct nodesum *out)
{
	memset(out, 0, sizeof(*out));
	bool whole[GPU_MAX_DEVICES] = { false }, shared[GPU_MAX_DEVICES] = { false };
	const struct alloc_rec *r = recs;
	for (int k = 0; k < nrecs; k++, r = alloc_rec_next(r)) {
		for (int j = 0; j < r->ndev; j++) {
			int i = gpu_node_find_device(n, r->id_base + r->id_off[j]);
			if (i < 0 || i >= GPU_MAX_DEVICES)
				continue;   /* gone from the GpuNodeStatus */
			if (r->mode == CLAIM_SHARED)
				shared[i] = true;
			else
				whole[i] = true;
		}
	}
	out->reservations = nrecs;
	for (int i = 0; i < n->ndev && i < GPU_MAX_DEVICES; i++) {
		const struct gpu_device *d = &n->dev[i];
		if (d->health != GPU_HEALTHY)
			out->unhealthy++;
		if (whole[i])
			out->whole++;
		else if (shared[i])
			out->shared++;
		else if (gpu_usable(d))
			out->free++;
	}
	out->allocated = out->whole + out->shared;
}

void nodesum_of_view(const struct cache_node *v, struct nodesum *out)
{
	int nrecs = v->nallocs - v->nassumed;   /* the ledger's come first */
	if (!v->node) {
		memset(out, 0, sizeof(*out));
		return;
	}
	nodesum_count(v->node, v->allocs, nrecs > 0 ? nrecs : 0, out);
}

bool nodesum_equal(const struct nodesum *a, const struct nodesum *b)
{
	return a->allocated == b->allocated && a->whole == b->whole && a->shared == b->shared &&
	       a->free == b->free && a->unhealthy == b->unhealthy && a->reservations == b->reservations;
}

int nodesum_patch(const struct nodesum *s, const char *timestamp, const char *by, struct buf *out)
{
	int rc = buf_printf(out,
			    "{\"status\":{\"allocation\":{\"allocated\":%d,\"whole\":%d,\"shared\":%d,\"free\":%d,"
			    "\"unhealthy\":%d,\"reservations\":%d,\"countedAt\":",
			    s->allocated, s->whole, s->shared, s->free, s->unhealthy, s->reservations);
	if (!rc)
		rc = buf_add_json_str(out, timestamp);
	if (!rc)
		rc = buf_adds(out, ",\"countedBy\":");
	if (!rc)
		rc = buf_add_json_str(out, by);
	if (!rc)
		rc = buf_adds(out, "}}}");
	return rc;
}

/* A count: a whole number from 0 to 1e6. */
static bool count_of(const cJSON *o, const char *key, int *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1e6) ||
	    v->valuedouble != floor(v->valuedouble))
		return false;
	*out = (int)v->valuedouble;
	return true;
}

bool nodesum_read(const cJSON *gns, struct nodesum *out)
{
	const cJSON *a = api_path(gns, "status.allocation");
	memset(out, 0, sizeof(*out));
	return cJSON_IsObject(a) && count_of(a, "allocated", &out->allocated) && count_of(a, "whole", &out->whole) &&
	       count_of(a, "shared", &out->shared) && count_of(a, "free", &out->free) &&
	       count_of(a, "unhealthy", &out->unhealthy) && count_of(a, "reservations", &out->reservations);
}

/* ---- the table and the pass ---- */

struct entry {
	uint32_t view_id;          /* the view last counted; 0: none yet */
	bool counted;              /* view_id is set */
	bool again;                /* look at it next pass whatever its view */
	bool has_pub;              /* pub is known */
	struct nodesum pub;        /* what its GpuNodeStatus holds (as watched, or as written) */
	char *object;              /* its GpuNodeStatus's name when not the node's (spec.nodeName); else NULL */
};

struct nodesum_table {
	struct strmap m;           /* node name -> struct entry */
	size_t cursor;             /* where the next pass starts: the first node left over */
	uint64_t version;          /* the snapshot the last pass read */
	bool scanned;              /* version is set */
	bool again;                /* some entry is marked */
};

static void entry_free(struct entry *e)
{
	if (e)
		free(e->object);
	free(e);
}

struct nodesum_table *nodesum_table_new(void)
{
	struct nodesum_table *t = calloc(1, sizeof(*t));
	if (t)
		strmap_init(&t->m);
	return t;
}

void nodesum_table_free(struct nodesum_table *t)
{
	if (!t)
		return;
	const char *k;
	void *v;
	for (size_t i = 0; strmap_next(&t->m, &i, &k, &v);)
		entry_free(v);
	strmap_release(&t->m);
	free(t);
}

static struct entry *entry_of(struct nodesum_table *t, const char *node)
{
	struct entry *e = strmap_get(&t->m, node);
	if (e)
		return e;
	e = calloc(1, sizeof(*e));
	if (e && strmap_put(&t->m, node, e, NULL)) {
		free(e);
		e = NULL;
	}
	return e;
}

int nodesum_table_seen(struct nodesum_table *t, const char *node, const cJSON *obj)
{
	if (!obj) {
		entry_free(strmap_del(&t->m, node));
		return 0;
	}
	struct entry *e = entry_of(t, node);
	if (!e)
		return -1;
	const char *name = api_str(api_path(obj, "metadata"), "name");
	bool other = name && strcmp(name, node);
	if (other != (e->object != NULL) || (other && strcmp(e->object, name))) {
		free(e->object);
		e->object = other ? strdup(name) : NULL;
		if (other && !e->object)
			return -1;
	}
	struct nodesum s;
	bool has = nodesum_read(obj, &s);
	if (!e->counted || has != e->has_pub || (has && !nodesum_equal(&s, &e->pub))) {
		/* the agent's own write without them (an older agent), or another replica's counts */
		e->again = true;
		t->again = true;
	}
	e->has_pub = has;
	e->pub = s;
	return 0;
}

/* Counts node v if it changed; true when its counts differ from what its object holds (*sum: them). */
static bool differs(struct nodesum_table *t, const struct cache_node *v, struct nodesum *sum, bool *oom)
{
	struct entry *e = entry_of(t, v->node->name);
	if (!e) {
		*oom = true;
		return false;
	}
	if (e->counted && e->view_id == v->id && !e->again)
		return false;
	e->view_id = v->id;
	e->counted = true;
	e->again = false;
	nodesum_of_view(v, sum);
	return !e->has_pub || !nodesum_equal(sum, &e->pub);
}

int nodesum_table_scan(struct nodesum_table *t, const struct snapshot *snap, struct nodesum_due *due, int max,
		       int *pending)
{
	*pending = 0;
	if (t->scanned && t->version == snap->version && !t->again)
		return 0;   /* nothing changed since the last pass */
	t->scanned = true;
	t->version = snap->version;
	t->again = false;
	size_t n = snap->n, start = n ? t->cursor % n : 0;
	bool first_left = true, oom = false;
	int ndue = 0;
	for (size_t k = 0; k < n; k++) {
		size_t i = (start + k) % n;
		const struct cache_node *v = snapshot_node(snap, i);
		if (!v->has_gns || !v->node || !v->node->name)
			continue;
		struct nodesum sum;
		if (!differs(t, v, &sum, &oom))
			continue;
		struct entry *e = strmap_get(&t->m, v->node->name);
		if (ndue < max) {
			snprintf(due[ndue].name, sizeof(due[ndue].name), "%s", v->node->name);
			snprintf(due[ndue].object, sizeof(due[ndue].object), "%s", e->object ? e->object : v->node->name);
			due[ndue++].sum = sum;
			continue;
		}
		/* over the budget: next pass, first */
		e->again = true;
		t->again = true;
		(*pending)++;
		if (first_left) {
			t->cursor = i;
			first_left = false;
		}
	}
	if (oom)
		t->again = true;   /* (a node without its entry: counted again next pass) */
	return ndue;
}

void nodesum_table_done(struct nodesum_table *t, const struct nodesum_due *d, bool written)
{
	struct entry *e = strmap_get(&t->m, d->name);
	if (!e)
		return;   /* its GpuNodeStatus went meanwhile */
	if (written) {
		e->has_pub = true;
		e->pub = d->sum;
		return;
	}
	e->again = true;
	t->again = true;
}
