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

/* Everything of a claim that is not an array: the packed form's head. */
struct claim_head {
	int64_t cpu_milli, mem_mib_host;
	double min_bw_gbps;
	uint32_t mem_mib, core, min_mem_mib;
	int32_t count, nprefer, nmatch, policy, gang_size, gang_timeout_s;
	uint8_t mode, placement, vendor, topo, gang_kind;
};

/* The head's fields but nmatch (claim_add_match counts the labels back), named as in struct claim. */
#define CLAIM_HEAD(X) X(cpu_milli) X(mem_mib_host) X(min_bw_gbps) X(mem_mib) X(core) X(min_mem_mib) X(count) \
	X(nprefer) X(policy) X(gang_size) X(gang_timeout_s) X(mode) X(placement) X(vendor) X(topo) X(gang_kind)

/* A new field in struct claim needs a place in the packed form: in the head or after it (size on LP64). */
_Static_assert(sizeof(void *) != 8 || sizeof(struct claim) == 1208, "claim_pack: pack the new field of struct claim");

int claim_pack(const struct claim *c, struct buf *out)
{
	struct claim_head h;
	memset(&h, 0, sizeof(h));   /* its padding goes into the packed bytes too */
#define TO_HEAD(f) h.f = c->f;
	CLAIM_HEAD(TO_HEAD)
#undef TO_HEAD
	h.nmatch = c->nmatch;
	int bad = buf_add(out, &h, sizeof(h)) |
		  buf_add(out, c->prefer_ids, (size_t)c->nprefer * sizeof(c->prefer_ids[0])) |
		  buf_add_str(out, c->models) | buf_add_str(out, c->arch) | buf_add_str(out, c->gpuclaim) |
		  buf_add_str(out, c->gang) | buf_add_str(out, c->pod_version);
	for (int i = 0; i < c->nmatch; i++)
		bad |= buf_add_str(out, c->match[i].key) | buf_add_str(out, c->match[i].value);
	return bad ? -1 : 0;
}

int claim_unpack(const void *in, struct claim *out)
{
	struct claim_head h;
	memcpy(&h, in, sizeof(h));
	claim_init(out);
#define FROM_HEAD(f) out->f = h.f;
	CLAIM_HEAD(FROM_HEAD)
#undef FROM_HEAD
	const unsigned char *at = (const unsigned char *)in + sizeof(h);
	memcpy(out->prefer_ids, at, (size_t)h.nprefer * sizeof(out->prefer_ids[0]));
	at += (size_t)h.nprefer * sizeof(out->prefer_ids[0]);
	buf_take_str(&at, out->models, sizeof(out->models));
	buf_take_str(&at, out->arch, sizeof(out->arch));
	buf_take_str(&at, out->gpuclaim, sizeof(out->gpuclaim));
	buf_take_str(&at, out->gang, sizeof(out->gang));
	buf_take_str(&at, out->pod_version, sizeof(out->pod_version));
	for (int i = 0; i < h.nmatch; i++) {
		const char *key = (const char *)at;
		at += strlen(key) + 1;
		if (claim_add_match(out, key, (const char *)at)) {
			claim_release(out);
			return -1;
		}
		at += strlen((const char *)at) + 1;
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
