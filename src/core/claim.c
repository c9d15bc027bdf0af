#include "claim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void claim_init(struct claim *c)
{
	memset(c, 0, sizeof(*c));
	c->policy = -1;
}

void claim_release(struct claim *c)
{
	for (int i = 0; i < c->nmatch; i++) {
		free(c->match[i].key);
		free(c->match[i].value);
	}
	claim_init(c);
}

int claim_add_match(struct claim *c, const char *key, const char *value)
{
	if (c->nmatch >= CLAIM_MAX_MATCH)
		return -1;
	char *k = strdup(key), *v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		return -1;
	}
	c->match[c->nmatch].key = k;
	c->match[c->nmatch].value = v;
	c->nmatch++;
	return 0;
}

int claim_copy(struct claim *dst, const struct claim *src)
{
	*dst = *src;
	dst->nmatch = 0;
	for (int i = 0; i < src->nmatch; i++) {
		if (claim_add_match(dst, src->match[i].key, src->match[i].value)) {
			claim_release(dst);
			return -1;
		}
	}
	return 0;
}

bool claim_wants_gpu(const struct claim *c)
{
	return c->mode != CLAIM_NONE && c->count > 0;
}

const char *claim_mode_name(enum claim_mode m)
{
	return m == CLAIM_SHARED ? "Shared" : m == CLAIM_MIG ? "MIG" : "Exclusive";
}

bool claim_reads_node_strings(const struct claim *c)
{
	return c->models[0] || c->arch[0] || c->nmatch > 0;
}

uint32_t claim_task_kind(const struct claim *c)
{
	if (!claim_wants_gpu(c))
		return TASK_KIND_CPU_ONLY;
	if (c->mode == CLAIM_SHARED)
		return TASK_KIND_SHARED;
	return TASK_KIND_WHOLE(c->count);
}

int64_t claim_gpu_milli(const struct claim *c)
{
	if (!claim_wants_gpu(c))
		return 0;
	if (c->mode == CLAIM_SHARED)
		return (int64_t)c->count * c->core;
	return (int64_t)c->count * GPU_CORE_FULL;
}

void claim_from_task(struct claim *c, int64_t cpu_milli, int64_t mem_mib, int count, uint32_t milli,
		     const char *models)
{
	claim_init(c);
	c->cpu_milli = cpu_milli;
	c->mem_mib_host = mem_mib;
	if (count <= 0 || !milli)
		return;
	c->count = count;
	if (milli < GPU_CORE_FULL) {
		c->mode = CLAIM_SHARED;
		c->core = milli;
	} else {
		c->mode = CLAIM_EXCLUSIVE;
	}
	snprintf(c->models, sizeof(c->models), "%s", models);
}
