#include "gang.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node_room {
	int node;                 /* index into the nodes */
	int places;               /* members it has room for, up to the gang's size */
	uint32_t free_core;       /* compute left on its usable devices nobody owns, milli-GPU */
	const char *domain;       /* its topology label value, "" without one */
};

struct domain_room {
	const char *name;
	int places;
};

/* Members of c that fit n one after another, up to max. */
static int places_on(const struct gpu_node *n, const struct claim *c, int max)
{
	if (!fit_possible(n, c))
		return 0;          /* (most nodes, on a busy cluster: no copy for them) */
	struct gpu_node *scratch = gpu_node_clone(n);
	if (!scratch)
		return -1;
	int k = 0;
	struct fit f;
	while (k < max && fit_possible(scratch, c) && fit_node(scratch, c, PACK_BINPACK, &f)) {
		fit_apply(scratch, c, &f);
		k++;
	}
	gpu_node_free(scratch);
	return k;
}

/* Most places first (fewest nodes); of equal ones the fullest (what the gang leaves stays whole). */
static int by_room(const void *a, const void *b)
{
	const struct node_room *x = a, *y = b;
	if (x->places != y->places)
		return y->places - x->places;
	if (x->free_core != y->free_core)
		return x->free_core < y->free_core ? -1 : 1;
	return x->node - y->node;
}

static uint32_t free_core(const struct gpu_node *n)
{
	uint32_t sum = 0;
	for (int i = 0; i < n->ndev; i++)
		if (gpu_usable(&n->dev[i]) && !n->dev[i].exclusive)
			sum += gpu_free_core(&n->dev[i]);
	return sum;
}

static int by_domain_room(const void *a, const void *b)
{
	const struct domain_room *x = a, *y = b;
	if (x->places != y->places)
		return y->places - x->places;
	return strcmp(x->name, y->name);
}

/* Slots for up to want members on node i, devices chosen one member after another. */
static int fill_node(const struct gpu_node *n, int i, const struct claim *c, int want, struct gang_plan *out)
{
	struct gpu_node *scratch = gpu_node_clone(n);
	if (!scratch)
		return -1;
	for (int k = 0; k < want; k++) {
		struct gang_slot *s = &out->slots[out->nslots];
		if (!fit_node(scratch, c, PACK_BINPACK, &s->fit))
			break;
		fit_apply(scratch, c, &s->fit);
		s->node = i;
		out->nslots++;
	}
	gpu_node_free(scratch);
	return 0;
}

int gang_plan(const struct gpu_node *const *nodes, int n, const struct claim *c, int members,
	      const char *topology_key, struct gang_plan *out)
{
	memset(out, 0, sizeof(*out));
	struct node_room *room = calloc((size_t)n + 1, sizeof(*room));
	struct domain_room *dom = calloc((size_t)n + 1, sizeof(*dom));
	out->slots = calloc((size_t)members + 1, sizeof(*out->slots));
	int rc = -1, ndom = 0, nroom = 0;
	if (!room || !dom || !out->slots)
		goto out;
	for (int i = 0; i < n; i++) {
		int k = places_on(nodes[i], c, members);
		if (k < 0)
			goto out;
		if (!k)
			continue;
		const char *d = topology_key && *topology_key ? gpu_node_label(nodes[i], topology_key) : NULL;
		room[nroom++] = (struct node_room){ i, k, free_core(nodes[i]), d ? d : "" };
		out->places += k;
		int j = 0;
		while (j < ndom && strcmp(dom[j].name, room[nroom - 1].domain))
			j++;
		if (j == ndom)
			dom[ndom++] = (struct domain_room){ room[nroom - 1].domain, 0 };
		dom[j].places += k;
	}
	if (out->places > members)
		out->places = members;
	rc = 0;
	if (out->places < members) {
		snprintf(out->reason, sizeof(out->reason), "needs %d×%d GPU%s (one pod each); room for %d such pod%s",
			 members, c->count, c->count == 1 ? "" : "s", out->places, out->places == 1 ? "" : "s");
		goto out;
	}
	/* The domains to use: the tightest one that holds the gang, else the largest first. */
	qsort(dom, (size_t)ndom, sizeof(*dom), by_domain_room);
	int first = 0, last = 0, have = dom[0].places;
	for (int j = ndom - 1; j >= 0; j--) {
		if (dom[j].places >= members) {
			first = last = j;
			have = dom[j].places;
			break;
		}
	}
	while (have < members)
		have += dom[++last].places;
	qsort(room, (size_t)nroom, sizeof(*room), by_room);
	for (int j = first; j <= last && out->nslots < members; j++) {
		out->domains++;
		for (int k = 0; k < nroom && out->nslots < members; k++) {
			if (strcmp(room[k].domain, dom[j].name))
				continue;
			int before = out->nslots, want = members - out->nslots;
			if (fill_node(nodes[room[k].node], room[k].node, c,
				      want < room[k].places ? want : room[k].places, out)) {
				rc = -1;
				goto out;
			}
			out->nodes += out->nslots > before;
		}
	}
	out->ok = out->nslots == members;
	if (!out->ok)
		snprintf(out->reason, sizeof(out->reason), "needs %d×%d GPUs; the places found did not all take it",
			 members, c->count);
out:
	free(room);
	free(dom);
	if (rc || !out->ok) {
		free(out->slots);
		out->slots = NULL;
		out->nslots = 0;
	}
	return rc;
}

void gang_plan_release(struct gang_plan *p)
{
	free(p->slots);
	p->slots = NULL;
	p->nslots = 0;
}

/* "8 Exclusive GPUs each", "1 Shared GPU each (8192 MiB, 250 milli-GPU on each)". */
static void place_shape(char *out, size_t size, enum claim_mode mode, int count, uint32_t mib, uint32_t core)
{
	int len = snprintf(out, size, "%d %s GPU%s", count, claim_mode_name(mode), count == 1 ? "" : "s");
	if (mode == CLAIM_SHARED && len > 0 && (size_t)len < size)
		snprintf(out + len, size - (size_t)len, " (%u MiB, %u milli-GPU on each)", mib, core);
}

bool gang_place_fits(const struct gpu_node *n, const struct gang_place *p, const struct claim *c, char *why,
		     size_t size)
{
	bool shared = c->mode == CLAIM_SHARED;
	if (p->mode != c->mode || p->ndev != c->count || (shared && (p->mem_mib != c->mem_mib || p->core != c->core))) {
		char has[96], asks[96];
		place_shape(has, sizeof(has), p->mode, p->ndev, p->mem_mib, p->core);
		place_shape(asks, sizeof(asks), c->mode, c->count, c->mem_mib, c->core);
		snprintf(why, size, "places of %s each; this member asks %s", has, asks);
		return false;
	}
	/* The node with only the place's devices usable, free of the place's own use. */
	struct gpu_node *only = gpu_node_clone(n);
	if (!only) {
		snprintf(why, size, "out of memory");
		return false;
	}
	int found = 0;
	for (int i = 0; i < only->ndev; i++) {
		bool in = false;
		for (int k = 0; k < p->ndev && !in; k++)
			in = only->dev[i].id == p->ids[k];
		if (in) {
			gpu_clear_usage(&only->dev[i]);
			found++;
		} else {
			only->dev[i].external = true;
		}
	}
	struct fit f;
	bool ok = found == p->ndev && fit_node(only, c, PACK_BINPACK, &f) && f.ndev == p->ndev;
	if (!ok && found != p->ndev)
		snprintf(why, size, "a place's devices are no longer all on node %s", n->name);
	else if (!ok)
		snprintf(why, size, "a place's devices do not fit this member: %s", f.ok ? "other devices" : f.reason);
	gpu_node_free(only);
	return ok;
}
