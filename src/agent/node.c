/*
 * The node: devices from all vendors with node-unique ids, their islands,
 * and the node labels derived from them. Pure.
 */
#include "agent.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void agent_vendor_result_init(struct agent_vendor_result *vr, enum gpu_vendor v)
{
	memset(vr, 0, sizeof(*vr));
	vr->vendor = v;
}

void agent_gpu_init(struct agent_gpu *g, enum gpu_vendor v, int index)
{
	memset(g, 0, sizeof(*g));
	g->vendor = v;
	g->index = index;
	g->mig_index = -1;
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
			/* the range covers MIG parents too: a vendor whose GPUs are
			   all in MIG mode still reserves it */
			if (base + g->index > max_id)
				max_id = base + g->index;
			struct agent_device d;
			memset(&d, 0, sizeof(d));
			d.g = *g;
			d.parent_id = -1;
			if (g->mig_index >= 0) {
				d.parent_id = base + g->index;
				d.id = 1000 * (d.parent_id + 1) + g->mig_index;
			} else {
				d.id = base + g->index;
			}
			if (node->ndev >= AGENT_MAX_GPUS || agent_node_find(node, d.id) >= 0) {
				node->dropped++;
				continue;
			}
			node->dev[node->ndev++] = d;
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

int agent_node_healthy(const struct agent_node *node)
{
	int n = 0;
	for (int i = 0; i < node->ndev; i++)
		n += node->dev[i].g.health == GPU_HEALTHY;
	return n;
}

/* ---- labels ---- */

bool agent_label_value(char *out, size_t len, const char *in)
{
	if (!len)
		return false;
	size_t k = 0, max = len - 1 < AGENT_LABEL_VALUE_MAX ? len - 1 : AGENT_LABEL_VALUE_MAX;
	bool dash = false, cut = false;
	for (const char *p = in ? in : ""; *p; p++) {
		unsigned char c = (unsigned char)*p;
		char ch;
		if (isalnum(c)) {
			ch = (char)c;
		} else if ((c == '.' || c == '_') && k > 0) {
			ch = (char)c;
		} else if (k > 0 && !dash) {
			ch = '-';   /* a run of anything else becomes one '-' */
		} else {
			continue;   /* nothing may lead; no second '-' in a run */
		}
		if (k >= max) {
			cut = true;
			break;
		}
		out[k++] = ch;
		dash = ch == '-';
	}
	while (k > 0 && !isalnum((unsigned char)out[k - 1]))
		k--;
	out[k] = '\0';
	return !cut;
}

/*
 * The keys the agent owns: it sets them, and removes those it no longer
 * sets. One "<vendor>.count" per vendor of the table, written once.
 */
static const char *const base_keys[] = {
	AGENT_LABEL_PREFIX "present",
	AGENT_LABEL_PREFIX "count",
	AGENT_LABEL_PREFIX "vendor",
	/* the vendors' counts go here */
	AGENT_LABEL_PREFIX "model",
	AGENT_LABEL_PREFIX "architecture",
	AGENT_LABEL_PREFIX "memory-mib",
	AGENT_LABEL_PREFIX "fast-interconnect",
	AGENT_LABEL_PREFIX "mig",
};
#define NBASE_KEYS (sizeof(base_keys) / sizeof(base_keys[0]))
#define VENDOR_KEYS_AT 3
#define NKEYS (NBASE_KEYS + AGENT_NVENDOR)

static char vendor_keys[AGENT_NVENDOR][64];
static const char *managed_keys[NKEYS];
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;

static void keys_init(void)
{
	size_t n = 0;
	for (size_t i = 0; i < VENDOR_KEYS_AT; i++)
		managed_keys[n++] = base_keys[i];
	for (int v = 0; v < AGENT_NVENDOR; v++) {
		snprintf(vendor_keys[v], sizeof(vendor_keys[v]), AGENT_LABEL_PREFIX "%s.count",
			 gpu_vendor_name((enum gpu_vendor)(v + 1)));
		managed_keys[n++] = vendor_keys[v];
	}
	for (size_t i = VENDOR_KEYS_AT; i < NBASE_KEYS; i++)
		managed_keys[n++] = base_keys[i];
}

int agent_label_managed_keys(const char *const **keys)
{
	pthread_once(&keys_once, keys_init);
	*keys = managed_keys;
	return (int)NKEYS;
}

bool agent_label_managed(const char *key)
{
	pthread_once(&keys_once, keys_init);
	for (size_t i = 0; i < NKEYS; i++) {
		if (!strcmp(key, managed_keys[i]))
			return true;
	}
	return false;
}

static void add_label(struct agent_labels *ls, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void add_label(struct agent_labels *ls, const char *key, const char *fmt, ...)
{
	if (ls->n >= AGENT_MAX_LABELS)
		return;
	char raw[128];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	struct agent_label *l = &ls->l[ls->n++];
	snprintf(l->key, sizeof(l->key), "%s", key);
	agent_label_value(l->value, sizeof(l->value), raw);
}

void agent_node_label_set(const struct agent_node *node, struct agent_labels *ls)
{
	memset(ls, 0, sizeof(*ls));
	add_label(ls, AGENT_LABEL_PREFIX "present", "%s", node->ndev ? "true" : "false");
	if (!node->ndev)
		return;
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
	add_label(ls, AGENT_LABEL_PREFIX "count", "%d", node->ndev);
	add_label(ls, AGENT_LABEL_PREFIX "vendor", "%s", one_vendor ? gpu_vendor_name(f->vendor) : "mixed");
	for (int v = 1; v <= AGENT_NVENDOR; v++) {
		if (per_vendor[v]) {
			char key[64];
			snprintf(key, sizeof(key), AGENT_LABEL_PREFIX "%s.count", gpu_vendor_name((enum gpu_vendor)v));
			add_label(ls, key, "%d", per_vendor[v]);
		}
	}
	add_label(ls, AGENT_LABEL_PREFIX "model", "%s", one_model ? f->model : "mixed");
	if (f->arch[0] || !one_arch)
		add_label(ls, AGENT_LABEL_PREFIX "architecture", "%s", one_arch ? f->arch : "mixed");
	add_label(ls, AGENT_LABEL_PREFIX "memory-mib", "%u", min_mib);
	add_label(ls, AGENT_LABEL_PREFIX "fast-interconnect", "%s", fast ? "true" : "false");
	add_label(ls, AGENT_LABEL_PREFIX "mig", "%s", mig ? "true" : "false");
}

const char *agent_labels_get(const struct agent_labels *ls, const char *key)
{
	for (int i = 0; i < ls->n; i++) {
		if (!strcmp(ls->l[i].key, key))
			return ls->l[i].value;
	}
	return NULL;
}

bool agent_labels_equal(const struct agent_labels *a, const struct agent_labels *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++) {
		const char *v = agent_labels_get(b, a->l[i].key);
		if (!v || strcmp(v, a->l[i].value))
			return false;
	}
	return true;
}

int agent_node_labels(const struct agent_node *node, char *buf, size_t len)
{
	if (!len)
		return 0;
	buf[0] = '\0';
	struct agent_labels ls;
	agent_node_label_set(node, &ls);
	size_t used = 0;
	int n = 0;
	for (int i = 0; i < ls.n; i++) {
		int w = snprintf(buf + used, len - used, "%s=%s\n", ls.l[i].key, ls.l[i].value);
		if (w < 0 || (size_t)w >= len - used) {
			buf[used] = '\0';
			break;
		}
		used += (size_t)w;
		n++;
	}
	return n;
}
