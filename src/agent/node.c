/*
 * The node: devices from all vendors with node-unique ids, their islands,
 * and the node labels derived from them. Pure.
 */
#include "agent.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void agent_vendor_result_init(struct agent_vendor_result *vr, enum gpu_vendor v)
{
	memset(vr, 0, sizeof(*vr));
	vr->vendor = v;
}

void agent_note(struct agent_vendor_result *vr, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	size_t used = strlen(vr->note);
	if (used + (used ? 2 : 0) + strlen(msg) >= sizeof(vr->note))
		return;
	snprintf(vr->note + used, sizeof(vr->note) - used, "%s%s", used ? "; " : "", msg);
}

const char *agent_vstate_name(enum agent_vstate s)
{
	switch (s) {
	case AGENT_V_ABSENT:
		return "absent";
	case AGENT_V_OK:
		return "ok";
	case AGENT_V_FAILED:
		return "failed";
	case AGENT_V_STALE:
		return "stale";
	}
	return "unknown";
}

static int cmp_dev(const void *a, const void *b)
{
	const struct agent_device *x = a, *y = b;
	return (x->id > y->id) - (x->id < y->id);
}

static struct agent_island *island_slot(struct agent_node *node, const struct agent_device *d)
{
	for (int i = 0; i < node->nisland; i++) {
		if (!strcmp(node->island[i].name, d->g.island) && node->island[i].vendor == d->g.vendor)
			return &node->island[i];
	}
	if (node->nisland >= GPU_MAX_ISLANDS)
		return NULL;
	struct agent_island *is = &node->island[node->nisland++];
	memset(is, 0, sizeof(*is));
	_Static_assert(sizeof(is->name) == sizeof(d->g.island), "island name sizes");
	memcpy(is->name, d->g.island, sizeof(is->name));
	is->name[sizeof(is->name) - 1] = '\0';
	is->vendor = d->g.vendor;
	is->bandwidth_gbps = d->g.bandwidth_gbps;
	return is;
}

void agent_node_build(struct agent_node *node, const char *name,
		      const struct agent_vendor_result *const vr[AGENT_NVENDOR],
		      const enum agent_vstate vstate[AGENT_NVENDOR],
		      const char *const vmsg[AGENT_NVENDOR])
{
	memset(node, 0, sizeof(*node));
	snprintf(node->name, sizeof(node->name), "%s", name ? name : "");
	int max_id = -1;
	bool first = true;
	for (int v = 0; v < AGENT_NVENDOR; v++) {
		node->vstate[v] = vstate ? vstate[v] : AGENT_V_ABSENT;
		if (vmsg && vmsg[v])
			snprintf(node->vmsg[v], sizeof(node->vmsg[v]), "%s", vmsg[v]);
		const struct agent_vendor_result *r = vr ? vr[v] : NULL;
		node->vr[v] = r;
		if (!r || r->ngpu <= 0)
			continue;
		int base = first ? 0 : (max_id / 100 + 1) * 100;
		first = false;
		for (int k = 0; k < r->ngpu; k++) {
			const struct agent_gpu *g = &r->gpu[k];
			struct agent_device d;
			memset(&d, 0, sizeof(d));
			d.g = *g;
			d.parent_id = -1;
			if (g->mig_index >= 0) {
				d.parent_id = base + g->index;
				d.id = 1000 * (d.parent_id + 1) + g->mig_index;
			} else {
				d.id = base + g->index;
				if (d.id > max_id)
					max_id = d.id;
			}
			if (node->ndev >= AGENT_MAX_GPUS || agent_node_find(node, d.id) >= 0) {
				node->dropped++;
				continue;
			}
			node->dev[node->ndev++] = d;
		}
		/* a vendor whose GPUs are all in MIG mode still reserves its range */
		for (int k = 0; k < r->ngpu; k++) {
			if (base + r->gpu[k].index > max_id)
				max_id = base + r->gpu[k].index;
		}
	}
	qsort(node->dev, (size_t)node->ndev, sizeof(node->dev[0]), cmp_dev);
	for (int i = 0; i < node->ndev; i++) {
		const struct agent_device *d = &node->dev[i];
		if (!d->g.island[0])
			continue;
		struct agent_island *is = island_slot(node, d);
		if (!is)
			continue;
		if (d->g.bandwidth_gbps < is->bandwidth_gbps)
			is->bandwidth_gbps = d->g.bandwidth_gbps;
		is->member[is->nmember++] = d->id;
	}
}

int agent_node_find(const struct agent_node *node, int id)
{
	for (int i = 0; i < node->ndev; i++) {
		if (node->dev[i].id == id)
			return i;
	}
	return -1;
}

/* ---- labels ---- */

/* A Kubernetes label value: [A-Za-z0-9._-], at most 63, alphanumeric ends. */
static void label_value(char *out, size_t len, const char *in)
{
	size_t k = 0;
	bool dash = false;
	for (const char *p = in; *p && k + 1 < len && k < 63; p++) {
		unsigned char c = (unsigned char)*p;
		if (isalnum(c) || c == '.' || c == '_') {
			out[k++] = (char)c;
			dash = false;
		} else if (!dash && k > 0) {
			out[k++] = '-';
			dash = true;
		}
	}
	while (k > 0 && !isalnum((unsigned char)out[k - 1]))
		k--;
	out[k] = '\0';
}

static int add_label(char *buf, size_t len, size_t *used, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int add_label(char *buf, size_t len, size_t *used, const char *key, const char *fmt, ...)
{
	char raw[128], val[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	label_value(val, sizeof(val), raw);
	int n = snprintf(buf + *used, len - *used, "%s=%s\n", key, val);
	if (n < 0 || (size_t)n >= len - *used)
		return 0;
	*used += (size_t)n;
	return 1;
}

int agent_node_labels(const struct agent_node *node, char *buf, size_t len)
{
	if (!len)
		return 0;
	buf[0] = '\0';
	size_t used = 0;
	int n = 0;
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.present", "%s", node->ndev ? "true" : "false");
	if (!node->ndev)
		return n;
	const struct agent_gpu *f = &node->dev[0].g;
	bool one_vendor = true, one_model = true, one_arch = true, mig = false, fast = false;
	uint32_t min_mib = f->memory_mib;
	int per_vendor[AGENT_NVENDOR + 1] = { 0 };
	for (int i = 0; i < node->ndev; i++) {
		const struct agent_gpu *g = &node->dev[i].g;
		one_vendor &= g->vendor == f->vendor;
		one_model &= !strcmp(g->model, f->model);
		one_arch &= !strcmp(g->arch, f->arch);
		mig |= g->mig_profile[0] != '\0';
		fast |= g->island[0] != '\0';
		if (g->memory_mib < min_mib)
			min_mib = g->memory_mib;
		if ((unsigned)g->vendor <= AGENT_NVENDOR)
			per_vendor[g->vendor]++;
	}
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.count", "%d", node->ndev);
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.vendor", "%s",
		       one_vendor ? gpu_vendor_name(f->vendor) : "mixed");
	for (int v = 1; v <= AGENT_NVENDOR; v++) {
		if (per_vendor[v]) {
			char key[64];
			snprintf(key, sizeof(key), "gpu.scheduling/%s.count", gpu_vendor_name((enum gpu_vendor)v));
			n += add_label(buf, len, &used, key, "%d", per_vendor[v]);
		}
	}
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.model", "%s", one_model ? f->model : "mixed");
	if (f->arch[0] || !one_arch)
		n += add_label(buf, len, &used, "gpu.scheduling/gpu.architecture", "%s",
			       one_arch ? f->arch : "mixed");
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.memory-mib", "%u", min_mib);
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.fast-interconnect", "%s", fast ? "true" : "false");
	n += add_label(buf, len, &used, "gpu.scheduling/gpu.mig", "%s", mig ? "true" : "false");
	return n;
}
