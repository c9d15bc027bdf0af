#include "keyset.h"
#include "strmap.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char deleted_marker;
#define DELETED ((void *)&deleted_marker)

/* The hash's top bits, kept beside each slot: a probe reads a record's key only when they match. */
static uint16_t tag_of(size_t h)
{
	return (uint16_t)(h >> (sizeof(size_t) * 8 - 16));
}

void keyset_init(struct keyset *s, keyset_key_fn key_of)
{
	memset(s, 0, sizeof(*s));
	s->key_of = key_of;
}

void keyset_release(struct keyset *s)
{
	unsigned rehashes = s->rehashes + 1;
	free(s->slot);
	keyset_init(s, s->key_of);
	s->rehashes = rehashes;
}

/* The index of the slot holding key's record, or -1. */
static ptrdiff_t find(const struct keyset *s, const char *key)
{
	if (!s->cap)
		return -1;
	size_t h = strmap_hash(key);
	uint16_t tag = tag_of(h);
	for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		void *rec = s->slot[i];
		if (!rec)
			return -1;
		if (rec != DELETED && s->tag[i] == tag && !strcmp(s->key_of(rec), key))
			return (ptrdiff_t)i;
	}
}

void *keyset_get(const struct keyset *s, const char *key)
{
	ptrdiff_t i = find(s, key);
	return i >= 0 ? s->slot[i] : NULL;
}

/* Puts rec, of hash h, in the first free slot (empty or deleted) of its probe; true when it was empty. */
static bool place(void **slot, uint16_t *tag, size_t cap, void *rec, size_t h)
{
	size_t i = h & (cap - 1);
	while (slot[i] && slot[i] != DELETED)
		i = (i + 1) & (cap - 1);
	bool empty = !slot[i];
	slot[i] = rec;
	tag[i] = tag_of(h);
	return empty;
}

static int grow(struct keyset *s)
{
	size_t cap = s->cap ? s->cap * 2 : 16;
	if (s->len * 2 < s->cap)
		cap = s->cap;   /* mostly deleted slots: rehash at this size */
	void **slot = calloc(cap, sizeof(*slot) + sizeof(*s->tag));
	if (!slot)
		return -1;
	uint16_t *tag = (uint16_t *)(slot + cap);
	for (size_t i = 0; i < s->cap; i++)
		if (s->slot[i] && s->slot[i] != DELETED)
			place(slot, tag, cap, s->slot[i], strmap_hash(s->key_of(s->slot[i])));
	free(s->slot);
	s->slot = slot;
	s->tag = tag;
	s->cap = cap;
	s->used = s->len;
	s->rehashes++;
	return 0;
}

int keyset_put(struct keyset *s, void *rec, void **old)
{
	const char *key = s->key_of(rec);
	ptrdiff_t at = find(s, key);
	if (old)
		*old = at >= 0 ? s->slot[at] : NULL;
	if (at >= 0) {
		s->slot[at] = rec;
		return 0;
	}
	if ((s->used + 1) * 4 > s->cap * 3 && grow(s))
		return -1;
	s->used += place(s->slot, s->tag, s->cap, rec, strmap_hash(key));
	s->len++;
	return 0;
}

void *keyset_del(struct keyset *s, const char *key)
{
	ptrdiff_t i = find(s, key);
	if (i < 0)
		return NULL;
	void *rec = s->slot[i];
	s->slot[i] = DELETED;
	s->len--;
	return rec;
}

void *keyset_next(const struct keyset *s, size_t *pos)
{
	for (; *pos < s->cap; (*pos)++) {
		void *rec = s->slot[*pos];
		if (rec && rec != DELETED) {
			(*pos)++;
			return rec;
		}
	}
	return NULL;
}
