/*
 * Islands: connected components of a vendor's fast links, and the
 * bandwidth each island is published with, by the vendor's detector
 * (detect.h: its link type, island names and link rates). Pure.
 */
#include "agent.h"
#include "detect.h"

#include <stdio.h>
#include <string.h>

/* Bandwidth of GPU slot g inside an island whose members are marked in member[]. */
static double member_gbps(const struct detect_vendor *d, const struct agent_vendor_result *vr,
			  const struct agent_gpu *g, const bool *member)
{
	const struct agent_topo *t = &vr->topo;
	int i = g->index;
	int links = 0;           /* NVLink: bonded links; Xe Link: lanes */
	for (int j = 0; j < t->n; j++) {
		if (j != i && member[j] && t->type[i][j] == d->fast_link)
			links += t->links[i][j];
	}
	return d->member_gbps(g, links);
}

int agent_compute_islands(struct agent_vendor_result *vr)
{
	for (int k = 0; k < vr->ngpu; k++) {
		vr->gpu[k].island[0] = '\0';
		vr->gpu[k].bandwidth_gbps = 0;
	}
	const struct agent_topo *t = &vr->topo;
	const struct detect_vendor *d = detect_vendor_of(vr->vendor);
	if (!vr->have_topo || t->n < 2 || !d)
		return 0;
	enum agent_link fast = d->fast_link;
	/* whole GPUs only: slot of vendor index i, or -1 (MIG mode, not found) */
	int slot[AGENT_MAX_GPUS];
	for (int i = 0; i < AGENT_MAX_GPUS; i++)
		slot[i] = -1;
	for (int k = 0; k < vr->ngpu; k++) {
		const struct agent_gpu *g = &vr->gpu[k];
		if (g->mig_index < 0 && g->index >= 0 && g->index < t->n)
			slot[g->index] = k;
	}
	int comp[AGENT_MAX_GPUS];
	for (int i = 0; i < t->n; i++)
		comp[i] = -1;
	int nisland = 0;
	for (int root = 0; root < t->n; root++) {
		if (slot[root] < 0 || comp[root] >= 0)
			continue;
		/* breadth-first over fast links between whole GPUs */
		int queue[AGENT_MAX_GPUS], head = 0, tail = 0, size = 0;
		bool member[AGENT_MAX_GPUS] = { false };
		comp[root] = root;
		queue[tail++] = root;
		while (head < tail) {
			int a = queue[head++];
			member[a] = true;
			size++;
			for (int b = 0; b < t->n; b++) {
				if (comp[b] < 0 && slot[b] >= 0 && b != a && t->type[a][b] == fast) {
					comp[b] = root;
					queue[tail++] = b;
				}
			}
		}
		if (size < 2)
			continue;
		double bw = -1;
		for (int i = 0; i < t->n; i++) {
			if (!member[i])
				continue;
			double m = member_gbps(d, vr, &vr->gpu[slot[i]], member);
			if (bw < 0 || m < bw)
				bw = m;
		}
		char name[48];
		snprintf(name, sizeof(name), "%s-%d", d->island_prefix, nisland);
		for (int i = 0; i < t->n; i++) {
			if (!member[i])
				continue;
			struct agent_gpu *g = &vr->gpu[slot[i]];
			snprintf(g->island, sizeof(g->island), "%s", name);
			g->bandwidth_gbps = bw;
		}
		nisland++;
	}
	return nisland;
}
