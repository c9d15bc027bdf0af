#include "gpu.h"

#include <assert.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const health_names[] = { "Healthy", "Unhealthy", "Unknown" };

const char *gpu_health_name(enum gpu_health h)
{
	return (unsigned)h < 3 ? health_names[h] : "Unknown";
}

bool gpu_health_parse(const char *s, enum gpu_health *out)
{
	for (int i = 0; i < 3; i++) {
		if (!strcasecmp(s, health_names[i])) {
			*out = (enum gpu_health)i;
			return true;
		}
	}
	return false;
}

static_assert(sizeof(struct gpu_device) == 32, "two devices per cache line");

/* Adds milli-GPU to a device's use, saturating instead of wrapping. */
static void add_core(struct gpu_device *d, int32_t delta)
{
	int32_t v = (int32_t)d->used_core + delta;
	d->used_core = (uint16_t)(v < 0 ? 0 : v > UINT16_MAX ? UINT16_MAX : v);
}

void gpu_hold(struct gpu_device *d, bool shared, uint32_t mem_mib, uint32_t core)
{
	if (shared) {
		d->shared++;
		d->used_mib += mem_mib;
		add_core(d, (int32_t)core);
	} else {
		d->exclusive++;
	}
}

void gpu_unhold(struct gpu_device *d, bool shared, uint32_t mem_mib, uint32_t core)
{
	if (shared) {
		d->shared -= d->shared > 0;
		d->used_mib -= d->used_mib < mem_mib ? d->used_mib : mem_mib;
		add_core(d, -(int32_t)core);
	} else {
		d->exclusive -= d->exclusive > 0;
	}
}

/* Does alt (len bytes) occur in hay as whole words, case-insensitively? */
static bool contains_words(const char *hay, const char *alt, size_t len)
{
	size_t hl = strlen(hay);
	for (size_t i = 0; i + len <= hl; i++) {
		if (strncasecmp(hay + i, alt, len))
			continue;
		bool left = i == 0 || !isalnum((unsigned char)hay[i - 1]);
		bool right = i + len == hl || !isalnum((unsigned char)hay[i + len]);
		if (left && right)
			return true;
	}
	return false;
}

bool gpu_model_matches(const char *want, const struct gpu_device_info *d)
{
	if (!want || !*want)
		return true;
	const char *p = want;
	for (;;) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);
		if (len && (contains_words(d->model, p, len) ||
			    (d->mig_profile[0] && strlen(d->mig_profile) == len &&
			     !strncasecmp(d->mig_profile, p, len))))
			return true;
		if (!bar)
			return false;
		p = bar + 1;
	}
}

const char gpu_label_is_node_name[] = "";

const char *gpu_node_label(const struct gpu_node *n, const char *key)
{
	int lo = 0, hi = n->nlabels - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(n->labels[mid].key, key);
		if (!c)
			return gpu_label_value(n, mid);
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

struct gpu_node *gpu_node_new(const char *name)
{
	struct gpu_node *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	return n;
}

void gpu_node_free(struct gpu_node *n)
{
	if (!n)
		return;
	for (int i = 0; i < n->nlabels; i++) {
		free(n->labels[i].key);
		free(n->labels[i].value);
	}
	free(n->labels);
	free(n->dev);
	for (int i = 0; n->info && i < n->ndev; i++)
		free((void *)n->info[i].uuid);
	free(n->info);
	free(n->islands);
	free(n->name);
	free(n);
}

struct gpu_node *gpu_node_clone(const struct gpu_node *src)
{
	struct gpu_node *n = gpu_node_new(src->name);
	if (!n)
		return NULL;
	char *name = n->name;
	*n = *src;
	n->name = name;
	n->labels = NULL;
	n->dev = NULL;
	n->info = NULL;
	n->islands = NULL;
	n->nlabels = 0;
	if (src->nlabels) {
		n->labels = calloc((size_t)src->nlabels, sizeof(*n->labels));
		if (!n->labels)
			goto fail;
		for (int i = 0; i < src->nlabels; i++) {
			n->labels[i].key = strdup(src->labels[i].key);
			n->labels[i].value = strdup(gpu_label_value(src, i));
			n->nlabels++;
			if (!n->labels[i].key || !n->labels[i].value)
				goto fail;
		}
	}
	if (src->ndev) {
		n->dev = malloc((size_t)src->ndev * sizeof(*n->dev));
		n->info = calloc((size_t)src->ndev, sizeof(*n->info));   /* no UUID to free until copied */
		if (!n->dev || !n->info)
			goto fail;
		memcpy(n->dev, src->dev, (size_t)src->ndev * sizeof(*n->dev));
		for (int i = 0; i < src->ndev; i++) {
			char *uuid = strdup(src->info[i].uuid);
			if (!uuid)
				goto fail;
			n->info[i] = src->info[i];
			n->info[i].uuid = uuid;
		}
	}
	if (src->nisland) {
		n->islands = malloc((size_t)src->nisland * sizeof(*n->islands));
		if (!n->islands)
			goto fail;
		memcpy(n->islands, src->islands, (size_t)src->nisland * sizeof(*n->islands));
	}
	return n;
fail:
	gpu_node_free(n);
	return NULL;
}

int gpu_node_set_label(struct gpu_node *n, const char *key, const char *value)
{
	int pos = 0;
	while (pos < n->nlabels && strcmp(n->labels[pos].key, key) < 0)
		pos++;
	char *v = strdup(value);
	if (!v)
		return -1;
	if (pos < n->nlabels && !strcmp(n->labels[pos].key, key)) {
		free(n->labels[pos].value);
		n->labels[pos].value = v;
		return 0;
	}
	char *k = strdup(key);
	struct label *l = realloc(n->labels, (size_t)(n->nlabels + 1) * sizeof(*l));
	if (!k || !l) {
		free(k);
		free(v);
		if (l)
			n->labels = l;
		return -1;
	}
	n->labels = l;
	memmove(&l[pos + 1], &l[pos], (size_t)(n->nlabels - pos) * sizeof(*l));
	l[pos].key = k;
	l[pos].value = v;
	n->nlabels++;
	return 0;
}

int gpu_node_add_device(struct gpu_node *n, const struct gpu_device *d,
			const struct gpu_device_info *info)
{
	if (n->ndev >= GPU_MAX_DEVICES)
		return -1;
	char *uuid = strdup(info && info->uuid ? info->uuid : "");
	struct gpu_device *dev = uuid ? realloc(n->dev, (size_t)(n->ndev + 1) * sizeof(*dev)) : NULL;
	if (dev)
		n->dev = dev;
	struct gpu_device_info *inf = dev ? realloc(n->info, (size_t)(n->ndev + 1) * sizeof(*inf)) : NULL;
	if (!inf) {
		free(uuid);
		return -1;
	}
	n->info = inf;
	int pos = n->ndev;
	while (pos > 0 && dev[pos - 1].id > d->id) {
		dev[pos] = dev[pos - 1];
		inf[pos] = inf[pos - 1];
		pos--;
	}
	dev[pos] = *d;
	if (info)
		inf[pos] = *info;
	else
		memset(&inf[pos], 0, sizeof(inf[pos]));
	inf[pos].uuid = uuid;
	/* The strings are never NULL. */
	const char **strs[] = { &inf[pos].model, &inf[pos].arch, &inf[pos].driver, &inf[pos].mig_profile };
	for (size_t k = 0; k < sizeof(strs) / sizeof(strs[0]); k++)
		if (!*strs[k])
			*strs[k] = "";
	dev[pos].mig = inf[pos].mig_profile[0] != '\0';
	n->ndev++;
	return 0;
}

int gpu_node_island(struct gpu_node *n, const char *name, double bandwidth_gbps)
{
	for (int i = 0; i < n->nisland; i++) {
		if (!strcmp(n->islands[i].name, name)) {
			if (bandwidth_gbps > n->islands[i].bandwidth_gbps)
				n->islands[i].bandwidth_gbps = bandwidth_gbps;
			return i;
		}
	}
	if (n->nisland >= GPU_MAX_ISLANDS)
		return -1;
	struct gpu_island *is = realloc(n->islands, (size_t)(n->nisland + 1) * sizeof(*is));
	if (!is)
		return -1;
	n->islands = is;
	memset(&is[n->nisland], 0, sizeof(*is));
	strncpy(is[n->nisland].name, name, sizeof(is->name) - 1);
	is[n->nisland].bandwidth_gbps = bandwidth_gbps;
	return n->nisland++;
}

int gpu_node_find_device(const struct gpu_node *n, int id)
{
	for (int i = 0; i < n->ndev; i++)
		if (n->dev[i].id == id)
			return i;
	return -1;
}

/* One step of each chain: xor, multiply (odd), xor-shift; each a bijection. */
static void mix(struct gpu_state_digest *h, uint64_t v)
{
	h->a = (h->a ^ v) * 0x9e3779b97f4a7c15ULL;
	h->a ^= h->a >> 31;
	h->b = (h->b ^ v) * 0xc2b2ae3d27d4eb4fULL;
	h->b ^= h->b >> 29;
}

struct gpu_state_digest gpu_node_state_digest(const struct gpu_node *n)
{
	struct gpu_state_digest h = { 0x5eedULL, 0x243f6a8885a308d3ULL };
	mix(&h, (uint64_t)(uint32_t)n->ndev << 32 | (uint32_t)n->nisland);
	mix(&h, (uint64_t)n->task_kinds << 32 | (uint32_t)n->share_slots);
	mix(&h, (uint64_t)n->cpu_cap);
	mix(&h, (uint64_t)n->cpu_used);
	mix(&h, (uint64_t)n->mem_cap);
	mix(&h, (uint64_t)n->mem_used);
	for (int i = 0; i < n->ndev; i++) {
		const struct gpu_device *d = &n->dev[i];
		mix(&h, (uint64_t)(uint32_t)d->id << 32 | (uint32_t)d->island);
		mix(&h, (uint64_t)d->vendor << 48 | (uint64_t)d->health << 40 | (uint64_t)d->external << 33 |
			(uint64_t)d->mig << 32 | d->memory_mib);
		mix(&h, (uint64_t)d->used_mib << 32 | (uint64_t)d->used_core << 16 | d->exclusive);
		mix(&h, d->shared);
	}
	for (int i = 0; i < n->nisland; i++) {
		uint64_t bw;
		memcpy(&bw, &n->islands[i].bandwidth_gbps, sizeof(bw));
		mix(&h, bw);
		/* The name in words, its length last: "ab" and "a" + "b" differ. */
		const char *name = n->islands[i].name;
		size_t len = strnlen(name, sizeof(n->islands[i].name));
		for (size_t k = 0; k < len; k += 8) {
			uint64_t w = 0;
			memcpy(&w, name + k, len - k < 8 ? len - k : 8);
			mix(&h, w);
		}
		mix(&h, len);
	}
	return h;
}

/* Whether device a (after) offers more than b (before): usable now with room, or less held. */
static bool device_gained(const struct gpu_device *a, const struct gpu_device *b)
{
	if (!gpu_usable(a))
		return false;
	if (!b || !gpu_usable(b) || a->memory_mib > b->memory_mib)
		return !a->exclusive && gpu_free_mib(a) > 0 && gpu_free_core(a) > 0;
	return a->exclusive < b->exclusive || a->shared < b->shared || a->used_mib < b->used_mib ||
	       a->used_core < b->used_core;
}

bool gpu_node_gained(const struct gpu_node *before, const struct gpu_node *after)
{
	if (!after)
		return false;
	if (before && ((after->cpu_cap && after->cpu_cap - after->cpu_used > before->cpu_cap - before->cpu_used) ||
		       (after->mem_cap && after->mem_cap - after->mem_used > before->mem_cap - before->mem_used)))
		return true;
	/* Both sorted by id: one walk. */
	int j = 0;
	for (int i = 0; i < after->ndev; i++) {
		const struct gpu_device *a = &after->dev[i], *b = NULL;
		while (before && j < before->ndev && before->dev[j].id < a->id)
			j++;
		if (before && j < before->ndev && before->dev[j].id == a->id)
			b = &before->dev[j];
		if (device_gained(a, b))
			return true;
	}
	return false;
}
