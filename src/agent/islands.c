/*
 * Islands: connected components of a vendor's fast links, and the
 * bandwidth each island is published with. Pure.
 */
#include "agent.h"

#include <stdio.h>
#include <string.h>

static enum agent_link fast_link(enum gpu_vendor v)
{
	switch (v) {
	case GPU_VENDOR_NVIDIA:
		return AGENT_LINK_NVLINK;
	case GPU_VENDOR_AMD:
		return AGENT_LINK_XGMI;
	case GPU_VENDOR_INTEL:
		return AGENT_LINK_XELINK;
	case GPU_VENDOR_ANY:
		break;
	}
	return AGENT_LINK_UNKNOWN;
}

static const char *island_prefix(enum gpu_vendor v)
{
	switch (v) {
	case GPU_VENDOR_NVIDIA:
		return "nvlink";
	case GPU_VENDOR_AMD:
		return "xgmi";
	case GPU_VENDOR_INTEL:
		return "xelink";
	case GPU_VENDOR_ANY:
		break;
	}
	return "island";
}

/* Bandwidth of GPU slot g inside an island whose members are marked in member[]. */
static double member_gbps(const struct agent_vendor_result *vr, const struct agent_gpu *g,
			  const bool *member, enum agent_link fast)
{
	const struct agent_topo *t = &vr->topo;
	int i = g->index;
	int links = 0;           /* NVLink: bonded links; Xe Link: lanes */
	for (int j = 0; j < t->n; j++) {
		if (j != i && member[j] && t->type[i][j] == fast)
			links += t->links[i][j];
	}
	if (vr->vendor == GPU_VENDOR_NVIDIA) {
		int max_links;
		double per = agent_nvlink_gbps(g->arch, g->compute_cap, g->model, &max_links);
		if (per <= 0)
			per = 25.0;   /* NVLink seen on a part we have no table row for: the NVLink 1/2 rate */
		if (max_links > 0 && links > max_links)
			links = max_links;
		return links * per;
	}
	if (vr->vendor == GPU_VENDOR_AMD) {
		double bw = agent_xgmi_gbps(g->arch, g->model);
		return bw > 0 ? bw : 50.0;   /* unknown generation: one Infinity Fabric link */
	}
	return links * 13.6;     /* one Xe Link lane carries about 13.6 GB/s */
}

int agent_compute_islands(struct agent_vendor_result *vr)
{
	for (int k = 0; k < vr->ngpu; k++) {
		vr->gpu[k].island[0] = '\0';
		vr->gpu[k].bandwidth_gbps = 0;
	}
	const struct agent_topo *t = &vr->topo;
	if (!vr->have_topo || t->n < 2)
		return 0;
	enum agent_link fast = fast_link(vr->vendor);
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
			double m = member_gbps(vr, &vr->gpu[slot[i]], member, fast);
			if (bw < 0 || m < bw)
				bw = m;
		}
		char name[48];
		snprintf(name, sizeof(name), "%s-%d", island_prefix(vr->vendor), nisland);
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
